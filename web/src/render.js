// SVG drawing of a laid-out visible graph. Elements are keyed by unit id and
// reused between layouts so boxes glide to their new places (CSS transitions)
// instead of the whole picture being replaced. All text goes through
// textContent, so names from user code are never parsed as markup.

import { HEADER } from "./layout.js";
import { Culler } from "./cull.js";

const SVG = "http://www.w3.org/2000/svg";
export const FONT_TITLE = "600 12px system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif";
export const FONT_SMALL = "11px system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif";
export const FONT_EDGE = "10px ui-monospace, SFMono-Regular, Menlo, Consolas, monospace";

function el(tag, attrs = {}, parent = null) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (parent) parent.appendChild(e);
  return e;
}

let canvas = null; // made on first use: this module also loads in the layout worker, which has no document
const widths = new Map(); // font + text -> width: the same labels come back on every layout
export function textWidth(text, font) {
  const key = font + "\u0000" + text;
  let width = widths.get(key);
  if (width === undefined) {
    canvas ??= document.createElement("canvas").getContext("2d");
    canvas.font = font;
    width = canvas.measureText(text).width;
    widths.set(key, width);
  }
  return width;
}

const MAX_FRAME_TITLE = 22; // px in graph units: a grown module title stays inside its title bar

/**
 * Zoomed out, module titles grow (see viewer.css); `--title-max` keeps a title
 * as wide as `room` at most, and no taller than `height`, so it never runs into
 * its neighbours.
 */
function setTitleMax(g, textWidth12, room, height) {
  const size = Math.max(1, Math.min(height, (Math.max(room, 1) * 12) / Math.max(textWidth12, 1)));
  g.style.setProperty("--title-max", `${size.toFixed(1)}px`);
}

/** Rounded orthogonal path through ELK's bend points. */
function routePath(points) {
  if (points.length < 2) return "";
  let d = `M${points[0].x},${points[0].y}`;
  for (let i = 1; i < points.length - 1; i++) {
    const [a, b, c] = [points[i - 1], points[i], points[i + 1]];
    const r = Math.min(6, Math.hypot(b.x - a.x, b.y - a.y) / 2, Math.hypot(c.x - b.x, c.y - b.y) / 2);
    const p = { x: b.x + (Math.sign(a.x - b.x) * r), y: b.y + (Math.sign(a.y - b.y) * r) };
    const q = { x: b.x + (Math.sign(c.x - b.x) * r), y: b.y + (Math.sign(c.y - b.y) * r) };
    d += ` L${p.x},${p.y} Q${b.x},${b.y} ${q.x},${q.y}`;
  }
  const last = points[points.length - 1];
  return d + ` L${last.x},${last.y}`;
}

export class Renderer {
  constructor(svg, describer, handlers) {
    this.svg = svg;
    this.describer = describer;
    this.handlers = handlers;
    const defs = el("defs", {}, svg);
    const marker = el("marker", { id: "atlas-arrow", viewBox: "0 0 10 10", refX: "9", refY: "5", markerWidth: "7", markerHeight: "7", orient: "auto-start-reverse" }, defs);
    el("path", { d: "M0,1 L9,5 L0,9 z", class: "arrow" }, marker);
    this.viewport = el("g", { class: "viewport" }, svg);
    this.layerClusters = el("g", { class: "clusters" }, this.viewport);
    this.layerEdges = el("g", { class: "edges" }, this.viewport);
    this.layerNodes = el("g", { class: "nodes" }, this.viewport);
    this.elements = new Map(); // id -> g
    this.boxes = new Map();
    this.edgeEls = new Map();
    this.culler = new Culler();
    this.culled = []; // [element, graph rect] of the boxes and frames; drawEdges adds the edges and labels
  }

  /** Hide what lies well outside `view` (graph coordinates) at scale `k`; see cull.js. */
  cull(view, k) {
    this.culler.update(view, k);
  }

  /** A leaf box's size: what its text needs, times `scale` (the size overlay). */
  sizeOf(id, scale = 1) {
    const d = this.describer.unit(id);
    const w = Math.max(textWidth(d.title, FONT_TITLE) + (d.badge ? textWidth(d.badge, FONT_TITLE) + 18 : 0), d.subtitle ? textWidth(d.subtitle, FONT_SMALL) : 0);
    return { width: Math.ceil(Math.max(64, w + 24) * scale), height: Math.ceil((d.subtitle ? 40 : 28) * scale) };
  }

  containerMinWidth(sIdx) {
    const badge = this.describer.containerBadge(sIdx);
    const w =
      textWidth(this.describer.containerTitle(sIdx), FONT_TITLE) +
      textWidth(this.describer.containerSubtitle(sIdx), FONT_SMALL) +
      (badge ? textWidth(`${badge} ⤢`, FONT_TITLE) + 8 : 0);
    return Math.ceil(w + 56);
  }

  /** Where a box that did not exist before should grow from: the box it was folded into. */
  originOf(id, units, previous) {
    if (previous.has(id)) return previous.get(id);
    const sIdx = id[0] === "c" || id[0] === "s" ? Number(id.slice(1)) : null;
    if (sIdx !== null) for (const alt of ["s", "g", "c"]) if (previous.has(alt + sIdx)) return previous.get(alt + sIdx);
    if (id[0] === "n") {
      const n = this.describer.model.nodes[Number(id.slice(1))];
      for (const s of this.describer.model.ancestry(n.s).reverse()) {
        for (const alt of ["s", "g"]) if (previous.has(alt + s)) return previous.get(alt + s);
      }
    }
    return null;
  }

  draw(graph, result, animate) {
    const previous = this.boxes;
    this.boxes = result.boxes;
    const keep = new Set();
    const moves = []; // [g, box, where it grows from, new]; applied together so the page reflows once
    this.culled = [];
    const place = (g, box, origin, fresh) => {
      moves.push([g, box, origin, fresh]);
      // Room above a box for its "↪ name" notes.
      this.culled.push([g, { x: box.x - 4, y: box.y - 18, width: box.width + 8, height: box.height + 22 }]);
    };
    const clusterOrder = [...graph.containers.keys()].filter((c) => c !== 0).sort((a, b) => this.describer.model.scopes[a].depth - this.describer.model.scopes[b].depth);
    for (const cIdx of clusterOrder) {
      const id = "c" + cIdx;
      keep.add(id);
      let g = this.elements.get(id);
      const fresh = !g;
      if (fresh) g = this.makeCluster(cIdx);
      g.dataset.depth = String(this.describer.model.scopes[cIdx].depth % 4);
      this.titleCluster(g, cIdx);
      this.layerClusters.appendChild(g);
      const box = result.boxes.get(id);
      const badge = this.describer.containerBadge(cIdx);
      const titleWidth = textWidth(this.describer.containerTitle(cIdx), FONT_TITLE) + (badge ? textWidth(`${badge} ⤢`, FONT_TITLE) + 8 : 0);
      setTitleMax(g, titleWidth, box.width - 34, MAX_FRAME_TITLE);
      place(g, box, fresh ? this.originOf(id, graph.units, previous) : null, fresh);
    }
    for (const [id, leaf] of graph.leaves) {
      keep.add(id);
      let g = this.elements.get(id);
      if (g && g.said !== this.describer.said(id)) {
        // What the box says changed (params shown or hidden): draw it anew, in its old place.
        g.replaceWith(this.makeLeaf(id, g));
        g = this.elements.get(id);
      }
      const fresh = !g;
      if (fresh) g = this.makeLeaf(id);
      this.drawRefs(g, leaf.refs);
      const box = result.boxes.get(id);
      if (g.titleRoom) setTitleMax(g, g.titleRoom.text, box.width - g.titleRoom.taken, box.height * 0.55);
      place(g, box, fresh ? this.originOf(id, graph.units, previous) : null, fresh);
    }
    this.move(moves, animate);
    for (const [id, g] of this.elements) {
      if (!keep.has(id)) {
        g.remove();
        this.elements.delete(id);
      }
    }
    this.drawEdges(graph, result, animate);
  }

  /** Put boxes in place; with `animate`, new boxes glide out of the box they came from, or fade in once. */
  move(moves, animate) {
    const set = (g, b) => {
      g.style.transform = `translate(${b.x}px, ${b.y}px)`;
      for (const r of g.sizeRects) {
        r.style.width = `${b.width}px`;
        r.style.height = `${b.height}px`;
      }
      if (g.headerHit) g.headerHit.style.width = `${b.width}px`;
      // The text stays in the middle of a box the size overlay made larger.
      if (g.face) g.face.style.transform = `translate(${(b.width - g.base.width) / 2}px, ${(b.height - g.base.height) / 2}px)`;
    };
    const gliding = animate ? moves.filter(([, , origin]) => origin) : [];
    for (const [g, , origin] of gliding) {
      g.classList.add("no-anim");
      set(g, origin);
    }
    // One style flush makes the origins the starting point of the transitions below.
    if (gliding.length) this.svg.getBoundingClientRect();
    for (const [g, box, origin, fresh] of moves) {
      if (origin && animate) g.classList.remove("no-anim");
      else if (animate && fresh) {
        g.classList.add("entering");
        // Removed once done: a culled box shown again would otherwise fade in again.
        g.addEventListener("animationend", () => g.classList.remove("entering"), { once: true });
      }
      set(g, box);
    }
  }

  makeCluster(cIdx) {
    const g = el("g", { class: `cluster${this.describer.model.scopes[cIdx].bw ? " backward" : ""}`, "data-id": "c" + cIdx });
    g.sizeRects = [el("rect", { class: "frame", rx: "8" }, g)];
    const header = el("g", { class: "header" }, g);
    g.headerHit = el("rect", { class: "header-hit", x: "0", y: "0", height: String(HEADER) }, header);
    const toggle = el("text", { class: "toggle", x: "12", y: "19" }, header);
    toggle.textContent = "−";
    g.titleEl = el("text", { class: "title", x: "26", y: "19" }, header);
    header.addEventListener("click", (ev) => {
      ev.stopPropagation();
      if (ev.target.classList.contains("fold-badge")) this.handlers.onUnfold(cIdx);
      else this.handlers.onToggle("c" + cIdx);
    });
    this.elements.set("c" + cIdx, g);
    return g;
  }

  /** Title, class and (for an open fold) a clickable "×N" that unfolds it; redone each layout. */
  titleCluster(g, cIdx) {
    const d = this.describer;
    const df = d.model.scopes[cIdx].df; // a diff's merged graph: the open module's frame says it changed
    for (const k of ["changed", "added", "removed"]) g.classList.toggle(`diff-${k}`, df === k);
    // an open call holding compare's first divergence (the model's own call holds every one: left plain)
    const scope = d.model.scopes[cIdx];
    g.classList.toggle("divergence-here", scope.ovs === "here" && scope.p !== -1);
    g.titleEl.replaceChildren();
    g.titleEl.appendChild(document.createTextNode(d.containerTitle(cIdx)));
    const badge = d.containerBadge(cIdx);
    if (badge) {
      const b = el("tspan", { class: "fold-badge", dx: "8" }, g.titleEl);
      b.textContent = `${badge} ⤢`;
      b.appendChild(el("title")).textContent = this.describer.say("unfoldTitle");
    }
    el("tspan", { class: "subtitle", dx: "8" }, g.titleEl).textContent = d.containerSubtitle(cIdx);
  }

  /** The box of a leaf unit; `old`, the box it replaces, lends it its place. */
  makeLeaf(id, old = null) {
    const d = this.describer.unit(id);
    const g = el("g", { class: `unit ${d.module ? "module" : "op"}${d.failed ? " failed" : ""}${d.nonfinite ? " nonfinite" : ""}${d.dead ? " dead" : ""}${d.decision ? " decision" : ""}${d.backward ? " backward" : ""}${d.diff ? " diff-" + d.diff : ""}${d.divergence ? " divergence-" + d.divergence : ""}`, "data-id": id, "data-category": d.category }, old ? null : this.layerNodes);
    g.said = this.describer.said(id);
    if (old) g.style.transform = old.style.transform;
    el("title", {}, g).textContent = this.describer.tooltip(id);
    // A second outline offset behind a module box reads as "there is more inside".
    g.sizeRects = d.module ? [el("rect", { class: "stack", x: "3", y: "3", rx: "6" }, g)] : [];
    g.sizeRects.push(el("rect", { class: "box", rx: d.module ? "6" : "5" }, g));
    g.base = this.sizeOf(id);
    const { width } = g.base;
    const cx = width / 2;
    g.face = el("g", { class: "face" }, g); // the text, laid out for the box at its base size
    const title = el("text", { class: "title", x: String(d.badge ? cx - (textWidth(d.badge, FONT_TITLE) + 18) / 2 : cx), y: d.subtitle ? "17" : "18" }, g.face);
    title.textContent = d.title;
    if (d.subtitle) {
      const sub = el("text", { class: "subtitle", x: String(cx), y: "32" }, g.face);
      sub.textContent = d.subtitle;
    }
    if (d.decision) {
      // A diamond at the right edge: Python read this value to decide (an if, a break).
      const y = 20;
      el("polygon", { class: "decision-mark", points: `${width},${y - 7} ${width + 7},${y} ${width},${y + 7} ${width - 7},${y}` }, g.face);
    }
    if (d.module) g.titleRoom = { text: textWidth(d.title, FONT_TITLE), taken: 12 + (d.badge ? textWidth(d.badge, FONT_TITLE) + 18 : 0) };
    if (d.badge) {
      const bw = textWidth(d.badge, FONT_TITLE) + 10;
      el("rect", { class: "badge", x: String(width - bw - 8), y: "5", width: String(bw), height: "16", rx: "8" }, g.face);
      const b = el("text", { class: "badge-text", x: String(width - bw / 2 - 8), y: "17" }, g.face);
      b.textContent = d.badge;
    }
    g.addEventListener("click", (ev) => {
      ev.stopPropagation();
      if (d.module) this.handlers.onToggle(id);
      else this.handlers.onSelect(id, ev);
    });
    this.elements.set(id, g);
    return g;
  }

  /** "↪ name" notes above a box for values whose edges were left out (see Model.withReferences). */
  drawRefs(g, refs) {
    g.querySelector(".refs")?.remove();
    if (!refs.length) return;
    const notes = el("text", { class: "refs", x: "2", y: "-5" }, g);
    refs.slice(0, 4).forEach((e, i) => {
      const span = el("tspan", { class: "ref", dx: i ? "8" : "0" }, notes);
      span.textContent = (this.describer.model.nodes[e.node].fw || [])[e.slot] || "↪";
      span.addEventListener("click", (ev) => {
        ev.stopPropagation();
        this.handlers.onSelect(e.source);
      });
    });
    if (refs.length > 4) el("tspan", { dx: "8" }, notes).textContent = `+${refs.length - 4}`;
  }

  drawEdges(graph, result, animate) {
    this.layerEdges.replaceChildren();
    this.edgeEls = new Map();
    if (animate) {
      this.layerEdges.classList.remove("fade-in");
      this.layerEdges.getBoundingClientRect();
      this.layerEdges.classList.add("fade-in");
    }
    const frag = document.createDocumentFragment();
    const labelled = new Set(); // one shape label per point where edges leave a box
    const placed = new Map(); // 40px grid cell -> label rects, so labels never overlap
    const collides = (r) => {
      for (let cx = Math.floor(r.x / 40); cx <= Math.floor((r.x + r.w) / 40); cx++) {
        for (let cy = Math.floor(r.y / 40); cy <= Math.floor((r.y + r.h) / 40); cy++) {
          for (const o of placed.get(`${cx},${cy}`) || []) {
            if (r.x < o.x + o.w && o.x < r.x + r.w && r.y < o.y + o.h && o.y < r.y + r.h) return true;
          }
        }
      }
      return false;
    };
    const occupy = (r) => {
      for (let cx = Math.floor(r.x / 40); cx <= Math.floor((r.x + r.w) / 40); cx++) {
        for (let cy = Math.floor(r.y / 40); cy <= Math.floor((r.y + r.h) / 40); cy++) {
          const key = `${cx},${cy}`;
          if (!placed.has(key)) placed.set(key, []);
          placed.get(key).push(r);
        }
      }
    };
    const labels = document.createDocumentFragment();
    for (const e of graph.drawn) {
      const points = result.routes.get(e.id);
      if (!points || points.length < 2) continue;
      const g = el("g", { class: e.comm ? "edge comm" : "edge", "data-id": e.id }, frag);
      let [x0, y0, x1, y1] = [Infinity, Infinity, -Infinity, -Infinity];
      for (const p of points) [x0, y0, x1, y1] = [Math.min(x0, p.x), Math.min(y0, p.y), Math.max(x1, p.x), Math.max(y1, p.y)];
      this.culled.push([g, { x: x0 - 8, y: y0 - 8, width: x1 - x0 + 16, height: y1 - y0 + 16 }]); // and its arrow head
      el("path", { d: routePath(points), "marker-end": "url(#atlas-arrow)" }, g);
      const text = this.describer.edgeLabel(e);
      const start = points[0];
      const key = `${e.source}@${Math.round(start.x)},${Math.round(start.y)}`;
      const width = text ? textWidth(text, FONT_EDGE) + 6 : 0;
      const vertical = Math.abs(points[1].x - start.x) < 1;
      // Beside a line leaving downwards; under one leaving rightwards (left to right), clear of its box.
      const x = vertical ? start.x + 4 : points[1].x > start.x ? start.x + 3 : start.x - width / 2;
      const rect = { x, y: start.y + 3, w: width, h: 13 };
      const parts = [g];
      if (text && !labelled.has(key) && !collides(rect)) {
        labelled.add(key);
        occupy(rect);
        // Just below the source box, beside the line: where the value leaves its producer.
        // Labels go after every edge, so that no other edge crosses over one.
        const lg = el("g", { class: "edge-label", "data-id": e.id }, labels);
        this.culled.push([lg, { x: rect.x, y: rect.y, width: rect.w, height: rect.h }]);
        el("rect", { class: "label-bg", x: String(x), y: String(start.y + 3), width: String(width), height: "13", rx: "3" }, lg);
        const t = el("text", { class: "label", x: String(x + width / 2), y: String(start.y + 13) }, lg);
        t.textContent = text;
        parts.push(lg);
      }
      this.edgeEls.set(e.id, parts);
    }
    frag.appendChild(labels);
    this.layerEdges.appendChild(frag);
    this.culler.set(this.culled);
  }

  /**
   * Fill boxes by a number (`values`: unit id -> number, or null for the category
   * colours): one of `steps` page colours (--overlay-0…), on a log scale from `min` to `max`.
   */
  overlay(values, min, max, steps) {
    this.svg.classList.toggle("overlay", !!values);
    for (const [id, g] of this.elements) {
      if (!values || !values.has(id)) {
        g.style.removeProperty("--unit-overlay");
        g.classList.remove("overlay-strong");
        continue;
      }
      const span = Math.log1p(max) - Math.log1p(min);
      const step = span > 0 ? Math.min(steps - 1, Math.floor(((Math.log1p(values.get(id)) - Math.log1p(min)) / span) * steps)) : 0;
      g.style.setProperty("--unit-overlay", `var(--overlay-${step})`);
      // Grey subtitles vanish on the two darkest fills: there they take the title's colour.
      g.classList.toggle("overlay-strong", step >= steps - 2);
    }
  }

  /** Light up `lit` (units) and `edgeIds`; mark `selected` (and a second box, `other`); dim everything else. */
  highlight(selected, lit, edgeIds, other = null) {
    this.svg.classList.toggle("has-selection", !!selected);
    for (const [id, g] of this.elements) {
      g.classList.toggle("lit", lit.has(id));
      g.classList.toggle("selected", id === selected || id === other);
    }
    for (const [id, parts] of this.edgeEls) for (const g of parts) g.classList.toggle("lit", edgeIds.has(id));
  }
}
