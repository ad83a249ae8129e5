// Entry point: reads the graph embedded in the page, builds the UI and keeps
// the visible graph, its layout and the selection in step.
// window.__atlas exposes timings (firstPaintMs, lastLayoutMs, lastElkMs), how many
// modules the last layout could not take from the cache (lastFreshLevels), and a few
// read-only views for the benchmarks and browser tests.

import { Model } from "./model.js";
import { Describer } from "./describe.js";
import { dropPrefetches, layout, layoutEngine, layoutsPending, prefetch, runLayoutWorker, startLayout } from "./layout.js";
import { Renderer } from "./render.js";
import { Viewport } from "./viewport.js";
import { DetailsPanel, SearchBox } from "./panel.js";
import { exportPng, exportSvg } from "./export.js";
import { Overlay } from "./overlay.js";
import { h } from "./dom.js";

const START_BUDGET = 40; // at most this many boxes on screen when the page opens, in a 1400×800 window
const READABLE_SCALE = 0.55; // the first view opens modules only as deep as the fitted picture stays this legible
const NARROW = 1100; // in a window narrower than this (a notebook), the details panel starts closed
const KEYS = [
  ["/", "search"],
  ["f", "fit the graph to the window"],
  ["↓ ↑", "select the next box downstream / upstream"],
  ["Enter", "open or close the selected (or last opened) module"],
  ["Shift+click", "light the paths between two boxes"],
  ["Esc", "clear the selection"],
  ["?", "this help"],
];
const EXPAND_ALL_BUDGET = 800; // more boxes than this stop being readable, and take seconds to lay out
const GUESSED_OPENS = 3; // closed modules whose opening is laid out ahead: each costs the worker its modules around it
// No guesses on a view with more boxes: the modules around what a guess opens are large there (seconds
// of ELK for three guesses on the expanded 70B page), and on two cores the worker takes that from pans.
const GUESS_BUDGET = 300;

function initialTheme() {
  try {
    const saved = localStorage.getItem("torchatlas-theme");
    if (saved === "light" || saved === "dark") return saved;
  } catch {
    // Storage can be unavailable for file:// pages; the system preference still works.
  }
  return matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light";
}

class App {
  /** `ranks` (a multi-rank page only): {shown, count, pick(rank)}, the rank picker's state and what it does. */
  constructor(doc, mount, ranks = null) {
    this.ranks = ranks;
    this.model = new Model(doc);
    this.describer = new Describer(this.model);
    this.title = doc.title;
    this.selection = null; // {kind: "n"|"s", idx}
    this.opened = null; // the module last opened or closed: the panel describes it while nothing is selected
    this.pathEnd = null; // a second box (Shift+click): the paths between it and the selection are lit
    this.layoutToken = 0;
    this.graph = null;
    this.result = null;
    this.buildShell(mount);
    const m = this.model;
    const area = Math.max(0.1, Math.min(1, (innerWidth * innerHeight) / (1400 * 800)));
    const start = m.startDepth ?? m.depthWithin(Math.max(12, Math.round(START_BUDGET * area)), true);
    // torch.nn layers start closed, as the diagram boxes them; a depth asked for opens the folds above it
    m.expandToDepth(Math.max(1, start), m.startDepth === null, true, m.startDepth !== null);
    this.syncDepthSelect();
  }

  /**
   * The first view: the whole graph fitted to the window. Modules opened for it
   * close again, deepest first, until the fitted picture is legible. Only the
   * view chosen is drawn (a drawing of the 70B page costs as much as its layout).
   */
  async openFirstView() {
    const m = this.model;
    // a depth asked for (to_html(depth=2), --depth 2) is honoured; only the guessed one closes to stay legible
    for (let depth = this.openDepth(); depth > 1 && m.startDepth === null; depth--) {
      const graph = m.visibleGraph();
      const size = await layout(graph, this.boxSizes(graph), (c) => this.renderer.containerMinWidth(c), this.direction);
      if (this.viewport.fitScale(size) >= READABLE_SCALE) break;
      m.expandToDepth(depth - 1, true);
    }
    this.syncDepthSelect();
    // The first click comes right after the first paint: guess before drawing, not after.
    await this.relayout({ guessEarly: true }); // from the layout cache
    this.viewport.fit(false, 1.25);
  }

  buildShell(mount) {
    document.documentElement.dataset.theme = initialTheme();
    const button = (text, title, onClick, cls = "") => {
      const b = h("button", { type: "button", title, class: cls, text });
      b.addEventListener("click", onClick);
      return b;
    };
    this.searchInput = h("input", { type: "search", placeholder: "Search modules, classes, ops, shapes… (/regex/)", "aria-label": "Search", spellcheck: "false" });
    this.searchList = h("ul", { class: "search-results hidden" });
    this.depthSelect = h("select", { "aria-label": "Collapse to depth", title: "Collapse to depth N" });
    for (let d = 1; d <= this.model.maxDepth + 1; d++) this.depthSelect.appendChild(h("option", { value: String(d), text: `depth ${d}` }));
    this.depthSelect.addEventListener("change", () => this.collapseToDepth(Number(this.depthSelect.value)));
    this.overlay = new Overlay(this.model, this.describer, () => this.applyOverlay(), () => this.resize());
    this.direction = this.model.startDirection; // ELK's: "DOWN" top to bottom, "RIGHT" left to right
    const showDirection = () => {
      const across = this.direction === "RIGHT";
      directionButton.textContent = across ? "⇢" : "⇣";
      directionButton.title = across ? "Lay the graph out top to bottom" : "Lay the graph out left to right";
      directionButton.setAttribute("aria-pressed", String(across));
    };
    const directionButton = button("⇣", "Lay the graph out left to right", () => {
      this.direction = this.direction === "DOWN" ? "RIGHT" : "DOWN";
      showDirection();
      this.relayout({ animate: true, fit: true });
    }, "direction");
    showDirection();
    this.paramsToggle = h("input", { type: "checkbox", "aria-label": "Show parameters" });
    this.paramsToggle.addEventListener("change", () => {
      this.model.showParams = this.paramsToggle.checked;
      this.relayout({ animate: true });
    });
    const titleEl = h("div", { class: "brand" }, [h("span", { class: "logo", text: "◆" }), h("span", { class: "name", text: this.title })]);
    const toolbar = h("header", { class: "toolbar" }, [
      titleEl,
      h("div", { class: "search" }, [this.searchInput, this.searchList]),
      h("div", { class: "group" }, [
        button("Expand all", "Open every module", () => this.expandAll(), "expand-all"),
        this.depthSelect,
        button("Fit", "Fit the graph to the window", () => this.viewport.fit(), "fit"),
        directionButton,
        this.overlay.select,
        this.overlay.sizeControl,
        h("label", { class: "check params", title: "Show parameters and buffers as their own boxes" }, [this.paramsToggle, h("span", { text: "params" })]),
        ...(this.ranks ? [this.rankPicker()] : []),
      ]),
      h("div", { class: "group" }, [
        button("◐", "Switch light / dark theme", () => this.toggleTheme(), "theme"),
        button("?", "Keyboard shortcuts", () => this.help.classList.toggle("hidden"), "show-help"),
        button("SVG", "Export the current view as SVG", () => exportSvg(this.renderer.svg, this.result, this.fileName()), "export-svg"),
        button("PNG", "Export the current view as PNG", () => exportPng(this.renderer.svg, this.result, this.fileName()), "export-png"),
      ]),
    ]);
    const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
    svg.setAttribute("class", "graph");
    svg.setAttribute("role", "img");
    svg.setAttribute("aria-label", `computation graph of ${this.title}`);
    this.minimap = h("canvas", { class: "minimap", width: "220", height: "160" });
    const mapToggle = button("map", "Show or hide the minimap", () => minimapBox.classList.toggle("collapsed"), "map-toggle");
    const minimapBox = h("div", { class: "minimap-box hidden" }, [this.minimap, mapToggle]);
    this.status = h("div", { class: "status" });
    this.notice = h("div", { class: "notice hidden" });
    this.legend = h("div", { class: "legend" });
    for (const [cat, text] of this.model.doc.legend) {
      this.legend.appendChild(h("div", { class: "legend-item", "data-category": cat, title: text }, [h("span", { class: "swatch" }), h("span", { text: cat })]));
    }
    // The legend and the counts sit in a bar under the graph, never over it.
    const stage = h("main", { class: "stage" }, [h("div", { class: "canvas" }, [svg, minimapBox, this.notice]), h("footer", { class: "dock" }, [this.legend, this.overlay.bar, this.status])]);
    const panelBody = h("div", { class: "details-body" });
    const closePanel = button("×", "Close the details", () => this.panel.classList.add("closed"), "close-details");
    this.panel = h("aside", { class: `details${innerWidth < NARROW ? " closed" : ""}` }, [closePanel, panelBody]);
    this.narrow = innerWidth < NARROW;
    mount.replaceChildren(toolbar, h("div", { class: "body" }, [stage, this.panel]));

    this.renderer = new Renderer(svg, this.describer, {
      onToggle: (id) => this.toggle(id),
      onSelect: (id, ev) => this.selectUnit(id, ev),
      onUnfold: (sIdx) => this.toggleFold(this.model.scopes[sIdx].rep[0]),
    });
    this.viewport = new Viewport(svg, this.renderer.viewport, this.minimap, minimapBox, () => this.renderer.cull(this.viewport.view(), this.viewport.k));
    svg.addEventListener("click", () => this.select(null));
    this.details = new DetailsPanel(panelBody, this.model, this.describer, {
      onToggleScope: (sIdx) => this.toggle(this.model.expanded.has(sIdx) ? "c" + sIdx : "s" + sIdx),
      onToggleFold: (group) => this.toggleFold(group),
    });
    this.details.clear();
    this.search = new SearchBox(this.searchInput, this.searchList, this.model, (kind, idx) => this.jumpTo(kind, idx));
    this.help = h("div", { class: "help hidden", role: "dialog", "aria-label": "Keyboard" }, [
      h("h3", { text: "Keyboard" }),
      ...KEYS.map(([key, what]) => h("div", { class: "help-row" }, [h("kbd", { text: key }), h("span", { text: what })])),
    ]);
    stage.firstChild.appendChild(this.help);
    document.addEventListener("keydown", (ev) => this.onKey(ev));
  }

  onKey(ev) {
    if (document.activeElement === this.searchInput || ev.ctrlKey || ev.metaKey || ev.altKey) return;
    const arrows = { ArrowDown: "down", ArrowUp: "up" };
    if (ev.key === "/") {
      ev.preventDefault();
      this.searchInput.focus();
    } else if (ev.key === "Escape") {
      this.help.classList.add("hidden");
      this.select(null);
    } else if (ev.key === "f") this.viewport.fit();
    else if (ev.key === "?") this.help.classList.toggle("hidden");
    else if (ev.key === "Enter") {
      // Open or close the selected module, or the one last opened.
      const sIdx = this.selection?.kind === "s" ? this.selection.idx : this.opened;
      if (sIdx !== null && sIdx !== undefined && sIdx > 0) {
        const unit = this.unitOf({ kind: "s", idx: sIdx });
        if (unit) this.toggle(unit);
      }
    } else if (arrows[ev.key] && this.selection) {
      ev.preventDefault();
      this.step(arrows[ev.key]);
    }
  }

  /** Move the selection one edge downstream or upstream (to the first box that way), keeping it in view. */
  step(direction) {
    const unit = this.unitOf(this.selection);
    const [from, to] = direction === "down" ? ["source", "target"] : ["target", "source"];
    const seeds = this.seedsOf(unit);
    const next = this.graph.edges.find((e) => seeds.has(e[from]) && !seeds.has(e[to]));
    if (!next) return;
    const id = next[to];
    this.select(id[0] === "n" ? { kind: "n", idx: Number(id.slice(1)) } : { kind: "s", idx: Model.unitScope(id) });
    const box = this.result.boxes.get(id);
    const v = this.viewport;
    const at = v.inView(box, v.x, v.y);
    v.moveTo(at.x, at.y, v.k, true);
  }

  fileName() {
    // A file name is at most 255 bytes on most file systems (browsers refuse a download name over 1 MB).
    return (this.title || "graph").slice(0, 120).replace(/[^\w.-]+/g, "_");
  }

  toggleTheme() {
    const next = document.documentElement.dataset.theme === "dark" ? "light" : "dark";
    document.documentElement.dataset.theme = next;
    try {
      localStorage.setItem("torchatlas-theme", next);
    } catch {
      // Not persisting is fine.
    }
    this.viewport.paintMinimap();
    this.viewport.drawMinimap();
  }

  /** A multi-rank page's picker: the same model as another rank runs it (its shapes, placements, collectives). */
  rankPicker() {
    const select = h("select", { class: "rank-picker", "aria-label": "Rank", title: "Show what another rank of the job runs" });
    for (let r = 0; r < this.ranks.count; r++) select.appendChild(h("option", { value: String(r), text: `rank ${r}` }));
    select.value = String(this.ranks.shown);
    select.addEventListener("change", () => this.ranks.pick(Number(select.value), this.overlay.metric));
    return select;
  }

  /** Colour the boxes by the number the fill: menu names, with its scale in the dock instead of the legend; or by category. */
  applyOverlay() {
    if (!this.graph) return;
    this.overlay.apply(this.graph, this.renderer);
    this.legend.classList.toggle("hidden", !!this.overlay.metric);
  }

  /** Lay out again for new box sizes; a fitted view stays fitted. */
  async resize() {
    const fitted = this.viewport.fitted;
    await this.relayout({ animate: true });
    if (fitted) this.viewport.fit(true, fitted);
  }

  /** Box sizes for laying out `graph`: what the text needs, scaled by the size overlay where it is on. */
  boxSizes(graph) {
    const scales = this.overlay.scales(graph);
    return (id) => this.renderer.sizeOf(id, scales.get(id));
  }

  /** The depth N of the depth menu that the opened modules amount to. */
  openDepth() {
    const m = this.model;
    const units = m.scopeUnits(); // null: the scope is an open frame on screen
    let depth = 1;
    for (const s of m.scopes) if (units[s.idx] === null) depth = Math.max(depth, s.depth + 1);
    return Math.min(depth, m.maxDepth + 1);
  }

  syncDepthSelect() {
    this.depthSelect.value = String(this.openDepth());
  }

  /** Expand or collapse a module box ("s3"/"c3") or unfold a repeat ("g3"). */
  toggle(id) {
    const m = this.model;
    const sIdx = Model.unitScope(id);
    let anchor = id;
    if (id[0] === "g" || id[0] === "s") {
      // Opening a fold opens its first member in place; the ×N stays on its frame.
      m.expanded.add(sIdx);
      anchor = "c" + sIdx;
    } else {
      m.expanded.delete(sIdx);
      anchor = (m.foldedGroupOf(m.scopes[sIdx]) !== null ? "g" : "s") + sIdx;
    }
    // Opening is not selecting: the panel describes the module, nothing is lit or dimmed.
    this.opened = sIdx;
    this.syncDepthSelect();
    return this.relayout({ animate: true, anchor: [id, anchor] }).then(() => this.showSelection());
  }

  /** Show a repeat group as one box, or as one box per member. */
  toggleFold(group) {
    const m = this.model;
    if (m.folded.has(group)) m.folded.delete(group);
    else m.folded.add(group);
    return this.relayout({ animate: true }).then(() => this.showSelection());
  }

  collapseToDepth(depth) {
    this.model.expandToDepth(depth, true, true, true); // the depth menu: folds above it open, as in the diagram
    this.relayout({ animate: true, fit: true });
  }

  expandAll() {
    const m = this.model;
    const open = m.expanded;
    m.folded.clear();
    const depth = m.depthWithin(EXPAND_ALL_BUDGET);
    m.expandToDepth(depth);
    for (const sIdx of open) m.expanded.add(sIdx); // Expand all never closes a module
    this.syncDepthSelect();
    if (depth <= m.maxDepth) this.flash(this.describer.say("openedToDepth", { depth, budget: EXPAND_ALL_BUDGET }));
    this.relayout({ animate: true, fit: true });
  }

  flash(text) {
    this.notice.textContent = text;
    this.notice.classList.remove("hidden");
    clearTimeout(this.noticeTimer);
    this.noticeTimer = setTimeout(() => this.notice.classList.add("hidden"), 6000);
  }

  /** Expand whatever hides a search result, then center on it and select it. */
  async jumpTo(kind, idx) {
    this.model.reveal(kind, idx);
    this.paramsToggle.checked = this.model.showParams;
    this.selection = { kind, idx };
    this.syncDepthSelect();
    await this.relayout({ animate: true });
    const box = this.result.boxes.get(this.unitOf(this.selection));
    if (box) this.viewport.centerOn(box);
    this.showSelection();
  }

  /**
   * A click on a leaf box selects it, a Shift+click on a second one lights the
   * paths between the two; a click on a "↪ value" note jumps to that value.
   */
  selectUnit(id, ev) {
    if (id[0] === "n" && ev?.shiftKey && this.selection) {
      this.pathEnd = { kind: "n", idx: Number(id.slice(1)) };
      return this.showSelection();
    }
    if (id[0] === "n") return this.select({ kind: "n", idx: Number(id.slice(1)) });
    return this.jumpTo(id[0] === "s" || id[0] === "g" ? "s" : "n", Number(id.slice(1)));
  }

  select(sel) {
    this.selection = sel;
    this.pathEnd = null;
    this.opened = null;
    this.showSelection();
  }

  /** The visible box standing for the selection (a node may sit inside a collapsed module). */
  unitOf(sel) {
    if (!sel || !this.graph) return null;
    const units = this.graph.units;
    if (sel.kind === "n") return this.model.unitOfNode(this.model.nodes[sel.idx], units);
    if (this.graph.containers.has(sel.idx)) return "c" + sel.idx;
    return units[sel.idx] ?? "c" + sel.idx;
  }

  showSelection() {
    const sel = this.selection;
    // In a narrow window the panel opens for a selection and closes with it.
    if (sel) this.panel.classList.remove("closed");
    else if (this.narrow) this.panel.classList.add("closed");
    if (!sel) {
      if (this.opened !== null) this.details.showScope(this.opened);
      else this.details.clear();
      this.renderer.highlight(null, new Set(), new Set());
      return;
    }
    if (sel.kind === "n") this.details.showNode(sel.idx);
    else this.details.showScope(sel.idx);
    const unit = this.unitOf(sel);
    const cone = this.cone(unit);
    const other = this.unitOf(this.pathEnd);
    if (other && other !== unit) {
      // Two boxes selected: only the paths between them, whichever comes first. An
      // edge between two boxes on such paths is on one too.
      const far = this.cone(other);
      const between = (a, b) => [...a.units].filter((u) => b.units.has(u));
      const lit = new Set([...between(cone.down, far.up), ...between(far.down, cone.up)]);
      const edges = new Set(this.graph.edges.filter((e) => lit.has(e.source) && lit.has(e.target)).map((e) => e.id));
      this.renderer.highlight(unit, lit, edges, other);
    } else {
      this.renderer.highlight(unit, new Set([...cone.up.units, ...cone.down.units]), new Set([...cone.up.edges, ...cone.down.edges]));
    }
  }

  /** The visible boxes standing for a unit: itself, or everything inside an open module. */
  seedsOf(unit) {
    const seeds = new Set();
    if (unit && unit[0] === "c") {
      const inside = (c) => {
        for (const child of this.graph.containers.get(c).children) {
          if (child[0] === "c") inside(Number(child.slice(1)));
          else seeds.add(child);
        }
      };
      inside(Number(unit.slice(1)));
    } else if (unit) seeds.add(unit);
    return seeds;
  }

  /** Units upstream (`up`) and downstream (`down`) of a unit in the visible graph, each with the edges on those paths. */
  cone(unit) {
    const seeds = this.seedsOf(unit);
    const outgoing = new Map();
    const incoming = new Map();
    for (const e of this.graph.edges) {
      if (!outgoing.has(e.source)) outgoing.set(e.source, []);
      if (!incoming.has(e.target)) incoming.set(e.target, []);
      outgoing.get(e.source).push(e);
      incoming.get(e.target).push(e);
    }
    const walk = (adjacency, end) => {
      const units = new Set(seeds);
      if (unit) units.add(unit);
      const edges = new Set();
      const stack = [...seeds];
      while (stack.length) {
        const u = stack.pop();
        for (const e of adjacency.get(u) || []) {
          edges.add(e.id);
          if (!units.has(e[end])) {
            units.add(e[end]);
            stack.push(e[end]);
          }
        }
      }
      return { units, edges };
    };
    return { down: walk(outgoing, "target"), up: walk(incoming, "source") };
  }

  /**
   * Start laying out the views a user most likely asks for next from `graph`, so
   * that the click finds its layout ready, and the engine warmed on real work:
   * each fold on screen opened in place and unfolded (a ×80 box is what draws the
   * eye, and an unfolding is the largest layout), biggest first; then the
   * biggest closed modules opened. None on a view of more than GUESS_BUDGET boxes.
   */
  guessNextViews(graph) {
    if (graph.leaves.size > GUESS_BUDGET) return dropPrefetches();
    const m = this.model;
    const size = m.nodeCounts();
    const folds = [];
    const closed = [];
    for (const id of graph.leaves.keys()) {
      if (id[0] === "g") folds.push(Model.unitScope(id));
      else if (id[0] === "s") closed.push(Model.unitScope(id));
    }
    for (const cIdx of graph.containers.keys()) if (m.foldedGroupOf(m.scopes[cIdx]) !== null) folds.push(cIdx);
    const foldSize = (sIdx) => size[sIdx] * m.groups.get(m.scopes[sIdx].rep[0]).length;
    folds.sort((a, b) => foldSize(b) - foldSize(a));
    closed.sort((a, b) => size[b] - size[a]);
    // Box sizes and title widths are read while the guessed state is on (a fold's badge, say, is not the same).
    const view = (change, undo) => () => {
      change();
      const next = m.visibleGraph();
      const sizeOf = this.boxSizes(next);
      const sizes = new Map([...next.leaves.keys()].map((id) => [id, sizeOf(id)]));
      const widths = new Map([...next.containers.keys()].map((c) => [c, this.renderer.containerMinWidth(c)]));
      undo();
      return [next, (id) => sizes.get(id), (c) => widths.get(c)];
    };
    const open = (sIdx) => view(() => m.expanded.add(sIdx), () => m.expanded.delete(sIdx));
    const views = [];
    for (const sIdx of folds) {
      const group = m.scopes[sIdx].rep[0];
      if (!m.expanded.has(sIdx)) views.push(open(sIdx));
      views.push(view(() => m.folded.delete(group), () => m.folded.add(group)));
    }
    views.push(...closed.slice(0, GUESSED_OPENS).map(open));
    prefetch(views, this.direction);
  }

  /**
   * Lay out the visible graph and draw it. The worker then starts on guesses at
   * the next view (see guessNextViews): after the frame that shows this one, so
   * that making them takes nothing from this change, or with `guessEarly`
   * while this thread draws.
   */
  async relayout({ animate = false, fit = false, anchor = null, guessEarly = false } = {}) {
    const token = ++this.layoutToken;
    dropPrefetches(); // the view they guessed from is gone: they must not run before this layout
    const t0 = performance.now();
    const graph = this.model.visibleGraph();
    const r = this.renderer;
    let result;
    try {
      result = await layout(graph, this.boxSizes(graph), (c) => r.containerMinWidth(c), this.direction);
    } catch (err) {
      // Keep the last good picture; say why this change could not be shown.
      this.flash(this.describer.say("layoutFailed", { error: err && err.message ? err.message : err }));
      throw err;
    }
    if (token !== this.layoutToken) return; // a newer request replaced this one
    if (guessEarly) this.guessNextViews(graph);
    const before = anchor && this.result ? this.result.boxes.get(anchor[0]) : null;
    this.graph = graph;
    this.result = result;
    r.draw(graph, result, animate);
    r.cull(this.viewport.view(), this.viewport.k);
    this.applyOverlay();
    this.viewport.setContent(result, result.boxes);
    const after = anchor ? result.boxes.get(anchor[1]) : null;
    if (fit) this.viewport.fit(animate);
    else if (before && after) {
      // Keep the clicked box under the pointer while the rest moves around it, then
      // scroll as little as needed to show what it opened into (or closed into).
      const v = this.viewport;
      const at = v.inView(after, v.x + (before.x - after.x) * v.k, v.y + (before.y - after.y) * v.k);
      v.moveTo(at.x, at.y, v.k, animate);
    }
    this.status.textContent = this.describer.say("boxesShown", { status: this.model.doc.status, boxes: graph.leaves.size.toLocaleString("en-US") });
    // the legend names only the categories drawn now (parameters: while they are shown)
    const drawn = new Set([...graph.leaves.keys()].map((id) => this.describer.unit(id).category));
    for (const item of this.legend.children) item.classList.toggle("hidden", !drawn.has(item.dataset.category));
    await new Promise((resolve) => requestAnimationFrame(() => setTimeout(resolve, 0)));
    if (!guessEarly && token === this.layoutToken) setTimeout(() => token === this.layoutToken && this.guessNextViews(graph), 0);
    const atlas = window.__atlas;
    atlas.lastLayoutMs = performance.now() - t0;
    atlas.lastElkMs = result.ms;
    atlas.lastFreshLevels = result.fresh;
    atlas.layoutCount += 1;
    atlas.visibleBoxes = graph.leaves.size;
    this.showSelection();
  }
}

async function boot() {
  const atlas = (window.__atlas = { ready: false, layoutCount: 0, firstPaintMs: null, lastLayoutMs: null, visibleBoxes: 0, error: null });
  try {
    startLayout();
    const raw = document.getElementById("atlas-data").textContent;
    const doc = JSON.parse(raw);
    const mount = document.getElementById("atlas");
    const ranksData = document.getElementById("atlas-ranks"); // a multi-rank page: every rank's document
    const ranks = ranksData ? JSON.parse(ranksData.textContent) : null;
    const pick = async (rank, fill) => {
      const app = new App(ranks.docs[rank], mount, { shown: rank, count: ranks.docs.length, pick });
      atlas.app = app;
      atlas.rank = rank;
      await app.openFirstView();
      if (fill && [...app.overlay.select.options].some((o) => o.value === fill)) {
        app.overlay.select.value = fill; // the fill chosen on the rank before
        app.overlay.select.dispatchEvent(new Event("change"));
      }
    };
    const app = new App(doc, mount, ranks && { shown: ranks.shown, count: ranks.docs.length, pick });
    atlas.app = app;
    if (ranks) atlas.rank = ranks.shown;
    await app.openFirstView();
    atlas.firstPaintMs = performance.now();
    atlas.opsTotal = doc.nodes.length;
    atlas.engine = layoutEngine();
    atlas.layoutsPending = layoutsPending;
    atlas.ready = true;
  } catch (err) {
    atlas.error = String(err && err.stack ? err.stack : err);
    const box = document.getElementById("atlas");
    box.replaceChildren(h("pre", { class: "fatal", text: `torchatlas viewer failed to start:\n${atlas.error}` }));
    throw err;
  }
}

// The same script runs the page and, started from a Blob URL, its layout workers.
if (typeof document === "undefined") runLayoutWorker();
else boot();
