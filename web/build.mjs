// Builds the viewer into one script and one stylesheet that torchatlas inlines
// into every HTML page: src/torchatlas/_render/web/viewer.{js,css}.
// elkjs's worker is bundled as a string (see the plugin) and started from a
// Blob URL, so the page needs no other file and no server.

import { build } from "esbuild";
import { readFile, copyFile, mkdir } from "node:fs/promises";
import { createRequire } from "node:module";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const outDir = resolve(here, "../src/torchatlas/_render/web");
const require = createRequire(import.meta.url);

const elkWorkerSource = {
  name: "elk-worker-source",
  setup(b) {
    b.onResolve({ filter: /^elk-worker-source$/ }, () => ({ path: require.resolve("elkjs/lib/elk-worker.min.js"), namespace: "elk-worker-source" }));
    b.onLoad({ filter: /.*/, namespace: "elk-worker-source" }, async (args) => ({ contents: await readFile(args.path, "utf8"), loader: "text" }));
  },
};

await mkdir(outDir, { recursive: true });
await build({
  entryPoints: [resolve(here, "src/main.js")],
  outfile: resolve(outDir, "viewer.js"),
  bundle: true,
  minify: true,
  format: "iife",
  target: ["chrome100", "firefox100", "safari15"],
  legalComments: "inline",
  plugins: [elkWorkerSource],
  logLevel: "info",
});
await copyFile(resolve(here, "src/viewer.css"), resolve(outDir, "viewer.css"));
