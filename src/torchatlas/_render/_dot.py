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
from dataclasses import replace
from pathlib import PurePath
from typing import Any

from torchatlas._ir import GraphIR, Node, Ref, Source
from torchatlas._ops import LEGEND, category, collective_kind
from torchatlas._render._graphviz import FORMATS, html_text, quoted, run_dot, tooltip
from torchatlas._view import (
    BACKWARD,
    BACKWARD_SCOPE,
    COMPILE_REGIONS,
    DECISION,
    DECISION_BORDER,
    EAGER_REGION,
    GRAPH_BREAK,
    PALETTES,
    DotOptions,
    Edge,
    Layout,
    Palette,
    Unit,
    View,
    Words,
    break_anchors,
    build_layout,
    build_view,
    decisions,
    dominant_dtype,
    fold_name,
    leaf_module_category,
    legend_graphs,
    model_title,
    overlay_marks,
    plain_reason,
    rank_pins,
    read_label,
    read_mark,
    scope_name,
    shape_text,
)

FONT = "Helvetica,Arial,sans-serif"

MAX_DOT_ELEMENTS = 4000
"""Nodes plus edges above which ``dot`` takes more than ~30 s (see bench/bench_render.py)."""

# Leaf boxes take the colour of their most telling op: a Conv2d box is compute, a ReLU box elementwise.
_FAILED = "#d93025"  # the failing op of a partial trace, in every theme


# -- labels: laid out from the view's words (``_view.build_view``), never spelled here ---------


def _font(text: str, color: str, size: int | None = None) -> str:
    size_attr = f' POINT-SIZE="{size}"' if size else ""
    return f'<FONT COLOR="{color}"{size_attr}>{text}</FONT>'


def _source_line(source: Source | None) -> str:
    """``coolcnn.py:18  x = ...``; the bare file name keeps saved diagrams free of local paths."""
    if source is None:
        return ""
    return f"{PurePath(source.file).name}:{source.line}  {source.code}".rstrip()


class _Writer:
    def __init__(self, view: View, options: DotOptions) -> None:
        self.ir, self.options, self.layout, self.words = view.ir, options, view.layout, view.words
        self.labels, self.opened = view.labels, view.open
        ir, layout = self.ir, self.layout
        self.children = ir.children()
        self.palette: Palette = PALETTES[options.theme]
        self.dominant = dominant_dtype(ir)
        self.model = model_title(ir)
        self.used_categories: set[str] = set()
        self.decided = False  # a decision diamond was drawn: the legend says what it is
        self.linked_tensors: set[str] = set()
        self.lines: list[str] = []
        self.out_values: dict[str, list[tuple[str, int]]] = {}
        for (src, _), edge in layout.edges.items():
            if not edge.from_param and layout.units[src].kind != "ref":
                self.out_values.setdefault(src, []).extend(edge.values)
        self.units_in: dict[str | None, list[Unit]] = {}
        for unit in layout.units.values():
            self.units_in.setdefault(unit.container, []).append(unit)
        self.cluster_first = self.layout.first_inside()
        # compile_report: each unit's compiled graph; edges into the op a break resumed at are marked.
        self.compiled = "graph_breaks" in ir.meta
        self.overlays = overlay_marks(ir)
        self.fill = self.overlays.fill_name(options.fill)  # graph.overlay's values fill the boxes
        self.break_at = {b.node: b for brks in break_anchors(ir).values() for b in brks if b.node}

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
        for src, dst in rank_pins(self.ir, self.layout):
            self.lines.append(f"  {quoted(src)} -> {quoted(dst)} [style=invis];")
        if o.legend:
            self.lines.append(f"  graph [labelloc=b, label=<{self._legend()}>];")
        self.lines.append("}")
        return "\n".join(self.lines) + "\n"

    # containers: clusters hold their units and child clusters, ordered by first execution
    def _container(self, scope_id: str | None, indent: int) -> None:
        """The container's units and clusters, nested any number of levels deep (a loop, not recursion)."""
        work: list[tuple[str, Any, int]] = [("contents", scope_id, indent)]
        while work:
            what, ident, level = work.pop()
            if what == "unit":
                self._unit(self.layout.units[ident], level)
            elif what == "cluster":
                self._open_cluster(ident, level)
                work += [("close", ident, level), ("contents", ident, level + 1)]
            elif what == "close":
                self.lines.append(f"{'  ' * level}}}")
            else:
                items = [(unit.first, "unit", unit.id) for unit in self.units_in.get(ident, [])]
                parent = self.layout.root if ident is None else ident
                for child in self.children.get(parent, []):
                    if child in self.cluster_first:
                        items.append((self.cluster_first[child], "cluster", child))
                work += [(kind, item, level) for _, kind, item in sorted(items, reverse=True)]


    def _open_cluster(self, scope_id: str, indent: int) -> None:
        scope, pad, p = self.ir.scope(scope_id), "  " * indent, self.palette
        fill = p.cluster_fills[(indent - 1) % len(p.cluster_fills)]
        border = BACKWARD if scope_id.startswith(BACKWARD_SCOPE) else p.cluster_border
        style = "rounded,filled,dashed" if scope_id.startswith(BACKWARD_SCOPE) else "rounded,filled"
        words = self.opened[scope_id]  # named below its caller, as its box would be
        label = self._heading(words)
        if words.badge:  # a run drawn open, as its first member
            border, style = p.badge, style.replace("filled", "filled,bold")
        self.lines += [
            f"{pad}subgraph {quoted('cluster_' + scope_id)} {{",
            f'{pad}  graph [label=<{label}>, labeljust=l, style="{style}", fillcolor="{fill}",'
            f' color="{border}", penwidth=1, fontsize=10, margin=10,'
            f" tooltip={tooltip(scope.cls, _source_line(scope.source))}];",
        ]

    def _unit(self, unit: Unit, indent: int) -> None:
        pad = "  " * indent
        if unit.kind == "node":
            attrs = self._node_attrs(unit)
        elif unit.kind == "ref":
            attrs = self._ref_attrs(unit)
        else:
            attrs = self._box_attrs(unit)
        attrs += self._overlay_fill(unit)
        self.lines.append(f"{pad}{quoted(unit.id)} [{attrs}{self._region_attrs(unit)}];")
        if unit.kind == "node" and "reads" in unit.node.meta:
            self._decision(unit.id, unit.node, pad)
        if self.options.show_tensors:
            for node_id, slot in dict.fromkeys(self.out_values.get(unit.id, [])):
                label = html_text(shape_text(self.ir.value_meta(Ref(node_id, slot)), self.dominant))
                self.lines.append(
                    f'{pad}{quoted(f"t_{node_id}_{slot}")} [label=<{label}>, shape=box, style="rounded,dashed",'
                    f' color="{self.palette.edge}", fontcolor="{self.palette.muted}", fontsize=9, height=0.2];'
                )

    def _overlay_id(self, unit: Unit) -> str | None:
        return unit.node.id if unit.kind == "node" and unit.node else (unit.scope.id if unit.scope else None)

    def _overlay_fill(self, unit: Unit) -> str:
        """The fill of the overlay the boxes are filled by (the attribute given last wins)."""
        item = self._overlay_id(unit)
        colour = self.overlays.fill(self.fill, item, self.palette.overlay) if self.fill and item else None
        attrs = f', fillcolor="{colour}"' if colour else ""
        if item and any(str(self.overlays.value(name, item)).startswith("✗") for name in self.overlays.names):
            attrs += f', color="{_FAILED}", penwidth=2.4'  # where a compared run diverges
        return attrs

    def _overlay_line(self, item_id: str) -> str:
        """``error 0.127, ✗ diverges here``: every overlay's value, a line of the label."""
        text = self.overlays.text(item_id)
        return f"<BR/>{_font(html_text(text, 80), self.palette.text, 9)}" if text else ""

    def _decision(self, unit_id: str, node: Node, pad: str) -> None:
        """A small diamond beside an op whose value Python read to decide (``if``, ``break``,
        ``.item()``), joined by a dotted line: it is used, though no tensor reads it."""
        reads = decisions(node)
        if not reads:
            return
        self.decided = True
        mark = quoted(f"d_{unit_id}")
        text = "<BR/>".join(dict.fromkeys(html_text(read_mark(r)) for r in reads[:3]))
        tip = tooltip(*dict.fromkeys(read_label(r) for r in reads))
        self.lines.append(
            f'{pad}{mark} [label=<{_font(text, self.palette.muted, 8)}>, shape=diamond, style=filled,'
            f' fillcolor="{DECISION}", color="{DECISION_BORDER}", margin="0.02,0.01", height=0.3, tooltip={tip}];'
        )
        self.lines.append(f'{pad}{quoted(unit_id)} -> {mark} [style=dotted, arrowhead=none, color="{DECISION_BORDER}"];')

    def _colors(self, cat: str) -> str:
        self.used_categories.add(cat)
        p = self.palette
        return f'fillcolor="{p.fill[cat]}", color="{p.border[cat]}"'

    def _marked(self, words: Words, label: str, cat: str, tip: str, extra: str) -> str:
        """A box's marks under its facts: a failure or NaN in red with a red border, ``unused``
        dashed, ``in-place`` and a collective muted; decisions are drawn as diamonds beside it."""
        p = self.palette
        for mark in words.marks:
            if mark.kind in ("failed", "nonfinite"):
                label += f'<BR/>{_font(html_text(mark.text, 48), _FAILED, 9)}'
            elif mark.kind in ("unused", "in-place", "collective"):
                label += f"<BR/>{_font(html_text(mark.text), p.muted, 9)}"
            elif mark.kind == "decision" and words.badge:  # a loop a break ended: where, and over what
                label += f"<BR/>{_font(html_text(mark.text, 120), DECISION_BORDER, 9)}"
        if words.has("failed"):
            return f'label=<{label}>, {self._colors(cat)}, color="{_FAILED}", penwidth=2.6, tooltip={tip}'
        if words.has("nonfinite"):
            extra += f', color="{_FAILED}", penwidth=2.2'
        return f"label=<{label}>, {self._colors(cat)}, tooltip={tip}{extra}"

    def _node_attrs(self, unit: Unit) -> str:
        n, words, p = unit.node, self.words[unit.id], self.palette
        assert n is not None
        cat = category(n.target, n.kind)
        label = f"<B>{html_text(words.title)}</B>" if n.kind in ("op", "input", "output") else html_text(words.title)
        if words.subtitle is not None:
            label += f"<BR/>{_font(html_text(words.subtitle), p.muted, 9)}"
        tip = tooltip(*[m.text for m in words.marks if m.kind == "collective"], n.target or n.path or n.kind, _source_line(n.source))
        label += self._overlay_line(n.id)
        extra = ", penwidth=2" if n.inplace else ""
        if n.scope.startswith(BACKWARD_SCOPE):
            extra += f', style="rounded,filled,dashed", color="{BACKWARD}"'
        elif words.has("unused"):  # nothing reads its result: dashed, as the tree lists it apart
            extra += ', style="rounded,filled,dashed"'
        return self._marked(words, label, cat, tip, extra)

    def _heading(self, words: Words) -> str:
        """A call's first line, boxed or open: ``layers.0–1 (LlamaDecoderLayer) ×2``."""
        badge = f" <B>{html_text(words.badge)}</B>" if words.badge else ""
        return f"<B>{html_text(words.title)}</B> {_font(html_text(f'({words.subtitle})'), self.palette.muted)}{badge}"

    def _box_attrs(self, unit: Unit) -> str:
        p, scope, words = self.palette, unit.scope, self.words[unit.id]
        assert scope is not None
        cat = "module" if unit.kind == "fold" else self._box_category(unit)
        label = self._heading(words)
        if words.facts:
            label += "<BR/>" + _font(html_text(" · ".join(words.facts), 120), p.muted, 9)
        full = fold_name(unit.members) if unit.kind == "fold" else scope_name(scope, self.model)
        label += self._overlay_line(scope.id)
        tip = tooltip(f"{full} ({scope.cls})", _source_line(scope.source))
        if unit.kind == "fold":
            extra = f', peripheries=2, penwidth=1.4, fillcolor="{p.fill["module"]}:{p.badge}", gradientangle=0'
        elif scope.id.startswith(BACKWARD_SCOPE):
            extra = f', style="rounded,filled,dashed", color="{BACKWARD}"'
        else:
            extra = f", penwidth={2.0 if self.children[scope.id] else 1.6}"
        return self._marked(words, label, cat, tip, extra)

    def _region(self, unit: Unit) -> int | None | str:
        """The compiled graph a unit's ops ran in (None: eagerly; "mixed": more than one)."""
        ops = [unit.node] if unit.kind == "node" and unit.node else [n for n in unit.nodes if n.kind == "op"]
        regions = {n.meta.get("compile_region") for n in ops if n.kind == "op"}
        return next(iter(regions)) if len(regions) == 1 else ("mixed" if regions else "none")

    def _region_attrs(self, unit: Unit) -> str:
        region = self._region(unit) if self.compiled and unit.kind != "ref" else "none"
        if region in ("none", "mixed"):
            return ""
        color = EAGER_REGION if region is None else COMPILE_REGIONS[int(region) % len(COMPILE_REGIONS)]
        return f', color="{color}", penwidth=2.4' + (', style="rounded,filled,dashed"' if region is None else "")

    def _crosses_break(self, src: str, dst: str) -> str | None:
        """The reason of a graph break between two units, if execution went on at ``dst`` after one."""
        if not self.compiled or self._region(self.layout.units[src]) == self._region(self.layout.units[dst]):
            return None
        unit = self.layout.units[dst]
        for node in [unit.node] if unit.node else unit.nodes:
            if node is not None and node.id in self.break_at:
                return plain_reason(self.break_at[node.id])
        return None

    def _box_category(self, unit: Unit) -> str:
        if self.children[unit.scope.id]:
            return "module"
        return leaf_module_category((category(n.target, n.kind) for n in unit.nodes if n.kind == "op"), unit.scope.class_name)

    def _ref_attrs(self, ref: Unit) -> str:
        """A stand-in for a far-away value: where it comes from and its shape."""
        words, p = self.words[ref.id], self.palette
        label = f"{html_text(words.title)}<BR/>{_font(html_text(words.subtitle or ''), p.muted, 9)}"
        return (
            f'label=<{label}>, style="rounded,dashed", color="{p.edge}", fillcolor="{p.background}",'
            f" fontsize=9, tooltip={tooltip('value drawn in full at ' + words.title.removeprefix('↪ '))}"
        )

    def _edge(self, src: str, dst: str, edge: Edge) -> None:
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
        label = "\\n".join(quoted(t, 40)[1:-1] for t in self.labels[(src, dst)])
        if self._crosses_collective(dst, edge):  # the value goes between ranks
            style += f', style=dashed, color="{p.border["communication"]}"'
        reason = self._crosses_break(src, dst)
        if reason is not None:
            label = "✂ " + label
            style += f', color="{GRAPH_BREAK}", fontcolor="{GRAPH_BREAK}", style="bold,dashed", penwidth=2'
            style += f", tooltip={tooltip('graph break: ' + reason)}"
        self.lines.append(f'  {quoted(src)} -> {quoted(dst)} [label=" {label}"{style}];')

    def _crosses_collective(self, dst: str, edge: Edge) -> bool:
        """The edge carries a collective's result, or into a collective."""
        node = self.layout.units[dst].node
        if node is not None and collective_kind(node.target) is not None:
            return True
        return any(collective_kind(self.ir.node(ref.node).target) is not None for ref in edge.values)

    def _legend(self) -> str:
        p = self.palette
        cells = "".join(
            f'<TD BGCOLOR="{p.fill[cat]}" COLOR="{p.border[cat]}" BORDER="1" STYLE="rounded"> </TD>'
            f'<TD ALIGN="LEFT">{_font(html_text(text.split(" (")[0]), p.muted, 9)}</TD>'
            for cat, text in LEGEND
            if cat in self.used_categories
        )
        if any(unit.kind == "fold" for unit in self.layout.units.values()) or self.layout.folds:
            cells += (
                f'<TD BGCOLOR="{p.fill["module"]}:{p.badge}" COLOR="{p.badge}" BORDER="1" STYLE="rounded"> </TD>'
                f'<TD ALIGN="LEFT">{_font("×N  repeated calls folded to one", p.muted, 9)}</TD>'
            )
        if self.decided:
            cells += (
                f'<TD BGCOLOR="{DECISION}" COLOR="{DECISION_BORDER}" BORDER="1">◆</TD>'
                f'<TD ALIGN="LEFT">{_font("decision: Python read the value (if, .item())", p.muted, 9)}</TD>'
            )
        if self.ir.has_scope(BACKWARD_SCOPE):
            cells += (
                f'<TD COLOR="{BACKWARD}" BORDER="1" STYLE="dashed"> </TD>'
                f'<TD ALIGN="LEFT">{_font("backward (drawn apart, nested as the forward calls)", BACKWARD, 9)}</TD>'
            )
        title = f'<TD COLSPAN="{2 * max(1, len(self.used_categories))}"><B>{html_text(self.model)}</B></TD>'
        return (
            f'<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="4" CELLPADDING="2"><TR>{title}</TR>'
            f"<TR>{cells or '<TD></TD>'}</TR>{self._region_legend()}{self._overlay_legend()}</TABLE>"
        )

    def _overlay_legend(self) -> str:
        """A row of the fill's swatches: a number overlay's lowest and highest, or each category."""
        if self.fill is None:
            return ""
        cells = "".join(
            f'<TD BGCOLOR="{colour}" BORDER="1"> </TD><TD ALIGN="LEFT">{_font(html_text(words, 60), self.palette.muted, 9)}</TD>'
            for colour, words in self.overlays.legend(self.fill, self.palette.overlay)
        )
        return f"<TR><TD>{_font('fill:', self.palette.muted, 9)}</TD>{cells}</TR>"

    def _region_legend(self) -> str:
        """compile_report: a border swatch per compiled graph (the first few), eager, and the break edges."""
        if not self.compiled:
            return ""
        shown, more = legend_graphs(int(self.ir.meta.get("compile_graphs") or 0))
        swatches = [(color, f"graph {g}") for g, color in shown]
        swatches += [(None, f"… {more:,} more")] if more else []
        swatches += [(EAGER_REGION, "eager"), (GRAPH_BREAK, "✂ graph break")]
        cells = "".join(
            (f'<TD COLOR="{color}" BORDER="2" STYLE="rounded"> </TD>' if color else "")
            + f'<TD ALIGN="LEFT">{_font(html_text(text), self.palette.muted, 9)}</TD>'
            for color, text in swatches
        )
        return f"<TR>{cells}</TR>"


# -- entry points ----------------------------------------------------------------
# Each takes an analysed graph (``meta["repeat"]`` marks the runs ``fold_repeats`` folds).


def to_dot(ir: GraphIR, options: DotOptions | None = None) -> str:
    """The graph as Graphviz DOT text (deterministic; needs no Graphviz install)."""
    options = options or DotOptions()
    return _Writer(build_view(ir, options), options).write()


def diagram_size(ir: GraphIR, options: DotOptions | None = None) -> int:
    """Nodes plus edges the diagram will have: what ``dot``'s layout time grows with."""
    options = options or DotOptions()
    return build_layout(ir, options).element_count(options.show_tensors)


def size_advice(ir: GraphIR, options: DotOptions, layout: Layout) -> str:
    """The one warning a diagram too big for ``dot`` gets: how big, what to do (a ``depth``
    that fits, for Python and the command line), and that far reads are already stand-ins."""
    size = layout.element_count(options.show_tensors)
    deepest = max((ir.depth(s.id) for s in ir.scopes), default=0)
    limit = options.depth if options.depth is not None else deepest + 1
    fitting = [d for d in range(limit) if diagram_size(ir, replace(options, depth=d)) <= MAX_DOT_ELEMENTS]
    depth = fitting[-1] if fitting else 0
    advice = [f"depth={depth} (--depth {depth} on the command line)"]
    if not options.fold_repeats:
        folded = diagram_size(ir, replace(options, fold_repeats=True))
        if folded < size:
            advice.append(f"fold_repeats=True ({folded} elements)")
    stand_ins = sum(1 for unit in layout.units.values() if unit.kind == "ref")
    far = (
        f" Values read far from where they were made are already drawn as ↪ stand-ins ({stand_ins} of them), not long edges."
        if stand_ins
        else ""
    )
    return (
        f"this diagram has {size} nodes and edges; Graphviz may take minutes to lay it out "
        f"(about {MAX_DOT_ELEMENTS} take ~30 s). Draw fewer with {' or '.join(advice)}.{far}"
    )


def render(ir: GraphIR, options: DotOptions | None = None, fmt: str = "svg") -> bytes:
    """The diagram drawn by Graphviz ``dot`` as ``svg``, ``png`` or ``pdf`` bytes (``dot``: the DOT text).

    Warns (``RuntimeWarning``) before laying out a diagram too big for ``dot`` to finish in ~30 s.
    """
    options = options or DotOptions()
    if fmt != "dot" and fmt not in FORMATS:
        raise ValueError(f"unknown image format {fmt!r}; expected one of {', '.join(FORMATS)} or 'dot'")
    view = build_view(ir, options)
    layout = view.layout
    source = _Writer(view, options).write()
    if fmt == "dot":
        return source.encode("utf-8")
    if layout.element_count(options.show_tensors) > MAX_DOT_ELEMENTS:
        warnings.warn(size_advice(ir, options, layout), RuntimeWarning, stacklevel=3)
    return run_dot(source, fmt)


def image_format(path: str | PurePath, fmt: str | None = None) -> str:
    """The format to draw ``path`` in: ``fmt``, else its suffix (``.gv`` and ``.dot`` give DOT)."""
    if fmt is None:
        suffix = PurePath(path).suffix.lower().lstrip(".")
        fmt = "dot" if suffix == "gv" else suffix
    if fmt != "dot" and fmt not in FORMATS:
        raise ValueError(f"cannot tell the image format from {str(path)!r}; pass format= one of svg, png, pdf, dot")
    return fmt
