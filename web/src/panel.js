// The details panel and the search box. Every string from the graph is set
// with textContent: module names and source lines come from user code.

import { lastComponent, metaLine } from "./describe.js";

function h(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text != null) e.textContent = text;
  return e;
}

const COPIED_MS = 2000; // how long a copy button says "Copied ✓"

/** "inputs / name  shape dtype device" lines, then the outputs, under the titles `said` gives. */
function shapesText(ins, outs, said) {
  const block = (title, items) => (items.length ? [title, ...items.map(({ name, meta }) => `  ${name}  ${metaLine(meta)}`)] : []);
  return [...block(said("inputs"), ins), ...block(said("outputs"), outs)].join("\n");
}

/** Put `text` on the clipboard; resolves to whether that worked. */
async function copy(text) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    return false; // no clipboard access here (an iframe without clipboard-write, say)
  }
}

export class DetailsPanel {
  constructor(root, model, describer, actions) {
    this.root = root;
    this.model = model;
    this.describer = describer;
    this.actions = actions;
    this.say = (key, values) => describer.say(key, values);
  }

  clear() {
    this.root.replaceChildren(h("p", "hint", this.say("hint")));
    this.root.dataset.selected = "";
  }

  section(title) {
    const sec = h("section");
    sec.appendChild(h("h3", null, title));
    this.root.appendChild(sec);
    return sec;
  }

  rows(parent, pairs) {
    const dl = h("dl");
    for (const [k, v, cls] of pairs) {
      if (v == null || v === "") continue;
      dl.appendChild(h("dt", null, k));
      dl.appendChild(h("dd", cls || null, String(v)));
    }
    parent.appendChild(dl);
  }

  /** In a diff's merged graph: which side has the box, and each change from A to B. */
  diff(x) {
    if (!x.df) return;
    const sec = this.section(this.say("diff"));
    sec.classList.add("diff", "diff-" + x.df);
    this.rows(sec, [[this.say("status"), x.dfw || x.df, x.df === "same" ? null : "warn"], ...(x.dfc || []).map((c) => ["", c])]);
  }

  /**
   * torchatlas.compare: the op in every run, a column per run (the first run's first) and a
   * row per field; the cells Python found to differ from the first run are highlighted.
   */
  compared(n, title = this.say("runs")) {
    const runs = this.model.doc.compared;
    if (!runs || !n.cmp) return;
    const hot = new Set((n.cmph || []).map(([run, field]) => `${run}:${field}`));
    const table = h("table", "runs");
    const head = table.appendChild(h("tr"));
    head.appendChild(h("th"));
    for (const label of runs.runs) head.appendChild(h("th", null, label));
    runs.fields.forEach((field, f) => {
      const tr = table.appendChild(h("tr"));
      tr.appendChild(h("th", null, field));
      n.cmp.forEach((column, r) => tr.appendChild(h("td", hot.has(`${r}:${f}`) ? "differs" : null, column[f])));
    });
    const sec = this.section(title);
    sec.classList.add("runs");
    sec.appendChild(h("div", "runs-scroll")).appendChild(table);
  }

  /** graph.overlay's values (torchatlas.compare's error among them), in the words the page document carries. */
  overlays(x) {
    if (!x.ovw) return;
    this.rows(this.section(this.say("overlays")), Object.entries(x.ovw).map(([name, words]) => [name, words, words.startsWith("✗") ? "warn" : null]));
  }

  tensors(parent, title, items) {
    if (!items.length) return;
    const sec = h("div", "tensors");
    sec.appendChild(h("h4", null, title));
    const list = h("ul", "tensor-list");
    for (const { name, meta } of items) {
      const li = h("li");
      li.appendChild(h("span", "tensor-name", name));
      li.appendChild(h("span", "tensor-meta", metaLine(meta)));
      list.appendChild(li);
    }
    sec.appendChild(list);
    parent.appendChild(sec);
  }

  /** "Copy path", "Copy source", "Copy shapes" buttons: each puts that text on the clipboard. */
  copyBar(parent, items) {
    const bar = h("div", "actions copy");
    for (const [what, text] of items) {
      if (!text) continue;
      const label = this.say("copy", { what });
      const b = h("button", null, label);
      b.title = this.say("copyTitle", { what });
      b.addEventListener("click", () =>
        copy(text).then((ok) => {
          b.textContent = this.say(ok ? "copied" : "copyFailed");
          setTimeout(() => (b.textContent = label), COPIED_MS); // so the button says again what it copies
        }),
      );
      bar.appendChild(b);
    }
    parent.appendChild(bar);
  }

  sourceText(src) {
    return src ? `${this.model.doc.files[src[0]]}:${src[1]}${src[2] ? "\n" + src[2] : ""}` : "";
  }

  source(parent, src) {
    if (!src) return;
    const box = h("div", "source");
    box.appendChild(h("div", "source-loc", `${this.model.doc.files[src[0]]}:${src[1]}`));
    if (src[2]) box.appendChild(h("pre", "source-code", src[2]));
    parent.appendChild(box);
  }

  /** trace(stats=True): one row per output, named as in the tensor list, in the words the page carries (`stats` may be absent). */
  outputStats(stats, words, outs) {
    if (!stats || !stats.some(Boolean)) return;
    const sec = this.section(this.say("outputStats"));
    this.rows(sec, stats.map((st, j) => [outs[j] ? outs[j].name : `[${j}]`, (st && words[j]) || "—", st && (st.nan || st.inf) ? "mono warn" : "mono"]));
  }

  showNode(idx) {
    const m = this.model;
    const n = m.nodes[idx];
    const scope = m.scopes[n.s];
    const kind = m.kindOf(n);
    this.root.replaceChildren();
    this.root.dataset.selected = "n" + idx;
    const head = this.section(this.describer.opName(n));
    head.classList.add("head");
    head.dataset.category = m.doc.categories[n.c];
    this.rows(head, [
      [this.say("kind"), kind],
      [this.say("target"), n.t, "mono"],
      [this.say("path"), n.path, "mono"],
      [this.say("variable"), n.nm, "mono"],
      [this.say("module"), scope.path || "<root>", "mono"],
      [this.say("class"), scope.cls, "mono"],
      [this.say("call"), n.a ? `${this.describer.opName(n)} ${n.a}` : null, "mono"],
      [this.say("collective"), n.cl || null],
      [this.say("decides"), n.dc ? n.dc.join("; ") : null, "mono"],
      // its marks, in Python's words (failed, nonfinite, unused, in-place, size only)
      ...(n.mk || []).filter(([kind]) => kind !== "decision" && kind !== "collective").map(([kind, text]) => [kind, text, kind === "failed" || kind === "nonfinite" ? "warn" : null]),
      [this.say("flops"), n.w?.f],
      [this.say("time"), n.w?.tu],
      [this.say("cudaTime"), n.w?.ctu],
      [this.say("outputBytes"), n.w?.ab],
    ]);
    this.diff(n);
    this.compared(n);
    this.overlays(n);
    const ins = (n.i || []).map((i, j) => {
      const src = m.nodes[i];
      const srcKind = m.kindOf(src);
      const name = srcKind === "op" ? (src.nm ? `${this.describer.opName(src)} (${src.nm})` : this.describer.opName(src)) : src.path || srcKind;
      return { name, meta: this.describer.meta(i, n.sl ? n.sl[j] : 0) };
    });
    const sec = this.section(this.say("tensors"));
    const outs = (n.o || []).map((o, j) => ({ name: n.o.length > 1 ? `[${j}]` : this.say("out"), meta: m.doc.metas[o] }));
    this.tensors(sec, this.say("inputs"), ins);
    this.tensors(sec, this.say("outputs"), outs);
    this.outputStats(n.st, n.stw, outs);
    if (n.src) this.source(this.section(this.say("sourceSection")), n.src);
    this.copyBar(head, [[this.say("path"), n.path || scope.path], [this.say("source"), this.sourceText(n.src)], [this.say("shapes"), shapesText(ins, outs, this.say)]]);
    this.actions.onShown?.();
  }

  showScope(sIdx) {
    const m = this.model;
    const s = m.scopes[sIdx];
    this.root.replaceChildren();
    this.root.dataset.selected = "s" + sIdx;
    const head = this.section(s.path || "<root>");
    head.classList.add("head");
    head.dataset.category = "module";
    const inside = m.nodesUnder(sIdx);
    const ops = inside.filter((n) => m.kindOf(n) === "op").length;
    const rep = s.rep && m.groups.has(s.rep[0]) ? this.say("repeatOf", { i: s.rep[1] + 1, n: s.rep[2] }) : null;
    this.rows(head, [
      [this.say("kind"), this.say("moduleCall")],
      [this.say("class"), s.cls, "mono"],
      [this.say("call"), s.call ? `#${s.call}` : null],
      [this.say("repeat"), rep],
      [this.say("ops"), String(ops)],
      [this.say("parameters"), s.pw],
      [this.say("flops"), s.w?.f],
      [this.say("time"), s.w?.tu],
      [this.say("cudaTime"), s.w?.ctu],
      [this.say("activationBytes"), s.w?.ab],
      [this.say("nonfiniteOps"), s.nf != null ? String(s.nf) : null, s.nf ? "warn" : null],
      ...(s.mk || []).map(([kind, text]) => [kind, text, "warn"]),
    ]);
    this.diff(s);
    // a compared call: the table of the op that made what it returned
    const made = s.out && s.out.length === 1 ? m.nodes[s.out[0]] : null;
    if (made && made.cmp) this.compared(made, this.say("runsOfOutput", { op: this.describer.opName(made) }));
    const bar = h("div", "actions");
    const hidden = m.foldedGroupOf(s) !== null && m.groups.get(s.rep[0])[0] !== sIdx;
    const open = m.expanded.has(sIdx) && !hidden;
    const toggle = h("button", null, this.say(open ? "collapse" : "expand"));
    toggle.addEventListener("click", () => this.actions.onToggleScope(sIdx));
    bar.appendChild(toggle);
    if (s.rep && m.groups.has(s.rep[0])) {
      const folded = m.folded.has(s.rep[0]);
      const fold = h("button", null, this.say(folded ? "unfold" : "fold", { n: s.rep[2] }));
      fold.addEventListener("click", () => this.actions.onToggleFold(s.rep[0]));
      bar.appendChild(fold);
    }
    head.appendChild(bar);

    const inSet = new Set(inside.map((n) => n.idx));
    const boundary = [];
    const seen = new Set();
    for (const n of inside) {
      (n.i || []).forEach((i, j) => {
        const src = m.nodes[i];
        const k = m.kindOf(src);
        if (inSet.has(i) || m.state.has(k) || seen.has(i)) return;
        seen.add(i);
        boundary.push({ name: src.nm || src.path || (k === "op" ? this.describer.opName(src) : k), meta: this.describer.meta(i, n.sl ? n.sl[j] : 0) });
      });
    }
    this.overlays(s);
    const sec = this.section(this.say("tensors"));
    const outs = (s.out || []).map((i) => ({ name: m.nodes[i].nm || lastComponent(m.nodes[i].t || this.say("out")), meta: this.describer.meta(i) }));
    this.tensors(sec, this.say("inputs"), boundary);
    this.tensors(sec, this.say("outputs"), outs);
    this.outputStats(s.st, s.stw, outs);
    if (s.src) this.source(this.section(this.say("calledFrom")), s.src);
    this.copyBar(head, [[this.say("path"), s.path], [this.say("source"), this.sourceText(s.src)], [this.say("shapes"), shapesText(boundary, outs, this.say)]]);
    this.actions.onShown?.();
  }
}

const ROWS_SHOWN = 200; // search rows listed; the count above them says how many matched

export class SearchBox {
  constructor(input, list, model, onPick) {
    this.input = input;
    this.list = list;
    this.model = model;
    this.onPick = onPick;
    this.hits = [];
    this.active = 0;
    input.addEventListener("input", () => this.update());
    input.addEventListener("keydown", (ev) => this.onKey(ev));
    input.addEventListener("focus", () => this.update());
    document.addEventListener("click", (ev) => {
      if (!list.contains(ev.target) && ev.target !== input) this.close();
    });
  }

  close() {
    this.list.replaceChildren();
    this.list.classList.add("hidden");
  }

  /** One row per distinct hit (the four `relu` of one module are one row, ×4), under a count of matches. */
  update() {
    const m = this.model;
    const rows = new Map(); // row text -> {kind, idx: [hits], main, sub}
    const hits = m.search(this.input.value);
    for (const hit of hits) {
      let main;
      let sub;
      if (hit.kind === "s") {
        const s = m.scopes[hit.idx];
        [main, sub] = [s.path, lastComponent(s.cls)];
      } else {
        const n = m.nodes[hit.idx];
        [main, sub] = [n.t || n.path || m.kindOf(n), m.scopes[n.s].path || "<root>"];
      }
      const key = `${hit.kind}\u0000${main}\u0000${sub}`;
      if (!rows.has(key)) rows.set(key, { kind: hit.kind, idx: [], main, sub, next: 0 });
      rows.get(key).idx.push(hit.idx);
    }
    this.hits = [...rows.values()].slice(0, ROWS_SHOWN);
    this.active = 0;
    this.list.replaceChildren();
    this.list.classList.toggle("hidden", !this.input.value.trim());
    const shown = this.hits.length < rows.size ? ` · first ${this.hits.length} shown` : "";
    this.list.appendChild(h("li", "search-count", hits.length ? `${hits.length} ${hits.length === 1 ? "match" : "matches"} in ${rows.size} ${rows.size === 1 ? "row" : "rows"}${shown}` : "no matches"));
    this.hits.forEach((row, i) => {
      const li = h("li", i === 0 ? "hit active" : "hit");
      li.appendChild(h("span", "hit-main mono", row.main));
      if (row.idx.length > 1) li.appendChild(h("span", "hit-count", `×${row.idx.length}`));
      li.appendChild(h("span", "hit-sub", row.sub));
      li.title = row.idx.length > 1 ? "Enter or click again for the next one" : "";
      li.addEventListener("click", () => this.pick(i));
      this.list.appendChild(li);
    });
  }

  onKey(ev) {
    if (ev.key === "ArrowDown" || ev.key === "ArrowUp") {
      ev.preventDefault();
      const items = this.list.querySelectorAll("li.hit");
      if (!items.length) return;
      items[this.active]?.classList.remove("active");
      this.active = (this.active + (ev.key === "ArrowDown" ? 1 : items.length - 1)) % items.length;
      items[this.active].classList.add("active");
      items[this.active].scrollIntoView({ block: "nearest" });
    } else if (ev.key === "Enter") {
      this.pick(this.active);
    } else if (ev.key === "Escape") {
      this.close();
      this.input.blur();
    }
  }

  /** Go to a row's hit; a row of several identical hits goes to the next one on each pick. */
  pick(i) {
    const row = this.hits[i];
    if (!row) return;
    const idx = row.idx[row.next];
    row.next = (row.next + 1) % row.idx.length;
    if (row.idx.length === 1) this.close();
    this.onPick(row.kind === "s" ? "s" : "n", idx);
  }
}
