// What each box says: titles, subtitles and edge labels, from the words the page document carries.

import { Model } from "./model.js";

/** "2×10×96": a tensor's shape as the page document writes it (Python decides every word). */
export function shapeOf(meta) {
  return meta ? meta.x : "";
}

/** "2×10×96  float32  cpu": a tensor's line in tooltips and the details panel. */
export function metaLine(meta) {
  return meta ? meta.full : "—";
}

const LABEL_MAX = 48; // characters of a name on a box: a longer one is cut (the details panel shows it whole)

/** `text` cut to `max` characters, the last one "…", so that a huge name cannot make a huge box. */
export function shorten(text, max = LABEL_MAX) {
  if (text.length <= max) return text;
  let cut = text.slice(0, max - 1);
  if (/[\ud800-\udbff]$/.test(cut)) cut = cut.slice(0, -1); // not half a character
  return cut + "…";
}

export function lastComponent(path) {
  const i = path.lastIndexOf(".");
  return i < 0 ? path : path.slice(i + 1);
}

/** A box's marks as flags (`failed`, `nonfinite`…) for its style; the words are Python's (`mk`). */
function markFlags(x) {
  const kinds = new Set((x.mk || []).map(([kind]) => kind));
  return { failed: kinds.has("failed"), nonfinite: kinds.has("nonfinite"), dead: kinds.has("unused"), decision: kinds.has("decision"), inplace: kinds.has("in-place") };
}

export class Describer {
  constructor(model) {
    this.model = model;
    this.metas = model.doc.metas;
  }

  /** The page's words outside its boxes (the document's `ui`, Python's), `{name}` filled from `values`. */
  say(key, values = {}) {
    const words = (this.model.doc.ui || {})[key] ?? key;
    return words.replace(/\{(\w+)\}/g, (whole, name) => (name in values ? String(values[name]) : whole));
  }

  meta(nodeIdx, slot = 0) {
    const o = this.model.nodes[nodeIdx].o || [];
    return slot < o.length ? this.metas[o[slot]] : null;
  }

  opName(n) {
    return this.model.doc.names[n.op];
  }

  /** {title, subtitle, badge, category} of a leaf unit, names shortened for the box. */
  unit(id) {
    const d = this.fullUnit(id);
    return { ...d, title: shorten(d.title), subtitle: d.subtitle && shorten(d.subtitle) };
  }

  /**
   * A box's number for a data overlay (a key of the page's `metrics`: `f` FLOPs, `tu` time…),
   * or null where the graph has none. For `nf` an op counts 1 when its outputs hold NaN or Inf.
   */
  metric(id, name) {
    const m = this.model;
    if (name.startsWith("ov:")) return this.overlayOf(id)?.ov?.[name.slice(3)] ?? null;
    if (id[0] === "n") {
      const n = m.nodes[Number(id.slice(1))];
      if (name === "nf") return n.nf ? 1 : n.st ? 0 : null;
      return n[name] ?? null;
    }
    const s = m.scopes[Model.unitScope(id)];
    if (id[0] !== "g") return s[name] ?? null;
    return this.fold(s).v[name] ?? null; // the run's total, summed in Python
  }

  /** The words of a box's number, as every output writes it ("7.1B", "3.40 ms"); "" where none. */
  metricWord(id, name) {
    const m = this.model;
    if (name.startsWith("ov:")) return this.overlayOf(id)?.ovw?.[name.slice(3)] ?? "";
    if (id[0] === "n") {
      const n = m.nodes[Number(id.slice(1))];
      return name === "nf" ? (n.nf ? "1" : "0") : (n.w && n.w[name]) || "";
    }
    const s = m.scopes[Model.unitScope(id)];
    const words = id[0] === "g" ? this.fold(s).w : s.w;
    return (words && words[name]) || "";
  }

  /**
   * Where a box's overlay values (graph.overlay: `ov`, `ovw`) are: its node, its call, or a
   * folded run's first member.
   */
  overlayOf(id) {
    const m = this.model;
    return id[0] === "n" ? m.nodes[Number(id.slice(1))] : m.scopes[Model.unitScope(id)];
  }

  /** The page document's fold a scope belongs to: {name, v: totals, w: their words}. */
  fold(s) {
    return this.model.doc.folds[s.rep[0]];
  }

  /** Everything a box shows, as one string: a box is redrawn when it changes. */
  said(id) {
    const d = this.unit(id);
    return `${d.title}\u0000${d.subtitle || ""}\u0000${d.badge || ""}\u0000${d.category}\u0000${d.diff || ""}\u0000${d.divergence || ""}`;
  }

  /** A box's hover text: its whole name, what it is and what it makes. */
  tooltip(id) {
    const m = this.model;
    const d = this.fullUnit(id);
    let lines;
    if (id[0] === "n") {
      const n = m.nodes[Number(id.slice(1))];
      const marks = (n.mk || []).filter(([kind]) => kind !== "decision").map(([, text]) => text);
      lines = [n.t || n.path || m.kindOf(n), n.nm && `= ${n.nm}`, (n.o || []).map((o) => metaLine(m.doc.metas[o])).join(", "), ...marks, ...(n.dc || []).map((t) => `◆ ${t}`)];
    } else {
      const s = m.scopes[Model.unitScope(id)];
      lines = [d.badge ? `${d.title} ${d.badge}` : s.path || "<root>", s.cls, ...(s.mk || []).map(([, text]) => text)];
    }
    const x = id[0] === "n" ? m.nodes[Number(id.slice(1))] : m.scopes[Model.unitScope(id)];
    if (x && x.df && x.df !== "same") lines.push(`${x.dfw}${x.dfn ? ": " + x.dfn : ""}`);
    return lines.filter(Boolean).map((line) => shorten(line, 300)).join("\n");
  }

  /**
   * A unit as unitFace gives it, and what the page data adds: a box of the backward part (its
   * scope's "bw") is drawn dashed, as in the diagram; in a diff's merged graph, which side has
   * the box, its subtitle the change.
   */
  fullUnit(id) {
    const m = this.model;
    let d = this.unitFace(id);
    const s = m.scopes[id[0] === "n" ? m.nodes[Number(id.slice(1))].s : Model.unitScope(id)];
    if (s.bw) d = { ...d, backward: true };
    const x = id[0] === "n" ? m.nodes[Number(id.slice(1))] : m.scopes[Model.unitScope(id)];
    if (x && x.df) d = { ...d, diff: x.df, subtitle: x.dfn || d.subtitle };
    // torchatlas.compare's mark (a fold: its first member's; compare unfolds a run that hides a divergence)
    if (x && x.ovs) d = { ...d, divergence: x.ovs };
    return d;
  }

  unitFace(id) {
    const m = this.model;
    if (id[0] === "n") {
      const n = m.nodes[Number(id.slice(1))];
      const kind = m.kindOf(n);
      const cat = m.doc.categories[n.c];
      if (kind === "op") {
        // the mark that wins is its subtitle (Python's order); else in-place and the weights it reads
        const [first] = n.mk || [];
        const held = !this.model.showParams && n.pr;
        const subtitle = first && first[0] !== "in-place" ? first[1] : [first && first[1], held].filter(Boolean).join(" · ");
        return { title: this.opName(n), subtitle: subtitle || undefined, category: cat, ...markFlags(n) };
      }
      return { title: this.opName(n), subtitle: shapeOf(this.meta(n.idx)), category: cat };
    }
    const s = m.scopes[Model.unitScope(id)];
    const cls = lastComponent(s.cls);
    if (id[0] === "g") {
      const members = m.groups.get(s.rep[0]);
      const flags = members.map((i) => markFlags(m.scopes[i]));
      // a closed box names the collectives inside it (page data: the scope's "cw"), as the diagram's does
      const subtitle = s.cw ? `${cls} · ${s.cw}` : cls;
      return { title: this.fold(s).name, subtitle, badge: `×${members.length}`, category: "module", module: true, failed: flags.some((f) => f.failed), nonfinite: flags.some((f) => f.nonfinite) };
    }
    // A module holding no other module has the colour of its ops (page data: the scope's "c").
    const category = s.c != null ? m.doc.categories[s.c] : "module";
    const subtitle = [cls, ...(s.mk || []).map(([, text]) => text), s.cw].filter(Boolean).join(" · ");
    return { title: s.nm, subtitle, category, module: true, ...markFlags(s) };
  }

  /** One shape per tensor the edge carries, as the diagram's edge lists them. */
  edgeLabel(e) {
    return e.values.map(([node, slot]) => shapeOf(this.meta(node, slot))).join(", ");
  }

  /** The "×N" of an open fold's first member, or "". */
  containerBadge(sIdx) {
    const s = this.model.scopes[sIdx];
    return this.model.foldedGroupOf(s) !== null ? `×${this.model.groups.get(s.rep[0]).length}` : "";
  }

  /** An open module's title: its path below the enclosing module ("self_attn" inside "layers.0"), as the page document names it. */
  containerTitle(sIdx) {
    return shorten(this.fullContainerTitle(sIdx));
  }

  fullContainerTitle(sIdx) {
    const s = this.model.scopes[sIdx];
    return this.containerBadge(sIdx) ? this.fold(s).name : s.nm;
  }

  containerSubtitle(sIdx) {
    const s = this.model.scopes[sIdx];
    return shorten(lastComponent(s.cls) + (s.df && s.df !== "same" && s.dfn ? ` · ${s.dfn}` : ""));
  }
}
