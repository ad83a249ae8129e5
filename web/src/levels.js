// Splits a visible graph into one flat graph per expanded module ("level"), so
// that each level can be laid out on its own and its layout reused, and puts
// the per-level layouts back together into one picture. Pure data, no DOM; the
// per-level graphs are in ELK's JSON format.
//
// An edge that crosses module frames becomes a chain of segments, one per
// level it passes through, joined at ports on the frames: it leaves its
// source's module through a port on the bottom of the frame ("out"), runs in the
// common parent to the target's module, and enters it through a port on the
// top ("in"); in a left-to-right layout the right and left sides instead. A port carries one value (keyed by its source box), so several
// readers of a value inside a module share the one port where it enters.

/** Frame sides that values enter and leave by, per ELK direction ("DOWN" or "RIGHT"). */
const SIDES = { DOWN: { in: "NORTH", out: "SOUTH" }, RIGHT: { in: "WEST", out: "EAST" } };

/** Where a segment starts or ends: a box, a port of a child module, or a port of the level's own frame. */
const box = (id) => ({ box: id });
const childPort = (child, dir, source) => ({ child, dir, source });
const ownPort = (dir, source) => ({ own: dir, source });

/**
 * The levels of `graph` (Model.visibleGraph()): Map(container index -> level), where a level is
 * {members: [unit ids], ins: [source ids], outs: [source ids], segments: [{from, to}]},
 * and for each drawn edge the segments it is made of: Map(edge id -> [[container, segment index]]).
 */
export function splitLevels(graph) {
  const { leaves, containers } = graph;
  const levels = new Map();
  for (const [cIdx, c] of containers) {
    levels.set(cIdx, { members: c.children, ins: [], outs: [], segments: [], portIndex: new Map(), sendsItself: false });
  }

  const chains = new Map(); // container index -> container indices from the root down to it
  const chainTo = (cIdx) => {
    if (!chains.has(cIdx)) {
      const parent = containers.get(cIdx).parent;
      chains.set(cIdx, parent < 0 ? [cIdx] : [...chainTo(parent), cIdx]);
    }
    return chains.get(cIdx);
  };
  // The modules around a unit, root first: a container's own frame is not around it.
  const around = (id) => chainTo(id[0] === "c" ? containers.get(Number(id.slice(1))).parent : leaves.get(id).container);
  const port = (cIdx, dir, source) => {
    const level = levels.get(cIdx);
    const key = dir + source;
    if (!level.portIndex.has(key)) {
      const list = dir === "in" ? level.ins : level.outs;
      level.portIndex.set(key, list.length);
      list.push(source);
    }
  };
  const segmentIndex = new Map(); // segment as JSON -> its index in its level
  const segment = (cIdx, from, to) => {
    const key = JSON.stringify([cIdx, from, to]);
    if (!segmentIndex.has(key)) {
      const list = levels.get(cIdx).segments;
      segmentIndex.set(key, list.length);
      list.push({ from, to });
    }
    return [cIdx, segmentIndex.get(key)];
  };

  const paths = new Map();
  for (const e of graph.drawn) {
    // A module that is itself a source (an opened fold's frame) sends its value from the middle of its bottom edge.
    if (e.source[0] === "c") levels.get(Number(e.source.slice(1))).sendsItself = true;
    const up = around(e.source);
    const down = around(e.target);
    let common = 0;
    while (common + 1 < up.length && common + 1 < down.length && up[common + 1] === down[common + 1]) common++;
    const path = [];
    for (let i = up.length - 1; i > common; i--) {
      port(up[i], "out", e.source);
      const from = i === up.length - 1 ? box(e.source) : childPort(up[i + 1], "out", e.source);
      path.push(segment(up[i], from, ownPort("out", e.source)));
    }
    const from = common === up.length - 1 ? box(e.source) : childPort(up[common + 1], "out", e.source);
    const to = common === down.length - 1 ? box(e.target) : childPort(down[common + 1], "in", e.source);
    path.push(segment(up[common], from, to));
    for (let i = common + 1; i < down.length; i++) {
      port(down[i], "in", e.source);
      const inner = i === down.length - 1 ? box(e.target) : childPort(down[i + 1], "in", e.source);
      path.push(segment(down[i], ownPort("in", e.source), inner));
    }
    paths.set(e.id, path);
  }
  return { levels, paths };
}

/**
 * The flat graph ELK lays out for one level, with ids that depend only on the
 * level's shape (positions in its lists), so two levels of the same shape
 * (layer 3 and layer 40 of a model) have the same input and share a layout.
 * `sizeOf(id)` gives a box's size; `laidOut(cIdx)` a child module's finished
 * layout (see place()), whose size and port positions are fixed here.
 * `direction` is ELK's, "DOWN" (the default) or "RIGHT".
 */
export function levelInput(level, sizeOf, laidOut, direction = "DOWN") {
  const member = new Map(level.members.map((id, i) => [id, i]));
  // Ports are "i<n>" (in) and "o<n>" (out), prefixed with "k<member>" on a child module; "s" is a module sending itself.
  const portId = (end) => {
    if (end.box !== undefined) return `k${member.get(end.box)}${end.box[0] === "c" ? "s" : ""}`;
    if (end.child === undefined) return `${end.own[0]}${level.portIndex.get(end.own + end.source)}`;
    const child = laidOut(end.child).level;
    return `k${member.get("c" + end.child)}${end.dir[0]}${child.portIndex.get(end.dir + end.source)}`;
  };
  const children = level.members.map((id, i) => {
    if (id[0] !== "c") return { id: `k${i}`, ...sizeOf(id) };
    const child = laidOut(Number(id.slice(1)));
    const ports = [...child.ins.map((p, j) => ({ id: `k${i}i${j}`, ...p })), ...child.outs.map((p, j) => ({ id: `k${i}o${j}`, ...p }))];
    if (child.level.sendsItself) {
      const at = direction === "RIGHT" ? { x: child.width, y: child.height / 2 } : { x: child.width / 2, y: child.height };
      ports.push({ id: `k${i}s`, ...at });
    }
    return {
      id: `k${i}`,
      width: child.width,
      height: child.height,
      ports: ports.map((p) => ({ ...p, width: 0, height: 0 })),
      layoutOptions: { "elk.portConstraints": "FIXED_POS" },
    };
  });
  const side = (dir) => (_, j) => ({ id: `${dir[0]}${j}`, width: 0, height: 0, layoutOptions: { "elk.port.side": SIDES[direction][dir] } });
  const ports = [...level.ins.map(side("in")), ...level.outs.map(side("out"))];
  const edges = level.segments.map((s, j) => ({ id: `e${j}`, sources: [portId(s.from)], targets: [portId(s.to)] }));
  return { children, ports, edges };
}

/**
 * A level's finished layout from ELK's answer for levelInput(): places of its
 * members, of its ports and of its segments, relative to its own frame. The frame
 * gets a title bar `header` high above what ELK laid out, which values entering
 * through the top cross in a straight line, and is widened to `minWidth` (room
 * for the title), content centred. Left to right (`direction` "RIGHT"), values
 * enter through the left side, below the title bar.
 */
export function place(level, answer, minWidth, header, direction = "DOWN") {
  const across = direction === "RIGHT";
  const dx = Math.max(0, (minWidth - answer.width) / 2);
  const shift = (p) => ({ x: p.x + dx, y: p.y + header });
  const portAt = new Map((answer.ports || []).map((p) => [p.id, shift(p)]));
  const routes = (answer.edges || []).map((e, j) => {
    const points = [];
    for (const s of e.sections || []) points.push(s.startPoint, ...(s.bendPoints || []), s.endPoint);
    const shifted = points.map(shift);
    // Values cross the margins the title bar (or, left to right, the centring) adds, straight to the frame's side.
    if (level.segments[j].from.own === "in" && shifted.length) shifted.unshift(across ? { x: 0, y: shifted[0].y } : { x: shifted[0].x, y: 0 });
    if (level.segments[j].to.own === "out" && shifted.length && across) shifted.push({ x: answer.width + 2 * dx, y: shifted[shifted.length - 1].y });
    return shifted;
  });
  return {
    level,
    width: answer.width + 2 * dx,
    height: answer.height + header,
    members: answer.children.map((c) => ({ ...shift(c), width: c.width, height: c.height })),
    ins: level.ins.map((_, j) => (across ? { x: 0, y: portAt.get(`i${j}`).y } : { x: portAt.get(`i${j}`).x, y: 0 })),
    outs: level.outs.map((_, j) => (across ? { x: answer.width + 2 * dx, y: portAt.get(`o${j}`).y } : portAt.get(`o${j}`))),
    routes,
  };
}

/**
 * Put finished levels together: absolute boxes for every unit and module frame,
 * and each edge's route as its segments joined end to end.
 * Returns {boxes: Map(id -> {x, y, width, height}), routes: Map(edge id -> points), width, height}.
 */
export function compose(split, laidOut) {
  const boxes = new Map();
  const offsets = new Map(); // container index -> absolute position of its frame
  const stack = [[0, 0, 0]];
  while (stack.length) {
    const [cIdx, x, y] = stack.pop();
    const lay = laidOut(cIdx);
    offsets.set(cIdx, { x, y });
    boxes.set("c" + cIdx, { x, y, width: lay.width, height: lay.height });
    lay.level.members.forEach((id, i) => {
      const at = lay.members[i];
      if (id[0] === "c") stack.push([Number(id.slice(1)), x + at.x, y + at.y]);
      else boxes.set(id, { ...at, x: x + at.x, y: y + at.y });
    });
  }
  const routes = new Map();
  for (const [edgeId, path] of split.paths) {
    const points = [];
    for (const [cIdx, s] of path) {
      const { x, y } = offsets.get(cIdx);
      for (const p of laidOut(cIdx).routes[s] || []) {
        const last = points[points.length - 1];
        const q = { x: p.x + x, y: p.y + y };
        if (!last || Math.abs(last.x - q.x) > 0.5 || Math.abs(last.y - q.y) > 0.5) points.push(q);
      }
    }
    routes.set(edgeId, points);
  }
  const root = laidOut(0);
  return { boxes, routes, width: root.width, height: root.height };
}
