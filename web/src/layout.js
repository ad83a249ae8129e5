// Turns the visible graph into an ELK layered layout, computed in a web worker.
// The page is a single file that may be opened from file:// with no server and
// under a strict Content-Security-Policy (no eval), so the worker runs this very
// bundle, started from a Blob URL holding the page's own script: in a worker the
// bundle only answers ELK's messages (see runLayoutWorker). Where no worker
// starts, or none answers (headless screenshots under virtual time), ELK runs on
// the page's thread instead.

import ELK from "elkjs/lib/elk-api.js";
import { compose, levelInput, place, splitLevels } from "./levels.js";

export const HEADER = 30; // room for an expanded module's title bar
const PAD = 12;
const BIG_LEVEL = 24; // boxes in one module
const CACHE_SIZE = 1000; // level layouts kept, most recently used last
const WORKER_GRACE_MS = 2500; // a worker that has not answered by then is taken as never going to
const cache = new Map(); // ELK input as JSON -> ELK output

// The running script, read while it runs: a worker is started from the same code.
const OWN_SCRIPT = typeof document !== "undefined" && document.currentScript ? document.currentScript.textContent : null;

/** In a worker: answer ELK's layout requests (elkjs's worker code registers itself on `self`). */
export function runLayoutWorker() {
  require("elkjs/lib/elk-worker.min.js");
}

/** ELK's own in-thread stand-in for its worker. */
function inThreadEngine() {
  const { Worker: InThread } = require("elkjs/lib/elk-worker.min.js");
  return new ELK({ workerFactory: () => new InThread() });
}

// Where cores allow, two engines, each in its own worker: the first layout and
// a guess at the next view run side by side, and so do independent modules of
// one layout. With fewer cores a second engine only takes time from the page.
const ENGINES = navigator.hardwareConcurrency >= 4 ? 2 : 1;
let idle = null; // engines free to take a request
let inThread = false; // no worker: one ELK shares the page's thread
let answered = false; // a worker has answered once, so workers do run here
const running = new Set(); // {job, elk} given to an engine and not answered yet

function startEngines() {
  if (idle) return;
  idle = [];
  try {
    if (!OWN_SCRIPT) throw new Error("no script to start a worker from");
    const url = URL.createObjectURL(new Blob([OWN_SCRIPT], { type: "text/javascript" }));
    const factory = (u) => {
      const worker = new Worker(u);
      worker.addEventListener("error", () => useThread()); // refused by the page's policy, or failed to load
      return worker;
    };
    while (idle.length < ENGINES) idle.push(new ELK({ workerUrl: url, workerFactory: factory }));
  } catch {
    useThread();
    return;
  }
  setTimeout(() => answered || useThread(), WORKER_GRACE_MS);
}

/** Where layouts run: "worker", or "page" where no worker starts or answers. */
export function layoutEngine() {
  return inThread ? "page" : "worker";
}

/** Give up on workers: stop them and hand what they were doing to one in-thread engine. */
function useThread() {
  if (inThread) return;
  inThread = true;
  for (const elk of idle) elk.terminateWorker?.();
  for (const r of running) {
    r.elk.terminateWorker?.();
    waiting.push(r.job);
  }
  running.clear();
  idle = [inThreadEngine()];
  dispatch();
}

const LEVEL_OPTIONS = {
  "elk.algorithm": "layered",
  "elk.edgeRouting": "ORTHOGONAL",
  "elk.portConstraints": "FIXED_SIDE",
  "elk.layered.considerModelOrder.strategy": "NODES_AND_EDGES",
  "elk.layered.nodePlacement.strategy": "BRANDES_KOEPF",
  "elk.layered.nodePlacement.bk.fixedAlignment": "BALANCED",
  "elk.spacing.nodeNode": "22",
  "elk.layered.spacing.nodeNodeBetweenLayers": "34",
  "elk.spacing.edgeNode": "14",
  "elk.spacing.edgeEdge": "10",
  "elk.layered.spacing.edgeNodeBetweenLayers": "12",
  // Boxes are sized by the renderer; ELK's per-node label pass is pure overhead here.
  "elk.omitNodeMicroLayout": "true",
};
const ROOT_PADDING = "[top=20,left=20,bottom=20,right=20]";
const FRAME_PADDING = `[top=${PAD},left=${PAD},bottom=${PAD},right=${PAD}]`; // and a title bar: see place()

/**
 * ELK input for one level: the level is the only child of a fixed-layout
 * wrapper, because ELK lays out ports on a graph's own frame ("external ports")
 * only for a node inside another graph.
 */
function elkLevel(input, isRoot, direction = "DOWN") {
  const options = {
    ...LEVEL_OPTIONS,
    "elk.direction": direction,
    // Left to right, a shape label sits in the gap between layers, on the line: the gap must hold one.
    ...(direction === "RIGHT" ? { "elk.layered.spacing.nodeNodeBetweenLayers": "76" } : {}),
    "elk.padding": isRoot ? ROOT_PADDING : FRAME_PADDING,
    // ELK retries crossing minimisation `thoroughness` times; with model order
    // already guiding it, big levels lose little and lay out about twice as fast.
    "elk.layered.thoroughness": input.children.length > BIG_LEVEL ? "1" : "7",
  };
  return { id: "w", layoutOptions: { "elk.algorithm": "fixed" }, children: [{ id: "l", layoutOptions: options, ...input }] };
}

// Requests wait here for an engine, so that what the user asked for is laid out
// before guesses about what they will ask next.
const NOW = 0;
const SOON = 1;
const waiting = [];
const layingOut = [0, 0]; // layouts under way, NOW and SOON: they ask for their modules one after another
let guesses = 0; // bumped when the view changes: guesses made for an older view are dropped

function submit(input, priority, key) {
  return new Promise((resolve, reject) => {
    waiting.push({ input, priority, key, resolve, reject });
    dispatch();
  });
}

/**
 * Drop the guesses about the next view that no engine has started on: the view
 * they were made for is gone, and the guesses for the new one come after the
 * layout the user asked for. A running one cannot be stopped; it finishes into the cache.
 */
export function dropPrefetches() {
  guesses += 1;
  for (let i = waiting.length - 1; i >= 0; i--) {
    const job = waiting[i];
    if (job.priority !== SOON) continue;
    waiting.splice(i, 1);
    // Now, not when the rejection is handled: a layout asked for next must not find the dropped promise.
    if (cache.get(job.key)?.input === job.input) cache.delete(job.key);
    job.reject(new Error("dropped"));
  }
}

function dispatch() {
  startEngines();
  while (idle.length && waiting.length) {
    let next = 0;
    for (let i = 1; i < waiting.length; i++) if (waiting[i].priority < waiting[next].priority) next = i;
    // A less urgent request must not slip in between the modules of a layout.
    const { priority } = waiting[next];
    if (priority === SOON && layingOut[NOW] > 0 && idle.length < 2) return;
    const [job] = waiting.splice(next, 1);
    const run = { job, elk: idle.pop() };
    running.add(run);
    run.elk.layout(job.input).then(
      (answer) => {
        if (!running.delete(run)) return; // given to another engine meanwhile
        answered = true;
        job.resolve(answer);
        idle.push(run.elk);
        dispatch();
      },
      (err) => {
        if (!running.delete(run)) return;
        job.reject(err);
        idle.push(run.elk);
        dispatch();
      },
    );
  }
}

/** Layouts asked for or guessed that have not finished: 0 when the engines are idle. */
export function layoutsPending() {
  return waiting.length + running.size + layingOut[NOW] + layingOut[SOON];
}

/**
 * Start the engines and have each lay out a trivial graph, so that their
 * workers load ELK while the page is still reading its data.
 */
export function startLayout() {
  const trivial = { id: "w", children: [{ id: "a", width: 1, height: 1 }] };
  for (let i = 0; i < ENGINES; i++) submit(trivial, NOW).catch(() => {});
}

/**
 * ELK's answer for `input`, from the cache when this input was laid out (or
 * requested) before. The cache holds promises, so a request for a layout that
 * is still being computed waits for that computation instead of repeating it;
 * a request still waiting for the worker is moved up to `priority`.
 */
function cachedLayout(input, priority, counts) {
  const key = JSON.stringify(input);
  let entry = cache.get(key);
  if (entry) {
    cache.delete(key);
    const job = waiting.find((j) => j.input === entry.input);
    if (job && job.priority > priority) {
      job.priority = priority;
      dispatch();
    }
  } else {
    counts.fresh += 1;
    const made = { input, answer: submit(input, priority, key) };
    made.answer.catch(() => cache.get(key) === made && cache.delete(key)); // a failed layout is not kept
    entry = made;
  }
  cache.set(key, entry);
  if (cache.size > CACHE_SIZE) cache.delete(cache.keys().next().value);
  return entry.answer;
}

/**
 * Lay out, one after another, the views the user is likely to ask for next, so
 * that asking for one finds its layout done or under way; the guesses made
 * before are dropped. `views` are functions giving [graph, sizeOf, minWidthOf]
 * as layout() takes them, called only when their turn comes (each guess costs
 * the page a visible graph). Guesses wait behind any layout asked for, and a
 * click that needs one that is waiting moves it up.
 */
export function prefetch(views, direction = "DOWN") {
  dropPrefetches();
  if (inThread) return; // guesses would freeze the page
  const round = guesses;
  layingOut[SOON] += 1; // until the last guess: the engines are not idle between two (layoutsPending)
  (async () => {
    for (const view of views) {
      if (round !== guesses) return;
      await layOut(...view(), SOON, direction, round);
    }
  })()
    .catch(() => {}) // dropped, or failed: the layout asked for will report a failure
    .finally(() => {
      layingOut[SOON] -= 1;
      dispatch();
    });
}

/**
 * Lay out `graph` (Model.visibleGraph()) where `sizeOf(id)` gives leaf box sizes,
 * and `minWidthOf(containerIdx)` the width an expanded module needs for its title.
 * Each expanded module is laid out on its own, inside out, with its opened
 * children as fixed boxes (see levels.js): a click re-lays out only the module
 * it changes and the modules around it, and modules of the same shape (the
 * layers of a transformer) share one layout.
 * Edge labels are placed by the renderer, not by ELK: label dummies would
 * stretch modules over extra layers and slow the layout down.
 * `direction`: "DOWN" (top to bottom) or "RIGHT" (left to right).
 * Resolves to {boxes: Map(id -> {x, y, width, height}), routes: Map(id -> points), width, height, ms, fresh},
 * `fresh`: how many modules were neither laid out nor under way before (the others came from the cache).
 */
export function layout(graph, sizeOf, minWidthOf, direction = "DOWN") {
  return layOut(graph, sizeOf, minWidthOf, NOW, direction);
}

async function layOut(graph, sizeOf, minWidthOf, priority, direction, round = guesses) {
  const t0 = performance.now();
  layingOut[priority] += 1;
  const split = splitLevels(graph);
  const done = new Map(); // container index -> its finished level
  const counts = { fresh: 0 };
  const laidOut = (cIdx) => done.get(cIdx);
  const run = async (cIdx) => {
    const level = split.levels.get(cIdx);
    await Promise.all(level.members.filter((id) => id[0] === "c").map((id) => run(Number(id.slice(1)))));
    if (priority === SOON && round !== guesses) throw new Error("dropped");
    const answer = await cachedLayout(elkLevel(levelInput(level, sizeOf, laidOut, direction), cIdx === 0, direction), priority, counts);
    const frame = cIdx === 0 ? [0, 0] : [minWidthOf(cIdx), HEADER];
    done.set(cIdx, place(level, answer.children[0], ...frame, direction));
  };
  try {
    await run(0);
  } finally {
    layingOut[priority] -= 1;
    dispatch();
  }
  return { ...compose(split, laidOut), ms: performance.now() - t0, fresh: counts.fresh };
}
