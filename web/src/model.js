// The graph document the page embeds, and the "visible graph" derived from it:
// which boxes are on screen for the current expand/fold state, and which edges
// join them. Pure data; no DOM.

export class Model {
  constructor(doc) {
    this.doc = doc;
    this.kinds = doc.kinds;
    // `w`: an index into the document's interned `words` (a box's numbers as every output writes them)
    const words = (w) => (w == null ? undefined : doc.words[w]);
    this.scopes = doc.scopes.map((s, i) => ({ ...s, idx: i, children: [], nodes: [], depth: 0, w: words(s.w) }));
    this.nodes = doc.nodes.map((n, i) => ({ ...n, idx: i, w: words(n.w) }));
    for (const s of this.scopes) {
      if (s.p >= 0) {
        this.scopes[s.p].children.push(s.idx);
        s.depth = this.scopes[s.p].depth + 1;
      }
    }
    for (const n of this.nodes) this.scopes[n.s].nodes.push(n.idx);
    this.maxDepth = this.scopes.reduce((m, s) => Math.max(m, s.depth), 0);
    this.users = this.nodes.map(() => []);
    for (const n of this.nodes) for (const i of n.i || []) this.users[i].push(n.idx);
    this.groups = new Map(); // repeat group -> member scope indices, in order
    for (const s of this.scopes) {
      if (!s.rep) continue;
      const [group] = s.rep;
      if (!this.groups.has(group)) this.groups.set(group, []);
      this.groups.get(group).push(s.idx);
    }
    for (const [g, members] of this.groups) if (members.length < 2) this.groups.delete(g);
    this.expanded = new Set([0]);
    // The first view, decided in Python (`_view.page_view`) as for every other output.
    const view = doc.view || {};
    this.hidden = new Set(view.hidden || []); // node kinds drawn only while the params switch is on
    this.state = new Set(view.state || []); // parameters and buffers: what an op reads as its weights
    this.folded = new Set(view.fold === false ? [] : this.groups.keys());
    this.startDepth = view.depth ?? null; // null: as deep as fits the window
    this.closed = new Set(view.closed || []); // standard torch.nn layers: one box, as in the diagram
    this.startDirection = view.direction || "DOWN";
    this.showParams = false;
  }

  kindOf(n) {
    return this.kinds[n.k];
  }

  isVisibleKind(n) {
    return this.showParams || !this.hidden.has(this.kindOf(n));
  }

  /** The fold group a scope heads or belongs to, when that group is folded. */
  foldedGroupOf(s) {
    return s.rep && this.folded.has(s.rep[0]) && this.groups.has(s.rep[0]) ? s.rep[0] : null;
  }

  /** For each scope, the unit id its direct nodes collapse into, or null when expanded all the way. */
  scopeUnits() {
    const units = new Array(this.scopes.length).fill(null);
    for (const s of this.scopes) {
      if (s.p < 0) continue;
      const up = units[s.p];
      if (up !== null) units[s.idx] = up;
      else if (this.foldedGroupOf(s) !== null) {
        // A fold is one box; opened, it shows its first member and hides the rest.
        const first = this.groups.get(s.rep[0])[0];
        if (!this.expanded.has(first)) units[s.idx] = "g" + first;
        else if (s.idx !== first) units[s.idx] = "c" + first;
      } else if (!this.expanded.has(s.idx)) units[s.idx] = "s" + s.idx;
    }
    return units;
  }

  unitOfNode(n, units) {
    const up = units[n.s];
    if (up != null) return up;
    if (n.rg && this.folded.has(n.rg[0]) && this.groups.has(n.rg[0])) {
      // A folded loop's caller ops belong to its box; opened, the first iteration's show.
      const first = this.groups.get(n.rg[0])[0];
      if (!this.expanded.has(first)) return "g" + first;
      if (n.rg[1] > 0) return "c" + first;
    }
    return "n" + n.idx;
  }

  /** The scope index behind a unit id ("s3", "g3": the fold's first member; -1 for others). */
  static unitScope(id) {
    return id[0] === "s" || id[0] === "g" || id[0] === "c" ? Number(id.slice(1)) : -1;
  }

  /**
   * The visible graph: leaf units (ops, inputs, collapsed modules, folds),
   * expanded modules as containers, and deduplicated edges between units.
   */
  visibleGraph() {
    const units = this.scopeUnits();
    const leaves = new Map(); // unit id -> {id, kind, container, first}
    const containerOfScope = (sIdx) => {
      let c = sIdx;
      while (c > 0 && !this.expanded.has(c)) c = this.scopes[c].p;
      return c;
    };
    for (const n of this.nodes) {
      if (!this.isVisibleKind(n)) continue;
      const u = this.unitOfNode(n, units);
      if (leaves.has(u) || u[0] === "c") continue;
      let container;
      if (u[0] === "n") container = n.s;
      else container = this.scopes[Model.unitScope(u)].p;
      leaves.set(u, { id: u, kind: u[0], container: container === 0 ? 0 : containerOfScope(container), first: n.idx });
    }
    const containers = new Map([[0, { idx: 0, children: [], parent: -1 }]]);
    const ensure = (sIdx) => {
      if (containers.has(sIdx)) return containers.get(sIdx);
      const parent = ensure(containerOfScope(this.scopes[sIdx].p));
      const c = { idx: sIdx, children: [], parent: parent.idx };
      containers.set(sIdx, c);
      parent.children.push("c" + sIdx);
      return c;
    };
    for (const leaf of leaves.values()) ensure(leaf.container).children.push(leaf.id);

    const chainOf = (id) => {
      const chain = new Set();
      for (let c = id[0] === "c" ? Number(id.slice(1)) : leaves.get(id).container; c >= 0; c = containers.get(c).parent) chain.add(c);
      return chain;
    };
    const edges = new Map();
    for (const n of this.nodes) {
      if (!this.isVisibleKind(n)) continue;
      const v = this.unitOfNode(n, units);
      // Reads by the hidden members of an open fold are shown by its first member's.
      if (v[0] === "c") continue;
      const ins = n.i || [];
      for (let j = 0; j < ins.length; j++) {
        const src = this.nodes[ins[j]];
        if (!this.isVisibleKind(src)) continue;
        const u = this.unitOfNode(src, units);
        if (u === v) continue;
        // What leaves an open fold comes from its last, hidden member: the edge starts at the fold's frame.
        if (u[0] === "c" && (!containers.has(Number(u.slice(1))) || chainOf(v).has(Number(u.slice(1))))) continue;
        const key = u + ">" + v;
        const slot = n.sl ? n.sl[j] : 0;
        let e = edges.get(key);
        // a value into or out of a collective goes between ranks: drawn dashed
        const comm = !!(src.cm || n.cm);
        if (!e) {
          e = { id: key, source: u, target: v, node: src.idx, slot, count: 0, values: [], comm, near: new Set() };
          edges.set(key, e);
        }
        e.count++;
        e.comm = e.comm || comm;
        // every tensor the edge carries, once: its label names each (an LSTM's h and c)
        if (!e.values.some(([i, s]) => i === src.idx && s === slot)) e.values.push([src.idx, slot]);
        // read here as an edge at least once (Python's `fr` lists the reads drawn as stand-ins)
        if (!(n.fr && n.fr.includes(j))) e.near.add(src.idx + ":" + slot);
      }
    }
    const all = [...edges.values()];
    return { leaves, containers, edges: all, drawn: this.withReferences(all, leaves), units };
  }

  /**
   * Edges as drawn. A value read far from where it was made (a DenseNet layer's output read by
   * every later layer, a mask or rotary embedding read by every decoder layer) would run one
   * long edge to each reader, which clutters the picture and makes the layered layout quadratic.
   * Python decides which reads those are, by the diagram's one rule (`_view.stand_in_reads`, each
   * node's `fr`): a value every read of which into a box is such a read is listed in a small
   * "↪ name" note above the box (`leaf.refs`) instead, which costs the layout nothing.
   */
  withReferences(edges, leaves) {
    for (const leaf of leaves.values()) leaf.refs = [];
    const drawn = [];
    // Kept in order, so that modules of the same shape list their edges alike (see levels.js).
    for (const e of edges) {
      const far = e.values.filter(([i, s]) => !e.near.has(i + ":" + s));
      if (far.length === 0) drawn.push(e);
      else if (far.length === e.values.length) leaves.get(e.target).refs.push(e);
      else {
        // some tensors of the edge are read near, others far: an edge for those, a note for these
        const [i, s] = e.values.find(([i, s]) => e.near.has(i + ":" + s));
        drawn.push({ ...e, node: i, slot: s, values: e.values.filter(([i, s]) => e.near.has(i + ":" + s)) });
        leaves.get(e.target).refs.push({ ...e, id: e.id + ">ref", node: far[0][0], slot: far[0][1], values: far });
      }
    }
    return drawn;
  }

  /** Scopes worth opening: a module around a single op says more as one named box. */
  isTrivial(s) {
    if (this._opCounts === undefined) {
      this._opCounts = this.scopes.map(() => 0);
      for (const n of this.nodes) if (this.kindOf(n) === "op") this._opCounts[n.s]++;
    }
    return s.children.length === 0 && this._opCounts[s.idx] <= 1;
  }

  /** Open every scope above `depth`; with `skipTrivial`, single-op leaf modules stay closed, and
   * with `keepLayers` the standard torch.nn layers the diagram boxes (`doc.view.closed`). */
  expandToDepth(depth, skipTrivial = false, keepLayers = skipTrivial, openFolds = false) {
    // Members of a folded repeat stay closed, so unfolding shows N boxes, not N open layers; with
    // `openFolds` (a depth asked for) a fold above it opens as its first member, as the diagram draws it.
    const folded = (s) => this.foldedGroupOf(s) !== null && !(openFolds && s.rep[1] === 0);
    const open = (s) =>
      s.depth === 0 || (s.depth < depth && !folded(s) && !(keepLayers && this.closed.has(s.idx)) && !(skipTrivial && this.isTrivial(s)));
    this.expanded = new Set(this.scopes.filter(open).map((s) => s.idx));
  }

  /** The deepest depth whose visible graph stays under `budget` boxes (at least 1). */
  depthWithin(budget, skipTrivial = false) {
    const saved = this.expanded;
    let best = 1;
    for (let d = 2; d <= this.maxDepth + 1; d++) {
      this.expandToDepth(d, skipTrivial);
      if (this.visibleGraph().leaves.size > budget) break;
      best = d;
    }
    this.expanded = saved;
    return best;
  }

  /** Expand the ancestors of a node or scope (and unfold their folds) so it gets its own box. */
  reveal(kind, idx) {
    let s = kind === "n" ? this.nodes[idx].s : this.scopes[idx].p;
    if (kind === "s") this.unfoldIfNeeded(this.scopes[idx]);
    while (s > 0) {
      this.expanded.add(s);
      this.unfoldIfNeeded(this.scopes[s]);
      s = this.scopes[s].p;
    }
    if (kind === "n" && !this.isVisibleKind(this.nodes[idx])) this.showParams = true;
  }

  unfoldIfNeeded(scope) {
    if (scope.rep) this.folded.delete(scope.rep[0]);
  }

  /** Scope indices from the root down to `sIdx`. */
  ancestry(sIdx) {
    const chain = [];
    for (let s = sIdx; s >= 0; s = this.scopes[s].p) chain.push(s);
    return chain.reverse();
  }

  /** How many nodes lie anywhere under each scope (`nodesUnder(s).length` for every s at once), counted once. */
  nodeCounts() {
    if (!this.counts) {
      this.counts = new Array(this.scopes.length).fill(0);
      for (const n of this.nodes) this.counts[n.s] += 1;
      for (let i = this.scopes.length - 1; i > 0; i--) this.counts[this.scopes[i].p] += this.counts[i]; // parents come first
    }
    return this.counts;
  }

  /** Nodes anywhere under a scope, in execution order. */
  nodesUnder(sIdx) {
    const inside = new Set();
    const stack = [sIdx];
    while (stack.length) {
      const s = stack.pop();
      inside.add(s);
      stack.push(...this.scopes[s].children);
    }
    return this.nodes.filter((n) => inside.has(n.s));
  }

  /**
   * Every match of module paths, classes, op targets, node paths, variable names
   * and output shapes (`1x16x32x32` or `1×16×32×32`); best first. `/pattern/`
   * searches by regular expression.
   */
  search(query) {
    const text = query.trim();
    if (!text) return [];
    const hits = [];
    const regex = /^\/(.+)\/$/.exec(text);
    let find;
    if (regex) {
      let re;
      try {
        re = new RegExp(regex[1], "i");
      } catch {
        return []; // not a regular expression (yet: the user is still typing)
      }
      find = (t) => {
        const m = re.exec(t);
        return m ? m.index : -1;
      };
    } else {
      const q = text.toLowerCase().replaceAll("x", "×");
      find = (t) => t.toLowerCase().replaceAll("x", "×").indexOf(q);
    }
    const score = (t) => {
      const at = find(t);
      if (at < 0) return -1;
      const whole = t.length === text.length && at === 0;
      return (whole ? 0 : at + text.length === t.length ? 1 : 2) * 1000 + at + t.length / 100;
    };
    for (const s of this.scopes) {
      if (s.p < 0) continue;
      // s.dfa: in a diff's merged graph, the name a renamed module had in A
      const best = Math.min(...[s.path, s.cls, s.dfa].filter((t) => t != null).map(score).map((x) => (x < 0 ? Infinity : x)));
      if (best !== Infinity) hits.push({ kind: "s", idx: s.idx, score: best });
    }
    for (const n of this.nodes) {
      const texts = [n.t, n.path, n.nm, ...(n.o || []).map((o) => this.doc.metas[o].shape.join("×"))].filter(Boolean);
      const best = Math.min(...texts.map(score).map((x) => (x < 0 ? Infinity : x)));
      if (best !== Infinity) hits.push({ kind: "n", idx: n.idx, score: best + 0.5 });
    }
    hits.sort((a, b) => a.score - b.score || a.idx - b.idx);
    return hits;
  }
}
