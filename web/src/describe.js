// What each box says: titles, subtitles, edge labels and number formatting.

import { Model } from "./model.js";

export function formatShape(meta) {
  if (!meta) return "";
  return meta.shape.length ? meta.shape.join("×") : "scalar";
}

export function formatMeta(meta) {
  if (!meta) return "—";
  return `${formatShape(meta)}  ${meta.dtype}  ${meta.device}`;
}

export function formatCount(n) {
  if (n == null) return "—";
  const units = [
    [1e12, "T"],
    [1e9, "G"],
    [1e6, "M"],
    [1e3, "k"],
  ];
  for (const [v, u] of units) if (Math.abs(n) >= v) return `${(n / v).toFixed(n / v >= 100 ? 0 : 1)}${u}`;
  return String(n);
}

/** 1536 -> "1.50 KiB", as the summary writes bytes. */
export function formatBytes(n) {
  if (n == null) return "—";
  for (const [scale, unit] of [[2 ** 40, "TiB"], [2 ** 30, "GiB"], [2 ** 20, "MiB"], [2 ** 10, "KiB"]]) {
    if (Math.abs(n) >= scale) return `${(n / scale).toFixed(2)} ${unit}`;
  }
  return `${Math.round(n)} B`;
}

/** Microseconds as the summary writes them: "812 µs", "3.40 ms", "1.20 s". */
export function formatTime(us) {
  if (us == null) return "—";
  if (us >= 1e6) return `${(us / 1e6).toFixed(2)} s`;
  if (us >= 1e3) return `${(us / 1e3).toFixed(2)} ms`;
  return `${us.toFixed(0)} µs`;
}

/** A metric's number in its unit ("count", "bytes" or "us", from the page's `metrics`). */
export function formatMetric(value, unit) {
  return unit === "bytes" ? formatBytes(value) : unit === "us" ? formatTime(value) : formatCount(value);
}

/** "NaN×3 Inf×1": the non-finite counts of an op's outputs (`nf`: [nan, inf]). */
export function nonfiniteText(nf) {
  return [nf[0] && `NaN×${formatCount(nf[0])}`, nf[1] && `Inf×${formatCount(nf[1])}`].filter(Boolean).join(" ");
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

/** "layers.0" … "layers.79" -> "layers.0–79". */
export function foldedPath(first, last) {
  let k = 0;
  while (k < first.length && first[k] === last[k]) k++;
  while (k > 0 && first[k - 1] !== ".") k--;
  return `${first}–${last.slice(k)}`;
}

/** What a diff's merged graph says of a box: which side has it. */
export const DIFF_WORDS = { same: "in A and B", changed: "changed from A to B", added: "added in B", removed: "removed from A", "pass-through": "passes its input on, on one side only" };

export class Describer {
  constructor(model) {
    this.model = model;
    this.metas = model.doc.metas;
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
    if (id[0] === "n") {
      const n = m.nodes[Number(id.slice(1))];
      if (name === "nf") return n.nf ? 1 : n.st ? 0 : null;
      return n[name] ?? null;
    }
    const s = m.scopes[Model.unitScope(id)];
    if (id[0] !== "g") return s[name] ?? null;
    const values = m.groups.get(s.rep[0]).map((i) => m.scopes[i][name]).filter((v) => v != null);
    return values.length ? values.reduce((a, b) => a + b, 0) : null;
  }

  /** Everything a box shows, as one string: a box is redrawn when it changes. */
  said(id) {
    const d = this.unit(id);
    return `${d.title}\u0000${d.subtitle || ""}\u0000${d.badge || ""}\u0000${d.category}\u0000${d.diff || ""}`;
  }

  /** A box's hover text: its whole name, what it is and what it makes. */
  tooltip(id) {
    const m = this.model;
    const d = this.fullUnit(id);
    let lines;
    if (id[0] === "n") {
      const n = m.nodes[Number(id.slice(1))];
      lines = [n.t || n.path || m.kindOf(n), n.nm && `= ${n.nm}`, (n.o || []).map((o) => formatMeta(m.doc.metas[o])).join(", "), n.nf && `⚠ ${nonfiniteText(n.nf)}`, ...(n.dc || []).map((t) => `◆ ${t}`)];
    } else {
      const s = m.scopes[Model.unitScope(id)];
      lines = [d.badge ? `${d.title} ${d.badge}` : s.path || "<root>", s.cls, s.nf > 0 && `⚠ ${s.nf} ops with NaN/Inf inside`];
    }
    const x = id[0] === "n" ? m.nodes[Number(id.slice(1))] : m.scopes[Model.unitScope(id)];
    if (x && x.df && x.df !== "same") lines.push(`${DIFF_WORDS[x.df] || x.df}${x.dfn ? ": " + x.dfn : ""}`);
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
    return d;
  }

  unitFace(id) {
    const m = this.model;
    if (id[0] === "n") {
      const n = m.nodes[Number(id.slice(1))];
      const kind = m.kindOf(n);
      const cat = m.doc.categories[n.c];
      if (kind === "op") {
        if (n.err) return { title: this.opName(n), subtitle: "✗ failed here", category: cat, failed: true };
        if (n.nf) return { title: this.opName(n), subtitle: `⚠ ${nonfiniteText(n.nf)}`, category: cat, nonfinite: true };
        if (n.dead) return { title: this.opName(n), subtitle: "unused", category: cat, dead: true };
        if (n.dm) return { title: this.opName(n), subtitle: `◆ ${n.dm}`, category: cat, decision: true };
        if (n.so) return { title: this.opName(n), subtitle: "size only", category: cat };
        return { title: this.opName(n), subtitle: this.paramsRead(n), category: cat };
      }
      const title = kind === "output" ? n.path || "output" : kind === "input" ? n.path || "input" : lastComponent(n.path || kind);
      return { title, subtitle: formatShape(this.meta(n.idx)), category: cat };
    }
    const s = m.scopes[Model.unitScope(id)];
    const name = s.path ? lastComponent(s.path) : "<root>";
    const cls = lastComponent(s.cls);
    if (id[0] === "g") {
      const members = m.groups.get(s.rep[0]);
      const last = m.scopes[members[members.length - 1]];
      const nonfinite = members.some((i) => m.scopes[i].nf > 0);
      return { title: foldedPath(s.path, last.path), subtitle: cls, badge: `×${members.length}`, category: "module", module: true, failed: !!s.err, nonfinite };
    }
    // A module holding no other module has the colour of its ops (page data: the scope's "c").
    const category = s.c != null ? m.doc.categories[s.c] : "module";
    const subtitle = s.nf > 0 ? `${cls} · ⚠ ${formatCount(s.nf)} NaN/Inf op${s.nf === 1 ? "" : "s"}` : cls;
    return { title: s.call ? `${name} #${s.call}` : name, subtitle, category, module: true, failed: !!s.err, nonfinite: s.nf > 0 };
  }

  /** "W 16×3×3×3 · b 16": the parameters an op reads, shown while parameters are hidden. */
  paramsRead(n) {
    if (this.model.showParams) return "";
    const parts = [];
    for (const i of n.i || []) {
      const src = this.model.nodes[i];
      const kind = this.model.kindOf(src);
      if (kind !== "param" && kind !== "buffer") continue;
      const leaf = lastComponent(src.path || "");
      const short = leaf === "weight" ? "W" : leaf === "bias" ? "b" : leaf;
      parts.push(`${short} ${formatShape(this.meta(src.idx))}`);
    }
    return parts.slice(0, 2).join(" · ");
  }

  edgeLabel(e) {
    return formatShape(this.meta(e.node, e.slot));
  }

  /** The "×N" of an open fold's first member, or "". */
  containerBadge(sIdx) {
    const s = this.model.scopes[sIdx];
    return this.model.foldedGroupOf(s) !== null ? `×${this.model.groups.get(s.rep[0]).length}` : "";
  }

  /** An open module's title: its path below the enclosing module ("self_attn" inside "layers.0"). */
  containerTitle(sIdx) {
    return shorten(this.fullContainerTitle(sIdx));
  }

  fullContainerTitle(sIdx) {
    const s = this.model.scopes[sIdx];
    if (this.containerBadge(sIdx)) {
      const members = this.model.groups.get(s.rep[0]);
      const last = this.model.scopes[members[members.length - 1]];
      return foldedPath(s.path, last.path);
    }
    const parent = this.model.scopes[s.p];
    const path = parent && parent.path && s.path.startsWith(parent.path + ".") ? s.path.slice(parent.path.length + 1) : s.path;
    return `${path}${s.call ? " #" + s.call : ""}`;
  }

  containerSubtitle(sIdx) {
    const s = this.model.scopes[sIdx];
    return shorten(lastComponent(s.cls) + (s.df && s.df !== "same" && s.dfn ? ` · ${s.dfn}` : ""));
  }
}
