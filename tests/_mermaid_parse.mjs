// Parse Mermaid flowcharts with mermaid's own flowchart parser, in Node (no browser):
//   node _mermaid_parse.mjs <mermaid package dir> <file.mmd>...
// Prints one JSON line per file: {file, ok, vertices, edges, subgraphs} or {file, ok: false, error}.
// Labels are not sanitised here (DOMPurify needs a DOM): parsing is what is checked.
import { readFileSync, readdirSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { pathToFileURL } from "node:url";

const [dir, ...files] = process.argv.slice(2);
const require = createRequire(join(dir, "package.json"));
const purifyDir = dirname(dirname(require.resolve("dompurify"))); // dist/purify.cjs.js -> the package
const esm = join(purifyDir, JSON.parse(readFileSync(join(purifyDir, "package.json"), "utf8")).module); // the copy mermaid imports
const purify = (await import(pathToFileURL(esm).href)).default;
Object.assign(purify, { addHook() {}, removeHook() {}, removeHooks() {}, sanitize: (text) => text });
const chunks = join(dir, "dist", "chunks", "mermaid.core");
const flow = readdirSync(chunks).find((name) => /^flowDiagram-.*\.mjs$/.test(name));
const { createFlowDiagram } = await import(pathToFileURL(join(chunks, flow)).href);
for (const file of files) {
  const diagram = createFlowDiagram();
  const db = diagram.db; // a getter: one database, held
  diagram.parser.parser.yy = db;
  try {
    diagram.parser.parse(readFileSync(file, "utf8"));
    console.log(JSON.stringify({ file, ok: true, vertices: db.getVertices().size, edges: db.getEdges().length, subgraphs: db.getSubGraphs().length }));
  } catch (e) {
    console.log(JSON.stringify({ file, ok: false, error: String(e).split("\n")[0] }));
  }
}
