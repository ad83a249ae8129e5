// Turns the visible graph into an ELK layered layout, computed in a web worker.
// The worker's code is bundled as text and started from a Blob URL, because the
// page is a single file that may be opened from file:// with no server.

import ELK from "elkjs/lib/elk-api.js";
import workerSource from "elk-worker-source";

export const HEADER = 30; // room for an expanded module's title bar
const PAD = 12;
const BIG_GRAPH = 60; // leaf boxes
const CACHE_SIZE = 24; // layouts kept, most recently used last
const cache = new Map(); // ELK input as JSON -> ELK output

/** ELK's own in-thread stand-in for its worker, for pages where workers are refused. */
function inThreadWorker() {
  const module = { exports: {} };
  new Function("module", "exports", workerSource)(module, module.exports);
  return new module.exports.Worker();
}

let elk = null;
let inThread = false; // workers refused: ELK shares the page's thread
function engine() {
  if (!elk) {
    const url = URL.createObjectURL(new Blob([workerSource], { type: "text/javascript" }));
    const factory = (u) => {
      try {
        return new Worker(u);
      } catch {
        inThread = true;
        return inThreadWorker();
      }
    };
    elk = new ELK({ workerUrl: url, workerFactory: factory });
  }
  return elk;
}

const ROOT_OPTIONS = {
  "elk.algorithm": "layered",
  "elk.direction": "DOWN",
  "elk.hierarchyHandling": "INCLUDE_CHILDREN",
  "elk.json.edgeCoords": "ROOT",
  "elk.json.shapeCoords": "ROOT",
  "elk.edgeRouting": "ORTHOGONAL",
  "elk.layered.considerModelOrder.strategy": "NODES_AND_EDGES",
  "elk.layered.nodePlacement.strategy": "BRANDES_KOEPF",
  "elk.layered.nodePlacement.bk.fixedAlignment": "BALANCED",
  "elk.spacing.nodeNode": "22",
  "elk.layered.spacing.nodeNodeBetweenLayers": "34",
  "elk.spacing.edgeNode": "14",
  "elk.spacing.edgeEdge": "10",
  "elk.layered.spacing.edgeNodeBetweenLayers": "12",
  "elk.padding": "[top=20,left=20,bottom=20,right=20]",
  // Boxes are sized by the renderer; ELK's per-node label pass is pure overhead here.
  "elk.omitNodeMicroLayout": "true",
};

const CONTAINER_OPTIONS = {
  "elk.padding": `[top=${HEADER + PAD},left=${PAD},bottom=${PAD},right=${PAD}]`,
  "elk.nodeSize.constraints": "MINIMUM_SIZE",
};

/** A compound graph shaped like an opened decoder layer: nested modules, branches that rejoin, edges across module borders. */
function warmUpGraph() {
  let next = 0;
  const edge = (a, b) => ({ id: `${a}>${b}`, sources: [a], targets: [b] });
  const leaf = (into) => {
    next += 1;
    const box = { id: `w${next}`, width: 64 + (next % 5) * 12, height: next % 4 ? 28 : 40 };
    into.children.push(box);
    return box.id;
  };
  const group = (into, minWidth) => {
    const g = { id: `w${++next}`, children: [], edges: [] };
    g.layoutOptions = { ...CONTAINER_OPTIONS, "elk.nodeSize.minimum": `(${HEADER + 20},${minWidth})` };
    into.children.push(g);
    return g;
  };
  const chain = (into, length) => {
    const ids = [leaf(into)];
    while (ids.length < length) {
      ids.push(leaf(into));
      into.edges.push(edge(ids.at(-2), ids.at(-1)));
    }
    return ids;
  };
  const root = { id: "w0", children: [], edges: [], layoutOptions: { ...ROOT_OPTIONS, "elk.layered.thoroughness": "1" } };
  let prev = leaf(root);
  let prevOwner = root;
  const layer = group(root, 240);
  for (let b = 0; b < 2; b++) {
    const block = group(layer, 200);
    const inner = group(block, 120);
    const branches = [chain(block, 6), chain(inner, 4), chain(block, 5)];
    const join = leaf(layer);
    for (const ids of branches) {
      prevOwner.edges.push(edge(prev, ids[0]));
      layer.edges.push(edge(ids.at(-1), join));
    }
    layer.edges.push(edge(prev, join)); // the residual connection
    [prev, prevOwner] = [join, layer];
  }
  root.edges.push(edge(prev, leaf(root)));
  return root;
}

let pending = 0; // real layouts requested and not yet answered

/**
 * Run ELK on a representative graph `rounds` times in the background, so that
 * its code is compiled and optimised before the next real layout: a cold
 * engine takes several times longer than a warm one. A round waits while a real
 * layout is under way, so warming delays a real layout by at most one round.
 * Without a worker, warming would freeze the page, so it does not happen; a
 * failure here is left for the real layout to report.
 */
export async function warmUp(rounds) {
  engine();
  for (let i = 0; i < rounds && !inThread; i++) {
    while (pending > 0) await new Promise((resolve) => setTimeout(resolve, 16));
    await engine().layout(warmUpGraph());
  }
}

/** The ELK input for `graph`; see layout() for the arguments. */
function elkInput(graph, sizeOf, minWidthOf) {
  const { leaves, containers, drawn: edges } = graph;
  const chainOf = new Map(); // leaf or container id -> container indices root..own
  const containerChain = (cIdx) => {
    const key = "c" + cIdx;
    if (chainOf.has(key)) return chainOf.get(key);
    const c = containers.get(cIdx);
    const chain = c.parent < 0 ? [cIdx] : [...containerChain(c.parent), cIdx];
    chainOf.set(key, chain);
    return chain;
  };
  const elkNodes = new Map();
  const build = (cIdx) => {
    const c = containers.get(cIdx);
    const children = c.children.map((id) => {
      if (id[0] === "c") return build(Number(id.slice(1)));
      const { width, height } = sizeOf(id);
      return { id, width, height };
    });
    const node = { id: "c" + cIdx, children, edges: [] };
    if (cIdx !== 0) {
      // ELK transposes the minimum size for DOWN layouts, so it is given as (height, width).
      node.layoutOptions = { ...CONTAINER_OPTIONS, "elk.nodeSize.minimum": `(${HEADER + 20},${minWidthOf(cIdx)})` };
    }
    elkNodes.set(cIdx, node);
    return node;
  };
  const root = build(0);
  // ELK retries crossing minimisation `thoroughness` times; with model order
  // already guiding it, big graphs lose little and lay out about twice as fast.
  root.layoutOptions = { ...ROOT_OPTIONS, "elk.layered.thoroughness": leaves.size > BIG_GRAPH ? "1" : "7" };
  const endChain = (id) => (id[0] === "c" ? containerChain(Number(id.slice(1))) : containerChain(leaves.get(id).container));
  for (const e of edges) {
    const a = endChain(e.source);
    const b = endChain(e.target);
    let k = 0;
    while (k + 1 < a.length && k + 1 < b.length && a[k + 1] === b[k + 1]) k++;
    elkNodes.get(a[k]).edges.push({ id: e.id, sources: [e.source], targets: [e.target] });
  }
  return root;
}

/**
 * ELK's answer for `root`, from the cache when this input was laid out (or
 * requested) before. The cache holds promises, so a request for a layout that
 * is still being computed waits for that computation instead of repeating it.
 */
function cachedLayout(root) {
  const key = JSON.stringify(root);
  let out = cache.get(key);
  if (out) cache.delete(key);
  else {
    pending += 1;
    out = engine()
      .layout(root)
      .finally(() => {
        pending -= 1;
      });
    out.catch(() => cache.delete(key)); // a failed layout is not kept
  }
  cache.set(key, out);
  if (cache.size > CACHE_SIZE) cache.delete(cache.keys().next().value);
  return out;
}

/**
 * Start laying out a view the user is likely to ask for next, so that asking
 * for it finds the layout done or under way. Arguments as for layout().
 */
export function prefetch(graph, sizeOf, minWidthOf) {
  cachedLayout(elkInput(graph, sizeOf, minWidthOf)).catch(() => {});
}

/**
 * Lay out `graph` (Model.visibleGraph()) where `sizeOf(id)` gives leaf box sizes,
 * and `minWidthOf(containerIdx)` the width an expanded module needs for its title.
 * Edge labels are placed by the renderer, not by ELK: label dummies would
 * stretch modules over extra layers and slow the layout down.
 * Resolves to {boxes: Map(id -> {x, y, width, height}), routes: Map(id -> points), width, height, ms}.
 */
export async function layout(graph, sizeOf, minWidthOf) {
  const root = elkInput(graph, sizeOf, minWidthOf);
  const t0 = performance.now();
  // Going back to a view seen before (collapse after expand) reuses its layout.
  const out = await cachedLayout(root);
  const ms = performance.now() - t0;
  const boxes = new Map();
  const routes = new Map();
  const walk = (n) => {
    boxes.set(n.id, { x: n.x, y: n.y, width: n.width, height: n.height });
    for (const e of n.edges || []) {
      const points = [];
      for (const s of e.sections || []) {
        points.push(s.startPoint, ...(s.bendPoints || []), s.endPoint);
      }
      routes.set(e.id, points);
    }
    for (const c of n.children || []) walk(c);
  };
  walk(out);
  return { boxes, routes, width: out.width, height: out.height, ms };
}
