// Builds the viewer into one script and one stylesheet that torchatlas inlines
// into every HTML page: src/torchatlas/_render/web/viewer.{js,css}.
// elkjs's worker code is bundled as code: the page starts its layout workers
// from a Blob URL holding this same script (see web/src/layout.js), so the page
// needs no other file, no server and no eval.

import { build } from "esbuild";
import { copyFile, mkdir } from "node:fs/promises";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const outDir = resolve(here, "../src/torchatlas/_render/web");
await mkdir(outDir, { recursive: true });
await build({
  entryPoints: [resolve(here, "src/main.js")],
  outfile: resolve(outDir, "viewer.js"),
  bundle: true,
  minify: true,
  format: "iife",
  target: ["chrome100", "firefox100", "safari15"],
  legalComments: "inline",
  logLevel: "info",
});
await copyFile(resolve(here, "src/viewer.css"), resolve(outDir, "viewer.css"));
