"""Graphviz DOT for a captured graph.

Module calls become nested clusters, ops become nodes coloured by category,
edges carry the shapes of the tensors they move. Scopes deeper than
``depth``, standard ``torch.nn`` leaf modules and folded repeats are drawn as
one box each. The output depends only on the IR and the options: ids and
statement order follow the IR's execution order, so the same graph always
gives the same text.
"""

from __future__ import annotations

import warnings
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePath
from typing import Literal

from torchatlas._io import write_atomic
from torchatlas._ir import GraphIR, Node, Scope, Source, TensorMeta
from torchatlas._passes._repeats import find_repeats
from torchatlas._render._categories import LEGEND, PALETTES, Palette, category, op_name
from torchatlas._render._graphviz import FORMATS, html_text, quoted, run_dot, tooltip

FONT = "Helvetica,Arial,sans-serif"

MAX_DOT_ELEMENTS = 4000
"""Nodes plus edges above which ``dot`` takes more than ~30 s (see bench/bench_render.py)."""

_HIDDEN_KINDS = ("param", "buffer")
# A value read inside this many different module calls (Llama's rotary cos/sin,
# attention masks) keeps its edges into the first call only; the other calls
# get a small reference box. Long edges through many clusters are what makes
# dot slow: Llama-32L at depth 2 took over 150 s with them, under 1 s without.
_BROADCAST_CALLS = 3
_LEAF_PREFIX = "torch.nn."
# Leaf boxes take the colour of their most telling op: a Conv2d box is compute, a ReLU box elementwise.
_BOX_PRIORITY = ("compute", "normalization", "reduction", "elementwise", "shape", "other")


@dataclass(frozen=True)
class DotOptions:
    """What a diagram shows; every field is also a keyword of ``Graph.render``."""

    depth: int | None = None
    """Module nesting to expand (the model is depth 0); deeper calls collapse into one box. None: all."""
    expand_leaf_modules: bool = False
    """Draw the ops inside standard ``torch.nn`` leaf modules (Conv2d, Linear...) instead of one box."""
    show_tensors: bool = False
    """Draw each tensor as its own node instead of a shape label on the edge."""
    show_params: bool = False
    """Draw parameters and buffers and the edges from them."""
    fold_repeats: bool = False
    """Fold runs of identical sibling blocks (``layers.0`` ... ``layers.79``) into one ``×80`` box."""
    direction: Literal["TB", "LR"] = "TB"
    theme: Literal["light", "dark"] = "light"
    legend: bool = True
    """Add the model name and a colour legend under the diagram."""

    def __post_init__(self) -> None:
        if self.depth is not None and (not isinstance(self.depth, int) or self.depth < 0):
            raise ValueError(f"depth must be None or an integer >= 0, not {self.depth!r}")
        if self.direction not in ("TB", "LR"):
            raise ValueError(f"direction must be 'TB' or 'LR', not {self.direction!r}")
        if self.theme not in PALETTES:
            raise ValueError(f"theme must be one of {', '.join(PALETTES)}, not {self.theme!r}")


# -- layout: which units (nodes or boxes) exist, where they sit, what connects them --


@dataclass
class _Unit:
    """One drawn DOT node: an IR node, a collapsed module call, a folded run, or a reference to a far value."""

    id: str
    kind: Literal["node", "box", "fold", "ref"]
    container: str | None
    """The expanded scope whose cluster holds this unit; None for the top level."""
    first: int
    """Execution index of its first node, for ordering."""
    node: Node | None = None
    scope: Scope | None = None
    """Box: the collapsed scope. Fold: the first member."""
    members: list[Scope] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)
    source: str | None = None
    """Ref: the unit the referenced value comes from (``node`` is its producer, ``slot`` which output)."""
    slot: int = 0


@dataclass
class _Edge:
    """All values flowing between two units, drawn as one edge."""

    values: list[tuple[str, int]] = field(default_factory=list)
    from_param: bool = False


@dataclass
class _Layout:
    units: dict[str, _Unit]
    edges: dict[tuple[str, str], _Edge]
    root: str | None

    def size(self) -> int:
        return len(self.units) + len(self.edges)


def _fold_runs(ir: GraphIR, children: dict[str | None, list[str]]) -> dict[str, list[str]]:
    """First member id -> member ids, for runs of ``meta["repeat"]`` siblings (index 0, 1, 2...)."""
    runs: dict[str, list[str]] = {}
    for kids in children.values():
        current: list[str] = []
        group = None
        for sid in kids:
            rep = ir.scope(sid).meta.get("repeat")
            if not isinstance(rep, dict):
                current = []
                continue
            if rep.get("index") == 0:
                current, group = [sid], rep.get("group")
                runs[sid] = current
            elif current and rep.get("group") == group and rep.get("index") == len(current):
                current.append(sid)
            else:
                current = []
    return {first: members for first, members in runs.items() if len(members) > 1}


def _reader_branches(
    ir: GraphIR, units: dict[str, _Unit], readers: dict[tuple[str, int], list[str]]
) -> dict[tuple[str, int, str], str | None]:
    """(value, reader unit) -> the module call, below the scope shared with the producer, that holds the reader.

    None when the reader is an op directly in that shared scope.
    """
    chains: dict[str, list[str]] = {}

    def chain(scope_id: str) -> list[str]:
        if scope_id not in chains:
            chains[scope_id] = ir.ancestry(scope_id)
        return chains[scope_id]

    out: dict[tuple[str, int, str], str | None] = {}
    for (src_id, slot), value_readers in readers.items():
        src_chain = chain(ir.node(src_id).scope)
        for reader in value_readers:
            unit = units[reader]
            dst_chain = chain(unit.scope.id if unit.scope is not None else unit.node.scope)
            shared = 0
            while shared < min(len(src_chain), len(dst_chain)) and src_chain[shared] == dst_chain[shared]:
                shared += 1
            out[(src_id, slot, reader)] = dst_chain[shared] if shared < len(dst_chain) else None
    return out


def _layout(ir: GraphIR, options: DotOptions) -> _Layout:
    children = ir.children()
    runs = _fold_runs(ir, children) if options.fold_repeats else {}
    fold_of = {m: first for first, members in runs.items() for m in members}
    # scope id -> id of the box it is drawn in (absent: drawn as a cluster)
    box_of: dict[str, str] = {}
    depth: dict[str, int] = {}
    boxes: dict[str, _Unit] = {}
    root = next((s.id for s in ir.scopes if s.parent is None), None)
    for s in ir.scopes:
        container = None if s.parent == root else s.parent
        depth[s.id] = 0 if s.parent is None else depth[s.parent] + 1
        if s.parent is not None and s.parent in box_of:
            box_of[s.id] = box_of[s.parent]
        elif s.id in fold_of:
            first = fold_of[s.id]
            box_of[s.id] = f"fold_{first}"
            if s.id == first:
                members = [ir.scope(m) for m in runs[first]]
                boxes[box_of[s.id]] = _Unit(box_of[s.id], "fold", container, 0, scope=s, members=members)
        elif (options.depth is not None and depth[s.id] >= options.depth) or (
            s.parent is not None
            and not options.expand_leaf_modules
            and s.cls.startswith(_LEAF_PREFIX)
            and not children[s.id]
        ):
            box_of[s.id] = s.id
            boxes[s.id] = _Unit(s.id, "box", container, 0, scope=s, members=[s])

    units: dict[str, _Unit] = {}
    unit_of: dict[str, str] = {}
    for index, n in enumerate(ir.nodes):
        if n.kind in ("input", "output"):
            uid = n.id
            units[uid] = _Unit(uid, "node", None, index, node=n, nodes=[n])
        elif n.scope in box_of:
            uid = box_of[n.scope]
            if uid not in units:
                units[uid] = boxes[uid]
                boxes[uid].first = index
            units[uid].nodes.append(n)
        elif n.kind in _HIDDEN_KINDS and not options.show_params:
            continue
        else:
            uid = n.id
            container = None if n.scope == root else n.scope
            units[uid] = _Unit(uid, "node", container, index, node=n, nodes=[n])
        unit_of[n.id] = uid

    reads: list[tuple[str, int, str, str, bool]] = []
    readers: dict[tuple[str, int], list[str]] = {}
    for n in ir.nodes:
        dst = unit_of.get(n.id)
        for src_id, slot in zip(n.inputs, n.input_slots):
            from_param = ir.node(src_id).kind in _HIDDEN_KINDS
            src = unit_of.get(src_id)
            if dst is None or src is None or src == dst or (from_param and not options.show_params):
                continue
            reads.append((src_id, slot, src, dst, from_param))
            value_readers = readers.setdefault((src_id, slot), [])
            if dst not in value_readers:
                value_readers.append(dst)

    branch = _reader_branches(ir, units, readers)
    # value -> the one module call that keeps real edges, for values read in many calls
    kept_call: dict[tuple[str, int], str] = {}
    for (src_id, slot), value_readers in readers.items():
        calls = list(dict.fromkeys(b for b in (branch[(src_id, slot, r)] for r in value_readers) if b))
        if len(calls) >= _BROADCAST_CALLS:
            kept_call[(src_id, slot)] = calls[0]
    refs: dict[str, _Unit] = {}
    edges: dict[tuple[str, str], _Edge] = {}
    for src_id, slot, src, dst, from_param in reads:
        kept = kept_call.get((src_id, slot))
        if kept is not None and branch[(src_id, slot, dst)] not in (None, kept):
            ref = f"ref_{src_id}_{slot}_{dst}"
            target = units[dst]
            refs.setdefault(
                ref, _Unit(ref, "ref", target.container, target.first, node=ir.node(src_id), source=src, slot=slot)
            )
            src = ref
        edge = edges.setdefault((src, dst), _Edge(from_param=from_param))
        if (src_id, slot) not in edge.values:
            edge.values.append((src_id, slot))
    units.update(refs)

    return _Layout(units, edges, root)


# -- labels --------------------------------------------------------------------


def _dominant_dtype(ir: GraphIR) -> str | None:
    counts = Counter(m.dtype for n in ir.nodes if n.kind in ("op", "input") for m in n.outputs)
    if not counts:
        return None
    return min(counts, key=lambda d: (-counts[d], d))


def _shape_text(meta: TensorMeta | None, dominant: str | None) -> str:
    if meta is None:
        return "?"
    text = "×".join(str(s) for s in meta.shape) if meta.shape else "scalar"
    if meta.dtype and meta.dtype != dominant:
        text += f" {meta.dtype}"
    return text


def _shapes_text(ir: GraphIR, values: list[tuple[str, int]], dominant: str | None, most: int = 3) -> list[str]:
    texts = list(dict.fromkeys(_shape_text(ir.value_meta(v, slot), dominant) for v, slot in values))
    return texts[:most] + (["…"] if len(texts) > most else [])


def _count_text(n: int) -> str:
    for scale, suffix in ((10**9, "B"), (10**6, "M"), (10**3, "K")):
        if n >= scale:
            return f"{n / scale:.1f}{suffix}"
    return str(n)


def _param_count(ir: GraphIR, unit: _Unit) -> int:
    """Parameters owned by the unit's modules (from the model's parameter list when captured)."""
    declared = ir.meta.get("parameters")
    if isinstance(declared, list):
        total = 0
        for scope in unit.members:
            prefix = scope.path + "." if scope.path else ""
            for p in declared:
                paths = [p.get("path", ""), *p.get("shared_with", [])]
                if any(str(path).startswith(prefix) for path in paths):
                    total += TensorMeta(tuple(p.get("shape", ())), "", "").numel()
        return total
    return sum(n.outputs[0].numel() for n in unit.nodes if n.kind == "param" and n.outputs)


def _scope_name(scope: Scope, model: str) -> str:
    name = scope.path or model
    return name + (f"#{scope.call}" if scope.call else "")


def _fold_name(first: Scope, last: Scope) -> str:
    """``layers.0–11`` for a module list; the path alone for a loop calling one module."""
    if first.path == last.path:
        return first.path
    a, b = first.path.split("."), last.path.split(".")
    if len(a) == len(b) and a[:-1] == b[:-1]:
        return ".".join([*a[:-1], f"{a[-1]}–{b[-1]}"])
    return f"{first.path} … {last.path}"


def _relative(name: str, within: str) -> str:
    """A box's name inside its cluster, without the cluster's path: ``layer1.0.conv1`` in ``layer1.0`` -> ``conv1``."""
    return name[len(within) + 1 :] if within and name.startswith(within + ".") else name


def _font(text: str, color: str, size: int | None = None) -> str:
    size_attr = f' POINT-SIZE="{size}"' if size else ""
    return f'<FONT COLOR="{color}"{size_attr}>{text}</FONT>'


def _source_line(source: Source | None) -> str:
    """``coolcnn.py:18  x = ...``; the bare file name keeps saved diagrams free of local paths."""
    if source is None:
        return ""
    return f"{PurePath(source.file).name}:{source.line}  {source.code}".rstrip()


def _input_label(path: str | None) -> str:
    path = path or "?"
    for prefix in ("kwargs['", 'kwargs["'):
        if path.startswith(prefix) and path.endswith(prefix[-1] + "]"):
            return path[len(prefix) : -2]
    return path


class _Writer:
    def __init__(self, ir: GraphIR, options: DotOptions, layout: _Layout) -> None:
        self.ir, self.options, self.layout = ir, options, layout
        self.children = ir.children()
        self.palette: Palette = PALETTES[options.theme]
        self.dominant = _dominant_dtype(ir)
        model = ir.meta.get("model") or (ir.scope(layout.root).cls if layout.root else "model")
        self.model = str(model).rsplit(".", 1)[-1]
        self.used_categories: set[str] = set()
        self.linked_tensors: set[str] = set()
        self.lines: list[str] = []
        self.in_values: dict[str, list[tuple[str, int]]] = {}
        self.out_values: dict[str, list[tuple[str, int]]] = {}
        for (src, dst), edge in layout.edges.items():
            if not edge.from_param:
                if layout.units[src].kind != "ref":
                    self.out_values.setdefault(src, []).extend(edge.values)
                self.in_values.setdefault(dst, []).extend(edge.values)
        self.units_in: dict[str | None, list[_Unit]] = {}
        for unit in layout.units.values():
            self.units_in.setdefault(unit.container, []).append(unit)
        self.cluster_first = self._first_per_cluster()

    def write(self) -> str:
        p, o = self.palette, self.options
        self.lines += [
            "digraph torchatlas {",
            f'  graph [rankdir={o.direction}, bgcolor="{p.background}", fontname="{FONT}", fontcolor="{p.text}",'
            ' fontsize=11, nodesep=0.3, ranksep=0.35, pad=0.3, newrank=true, outputorder=edgesfirst];',
            f'  node [shape=box, style="rounded,filled", fontname="{FONT}", fontsize=11, fontcolor="{p.text}",'
            ' height=0.32, margin="0.14,0.05", penwidth=1.2];',
            f'  edge [color="{p.edge}", fontname="{FONT}", fontsize=9, fontcolor="{p.muted}", arrowsize=0.6,'
            " penwidth=1.1];",
        ]
        self._container(None, 1)
        for (src, dst), edge in self.layout.edges.items():
            self._edge(src, dst, edge)
        if o.legend:
            self.lines.append(f"  graph [labelloc=b, label=<{self._legend()}>];")
        self.lines.append("}")
        return "\n".join(self.lines) + "\n"

    # containers: clusters hold their units and child clusters, ordered by first execution
    def _container(self, scope_id: str | None, indent: int) -> None:
        items = [(unit.first, "unit", unit.id) for unit in self.units_in.get(scope_id, [])]
        parent = self.layout.root if scope_id is None else scope_id
        for child in self.children.get(parent, []):
            if child in self.cluster_first:
                items.append((self.cluster_first[child], "cluster", child))
        for _, what, ident in sorted(items):
            if what == "unit":
                self._unit(self.layout.units[ident], indent)
            else:
                self._cluster(ident, indent)

    def _first_per_cluster(self) -> dict[str, int]:
        """Expanded scope -> first execution index of any unit drawn inside it (empty ones are left out)."""
        first: dict[str, int] = {}
        for unit in self.layout.units.values():
            cur = unit.container
            while cur is not None and cur != self.layout.root:
                first[cur] = min(first.get(cur, unit.first), unit.first)
                cur = self.ir.scope(cur).parent
        return first

    def _cluster(self, scope_id: str, indent: int) -> None:
        scope, pad, p = self.ir.scope(scope_id), "  " * indent, self.palette
        fill = p.cluster_fills[(indent - 1) % len(p.cluster_fills)]
        name, cls = html_text(_scope_name(scope, self.model)), html_text(f"({scope.class_name})")
        label = f"<B>{name}</B> {_font(cls, p.muted)}"
        self.lines += [
            f"{pad}subgraph {quoted('cluster_' + scope_id)} {{",
            f'{pad}  graph [label=<{label}>, labeljust=l, style="rounded,filled", fillcolor="{fill}",'
            f' color="{p.cluster_border}", penwidth=1, fontsize=10, margin=10,'
            f" tooltip={tooltip(scope.cls, _source_line(scope.source))}];",
        ]
        self._container(scope_id, indent + 1)
        self.lines.append(f"{pad}}}")

    def _unit(self, unit: _Unit, indent: int) -> None:
        pad = "  " * indent
        if unit.kind == "node":
            attrs = self._node_attrs(unit.node)
        elif unit.kind == "ref":
            attrs = self._ref_attrs(unit)
        else:
            attrs = self._box_attrs(unit)
        self.lines.append(f"{pad}{quoted(unit.id)} [{attrs}];")
        if self.options.show_tensors:
            for node_id, slot in dict.fromkeys(self.out_values.get(unit.id, [])):
                meta = self.ir.value_meta(node_id, slot)
                label = html_text(_shape_text(meta, self.dominant))
                self.lines.append(
                    f'{pad}{quoted(f"t_{node_id}_{slot}")} [label=<{label}>, shape=box, style="rounded,dashed",'
                    f' color="{self.palette.edge}", fontcolor="{self.palette.muted}", fontsize=9, height=0.2];'
                )

    def _colors(self, cat: str) -> str:
        self.used_categories.add(cat)
        p = self.palette
        return f'fillcolor="{p.fill[cat]}", color="{p.border[cat]}"'

    def _node_attrs(self, n: Node) -> str:
        p = self.palette
        cat = category(n.target, n.kind)
        meta = n.outputs[0] if n.outputs else None
        if n.kind == "op":
            name = (op_name(n.target) or "?") + ("_" if n.inplace else "")
            label = f"<B>{html_text(name)}</B>"
            tip = tooltip(n.target or "?", "in-place" if n.inplace else "", _source_line(n.source))
        elif n.kind == "input":
            shape = _font(html_text(_shape_text(meta, self.dominant)), p.muted, 9)
            label = f"<B>{html_text(_input_label(n.path))}</B><BR/>{shape}"
            tip = tooltip(n.path or "input")
        elif n.kind == "output":
            value = self.ir.value_meta(n.inputs[0], n.input_slots[0]) if n.inputs else meta
            shape = _font(html_text(_shape_text(value, self.dominant)), p.muted, 9)
            label = f"<B>{html_text(n.path or 'output')}</B><BR/>{shape}"
            tip = tooltip(n.path or "output")
        else:
            name = (n.path or n.kind).rsplit(".", 1)[-1]
            label = f"{html_text(name)}<BR/>{_font(html_text(_shape_text(meta, self.dominant)), p.muted, 9)}"
            tip = tooltip(f"{n.kind} {n.path or ''}")
        extra = ", penwidth=2" if n.inplace else ""
        return f"label=<{label}>, {self._colors(cat)}, tooltip={tip}{extra}"

    def _box_attrs(self, unit: _Unit) -> str:
        p, scope = self.palette, unit.scope
        if unit.kind == "fold":
            name = _fold_name(unit.members[0], unit.members[-1])
            cat = "module"
        else:
            name = _scope_name(scope, self.model)
            cat = self._box_category(unit)
        full_name = name
        name = _relative(name, self.ir.scope(unit.container).path if unit.container else "")
        ins = _shapes_text(self.ir, self.in_values.get(unit.id, []), self.dominant)
        outs = _shapes_text(self.ir, self.out_values.get(unit.id, []), self.dominant)
        facts = []
        if ins or outs:
            facts.append(f"{', '.join(ins) or '–'} → {', '.join(outs) or '–'}")
        params = _param_count(self.ir, unit)
        if params:
            facts.append(f"{_count_text(params)} params")
        title = f"<B>{html_text(name)}</B> {_font(html_text(f'({scope.class_name})'), p.muted)}"
        if unit.kind == "fold":
            title += f" <B>×{len(unit.members)}</B>"
        label = title
        if facts:
            label += "<BR/>" + _font(html_text(" · ".join(facts), 120), p.muted, 9)
        tip = tooltip(f"{full_name} ({scope.cls})", _source_line(scope.source))
        if unit.kind == "fold":
            extra = f', peripheries=2, penwidth=1.4, fillcolor="{p.fill["module"]}:{p.badge}", gradientangle=0'
            return f"label=<{label}>, {self._colors(cat)}{extra}, tooltip={tip}"
        width = 2.0 if self.children[scope.id] else 1.6
        return f"label=<{label}>, {self._colors(cat)}, penwidth={width}, tooltip={tip}"

    def _box_category(self, unit: _Unit) -> str:
        if self.children[unit.scope.id]:
            return "module"
        cats = {category(n.target, n.kind) for n in unit.nodes if n.kind == "op"}
        return next((c for c in _BOX_PRIORITY if c in cats), "module")

    def _ref_attrs(self, ref: _Unit) -> str:
        """A stand-in for a far-away value: where it comes from and its shape."""
        source = self.layout.units[ref.source]
        if source.kind == "fold":
            name = _fold_name(source.members[0], source.members[-1])
        elif source.kind == "box":
            name = _scope_name(source.scope, self.model)
        elif source.node.kind == "op":
            name = op_name(source.node.target) or "?"
        else:
            name = _input_label(source.node.path)
        p = self.palette
        shape = _shape_text(self.ir.value_meta(ref.node.id, ref.slot), self.dominant)
        label = f"↪ {html_text(name)}<BR/>{_font(html_text(shape), p.muted, 9)}"
        return (
            f'label=<{label}>, style="rounded,dashed", color="{p.edge}", fillcolor="{p.background}",'
            f" fontsize=9, tooltip={tooltip(f'value drawn in full at {name}')}"
        )

    def _edge(self, src: str, dst: str, edge: _Edge) -> None:
        p = self.palette
        style = f', style=dashed, color="{p.border["param"]}"' if edge.from_param else ""
        if self.layout.units[src].kind == "ref":
            self.lines.append(f"  {quoted(src)} -> {quoted(dst)} [style=dashed];")
            return
        if self.options.show_tensors and not edge.from_param:
            for node_id, slot in edge.values:
                tensor = quoted(f"t_{node_id}_{slot}")
                if tensor not in self.linked_tensors:
                    self.linked_tensors.add(tensor)
                    self.lines.append(f"  {quoted(src)} -> {tensor} [arrowhead=none];")
                self.lines.append(f"  {tensor} -> {quoted(dst)};")
            return
        label = "\\n".join(quoted(t, 40)[1:-1] for t in _shapes_text(self.ir, edge.values, self.dominant))
        self.lines.append(f'  {quoted(src)} -> {quoted(dst)} [label=" {label}"{style}];')

    def _legend(self) -> str:
        p = self.palette
        cells = "".join(
            f'<TD BGCOLOR="{p.fill[cat]}" COLOR="{p.border[cat]}" BORDER="1" STYLE="rounded"> </TD>'
            f'<TD ALIGN="LEFT">{_font(html_text(text.split(" (")[0]), p.muted, 9)}</TD>'
            for cat, text in LEGEND
            if cat in self.used_categories
        )
        title = f'<TD COLSPAN="{2 * max(1, len(self.used_categories))}"><B>{html_text(self.model)}</B></TD>'
        return (
            f'<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="4" CELLPADDING="2"><TR>{title}</TR>'
            f"<TR>{cells or '<TD></TD>'}</TR></TABLE>"
        )


# -- entry points ----------------------------------------------------------------


def _with_repeats(ir: GraphIR, options: DotOptions) -> GraphIR:
    """Folding reads ``meta["repeat"]``; find the runs unless a pass already did."""
    if options.fold_repeats and not any("repeat" in s.meta for s in ir.scopes):
        return find_repeats(ir)
    return ir


def to_dot(ir: GraphIR, options: DotOptions | None = None) -> str:
    """The graph as Graphviz DOT text (deterministic; needs no Graphviz install)."""
    options = options or DotOptions()
    ir = _with_repeats(ir, options)
    return _Writer(ir, options, _layout(ir, options)).write()


def _size(layout: _Layout, options: DotOptions) -> int:
    if options.show_tensors:
        # each value becomes a node with one edge from its producer and one to each reader
        drawn = [e for (src, _), e in layout.edges.items() if layout.units[src].kind != "ref"]
        values = {v for e in drawn for v in e.values}
        reads = sum(len(e.values) for e in drawn)
        return len(layout.units) + len(layout.edges) - len(drawn) + 2 * len(values) + reads
    return layout.size()


def diagram_size(ir: GraphIR, options: DotOptions | None = None) -> int:
    """Nodes plus edges the diagram will have: what ``dot``'s layout time grows with."""
    options = options or DotOptions()
    return _size(_layout(_with_repeats(ir, options), options), options)


def _size_advice(ir: GraphIR, options: DotOptions, size: int) -> str:
    ir = _with_repeats(ir, replace(options, fold_repeats=True))
    deepest = max((ir.depth(s.id) for s in ir.scopes), default=0)
    limit = options.depth if options.depth is not None else deepest + 1
    fitting = [d for d in range(limit) if diagram_size(ir, replace(options, depth=d)) <= MAX_DOT_ELEMENTS]
    advice = []
    if fitting:
        advice.append(f"depth={fitting[-1]}")
    if not options.fold_repeats:
        folded = diagram_size(ir, replace(options, fold_repeats=True))
        if folded < size:
            advice.append(f"fold_repeats=True ({folded} elements)")
    hint = " or ".join(advice) if advice else "a smaller depth"
    return (
        f"this diagram has {size} nodes and edges; Graphviz may take minutes to lay it out "
        f"(about {MAX_DOT_ELEMENTS} take ~30 s). Try {hint}."
    )


def render(ir: GraphIR, options: DotOptions | None = None, fmt: str = "svg") -> bytes:
    """The diagram drawn by Graphviz ``dot`` as ``svg``, ``png`` or ``pdf`` bytes (``dot``: the DOT text).

    Warns (``RuntimeWarning``) before laying out a diagram too big for ``dot`` to finish in ~30 s.
    """
    options = options or DotOptions()
    if fmt != "dot" and fmt not in FORMATS:
        raise ValueError(f"unknown image format {fmt!r}; expected one of {', '.join(FORMATS)} or 'dot'")
    ir = _with_repeats(ir, options)
    layout = _layout(ir, options)
    source = _Writer(ir, options, layout).write()
    if fmt == "dot":
        return source.encode("utf-8")
    size = _size(layout, options)
    if size > MAX_DOT_ELEMENTS:
        warnings.warn(_size_advice(ir, options, size), RuntimeWarning, stacklevel=2)
    return run_dot(source, fmt)


def render_to_file(
    ir: GraphIR, path: str | Path, options: DotOptions | None = None, fmt: str | None = None
) -> Path:
    """Write the diagram to ``path``; ``fmt`` defaults to the file suffix (``.gv`` and ``.dot`` give DOT)."""
    target = Path(path)
    if fmt is None:
        suffix = target.suffix.lower().lstrip(".")
        fmt = "dot" if suffix == "gv" else suffix
    if fmt != "dot" and fmt not in FORMATS:
        raise ValueError(f"cannot tell the image format from {str(target)!r}; pass fmt= one of svg, png, pdf, dot")
    return write_atomic(target, render(ir, options, fmt))
