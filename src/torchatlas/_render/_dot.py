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
from collections.abc import Mapping
from dataclasses import replace
from pathlib import PurePath
from typing import Any

from torchatlas._ir import GraphIR, Node, Ref, Source, TensorMeta
from torchatlas._ops import LEGEND, category, collective_kind
from torchatlas._render._graphviz import FORMATS, html_text, quoted, run_dot, tooltip
from torchatlas._text import format_compact, format_duration
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
    break_anchors,
    build_layout,
    call_name,
    collective_text,
    decisions,
    dominant_dtype,
    fold_name,
    fold_totals,
    input_label,
    leaf_module_category,
    legend_graphs,
    loop_note,
    model_title,
    op_display,
    overlay_marks,
    plain_reason,
    rank_pins,
    read_label,
    read_mark,
    relative_name,
    scope_name,
    shape_list,
    shape_text,
)

FONT = "Helvetica,Arial,sans-serif"

MAX_DOT_ELEMENTS = 4000
"""Nodes plus edges above which ``dot`` takes more than ~30 s (see bench/bench_render.py)."""

# Leaf boxes take the colour of their most telling op: a Conv2d box is compute, a ReLU box elementwise.
_FAILED = "#d93025"  # the failing op of a partial trace, in every theme


# -- labels --------------------------------------------------------------------


def _shapes_text(ir: GraphIR, values: list[Ref], dominant: str | None, most: int = 3) -> list[str]:
    """One shape per tensor, in the tree's spelling (``2×10×96, 4×2×48, 4×2×48``; three alike ``×3``)."""
    return shape_list([ir.value_meta(v) for v in dict.fromkeys(values)], dominant, most)


def _time_facts(numbers: Mapping[str, Any]) -> list[str]:
    """``1.2 ms`` and ``CUDA 0.8 ms`` for a profiled call (``numbers``: its meta, or a folded
    run's totals from the repeats pass)."""
    facts = []
    for key, prefix in (("time_us", ""), ("cuda_time_us", "CUDA ")):
        if isinstance(time := numbers.get(key), (int, float)):
            facts.append(prefix + format_duration(time))
    return facts


def _param_count(ir: GraphIR, unit: Unit) -> int:
    """Parameters owned by the unit's modules (from the model's parameter list when captured)."""
    declared = ir.meta.get("parameters")
    if isinstance(declared, list):
        # Each parameter once, however many members own it (the calls of one shared module).
        prefixes = {scope.path + "." if scope.path else "" for scope in unit.members}
        return sum(
            TensorMeta(tuple(p.get("shape", ())), "", "").numel()
            for p in declared
            if any(str(path).startswith(prefix) for path in [p.get("path", ""), *p.get("shared_with", [])] for prefix in prefixes)
        )
    return sum(n.outputs[0].numel() for n in unit.nodes if n.kind == "param" and n.outputs)


def _font(text: str, color: str, size: int | None = None) -> str:
    size_attr = f' POINT-SIZE="{size}"' if size else ""
    return f'<FONT COLOR="{color}"{size_attr}>{text}</FONT>'


def _source_line(source: Source | None) -> str:
    """``coolcnn.py:18  x = ...``; the bare file name keeps saved diagrams free of local paths."""
    if source is None:
        return ""
    return f"{PurePath(source.file).name}:{source.line}  {source.code}".rstrip()


class _Writer:
    def __init__(self, ir: GraphIR, options: DotOptions, layout: Layout) -> None:
        self.ir, self.options, self.layout = ir, options, layout
        self.children = ir.children()
        self.palette: Palette = PALETTES[options.theme]
        self.dominant = dominant_dtype(ir)
        self.model = model_title(ir)
        self.used_categories: set[str] = set()
        self.linked_tensors: set[str] = set()
        # Module calls holding the op a partial trace failed at: marked even when drawn as one box.
        self.failed_scopes = {s.id for s in ir.scopes if s.meta.get("failed")}  # the failures pass
        self.lines: list[str] = []
        self.in_values: dict[str, list[tuple[str, int]]] = {}
        self.out_values: dict[str, list[tuple[str, int]]] = {}
        for (src, dst), edge in layout.edges.items():
            if not edge.from_param:
                if layout.units[src].kind != "ref":
                    self.out_values.setdefault(src, []).extend(edge.values)
                self.in_values.setdefault(dst, []).extend(edge.values)
        self.units_in: dict[str | None, list[Unit]] = {}
        for unit in layout.units.values():
            self.units_in.setdefault(unit.container, []).append(unit)
        self.cluster_first = self._first_per_cluster()
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
        border = BACKWARD if scope_id.startswith(BACKWARD_SCOPE) else p.cluster_border
        style = "rounded,filled,dashed" if scope_id.startswith(BACKWARD_SCOPE) else "rounded,filled"
        members = self.layout.folds.get(scope_id)
        # named below its caller, as its box would be and as the page names an open call
        caller = self.ir.scope(scope.parent).path if scope.parent is not None else ""
        name = relative_name(fold_name(members), caller) if members else call_name(self.ir, scope_id, self.model)
        label = f"<B>{html_text(name)}</B> {_font(html_text(f'({scope.class_name})'), p.muted)}"
        if members:  # a run drawn open, as its first member
            label += f" <B>×{len(members)}</B>"
            border, style = p.badge, style.replace("filled", "filled,bold")
        self.lines += [
            f"{pad}subgraph {quoted('cluster_' + scope_id)} {{",
            f'{pad}  graph [label=<{label}>, labeljust=l, style="{style}", fillcolor="{fill}",'
            f' color="{border}", penwidth=1, fontsize=10, margin=10,'
            f" tooltip={tooltip(scope.cls, _source_line(scope.source))}];",
        ]
        self._container(scope_id, indent + 1)
        self.lines.append(f"{pad}}}")

    def _unit(self, unit: Unit, indent: int) -> None:
        pad = "  " * indent
        if unit.kind == "node":
            attrs = self._node_attrs(unit.node)
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

    def _node_attrs(self, n: Node) -> str:
        p = self.palette
        cat = category(n.target, n.kind)
        meta = n.outputs[0] if n.outputs else None
        if n.kind == "op":
            label = f"<B>{html_text(op_display(n))}</B>"
            if n.inplace:  # as the tree's [in-place]
                label += f"<BR/>{_font('in-place', p.muted, 9)}"
            tip = tooltip(n.target or "?", "in-place" if n.inplace else "", _source_line(n.source))
            marked = collective_text(n)
            if marked is not None:  # ⇄ all_reduce over tp:4, 128 B (Partial(sum) → Replicate)
                label += f"<BR/>{_font(html_text(marked.split(' ', 2)[2]), p.muted, 9)}"
                tip = tooltip(marked, n.target or "?", _source_line(n.source))
        elif n.kind == "input":
            shape = _font(html_text(shape_text(meta, self.dominant)), p.muted, 9)
            label = f"<B>{html_text(input_label(n.path))}</B><BR/>{shape}"
            tip = tooltip(n.path or "input")
        elif n.kind == "output":
            value = self.ir.value_meta(n.inputs[0]) if n.inputs else meta
            shape = _font(html_text(shape_text(value, self.dominant)), p.muted, 9)
            label = f"<B>{html_text(n.path or 'output')}</B><BR/>{shape}"
            tip = tooltip(n.path or "output")
        else:
            name = (n.path or n.kind).rsplit(".", 1)[-1]
            label = f"{html_text(name)}<BR/>{_font(html_text(shape_text(meta, self.dominant)), p.muted, 9)}"
            tip = tooltip(f"{n.kind} {n.path or ''}")
        label += self._overlay_line(n.id)
        extra = ", penwidth=2" if n.inplace else ""
        if n.scope.startswith(BACKWARD_SCOPE):
            extra += f', style="rounded,filled,dashed", color="{BACKWARD}"'
        elif n.meta.get("dead"):  # nothing reads its result: dashed, as the tree lists it apart
            label += f"<BR/>{_font('unused', p.muted, 9)}"
            extra += ', style="rounded,filled,dashed"'
        nonfinite = n.meta.get("nonfinite")
        if nonfinite:  # a NaN or Inf came out of this op (trace(stats=True))
            counts = " ".join(f"{k}×{format_compact(v)}" for k, v in nonfinite.items() if v)
            label += f'<BR/>{_font("⚠ " + html_text(counts), _FAILED, 9)}'
            extra += f', color="{_FAILED}", penwidth=2.2'
        if "error" in n.meta:  # the op a partial trace stopped at
            label += f'<BR/>{_font("✗ " + html_text(str(n.meta["error"]), 48), _FAILED, 9)}'
            return f'label=<{label}>, {self._colors(cat)}, color="{_FAILED}", penwidth=2.6, tooltip={tip}'
        return f"label=<{label}>, {self._colors(cat)}, tooltip={tip}{extra}"

    def _box_attrs(self, unit: Unit) -> str:
        p, scope = self.palette, unit.scope
        if unit.kind == "fold":
            name = fold_name(unit.members)
            cat = "module"
        else:
            name = scope_name(scope, self.model)
            cat = self._box_category(unit)
        full_name = name
        name = relative_name(name, self.ir.scope(unit.container).path if unit.container else "")
        ins = _shapes_text(self.ir, self.in_values.get(unit.id, []), self.dominant)
        outs = _shapes_text(self.ir, self.out_values.get(unit.id, []), self.dominant)
        facts = []
        if ins or outs:
            facts.append(f"{', '.join(ins) or '–'} → {', '.join(outs) or '–'}")
        params = _param_count(self.ir, unit)
        if params:
            facts.append(f"{format_compact(params)} params")
        facts += _time_facts(fold_totals(self.ir, scope.id) if unit.kind == "fold" else scope.meta)
        title = f"<B>{html_text(name)}</B> {_font(html_text(f'({scope.class_name})'), p.muted)}"
        if unit.kind == "fold":
            title += f" <B>×{len(unit.members)}</B>"
        label = title
        if facts:
            label += "<BR/>" + _font(html_text(" · ".join(facts), 120), p.muted, 9)
        note = loop_note(self.ir, scope).removeprefix(" ").removeprefix(", ") if unit.kind == "fold" else ""
        if note:  # a loop a break ended: where, and over what
            label += "<BR/>" + _font(html_text(note, 120), DECISION_BORDER, 9)
        label += self._overlay_line(scope.id)
        tip = tooltip(f"{full_name} ({scope.cls})", _source_line(scope.source))
        if unit.kind == "fold":
            extra = f', peripheries=2, penwidth=1.4, fillcolor="{p.fill["module"]}:{p.badge}", gradientangle=0'
            return f"label=<{label}>, {self._colors(cat)}{extra}, tooltip={tip}"
        width = 2.0 if self.children[scope.id] else 1.6
        nonfinite = scope.meta.get("nonfinite_ops") if unit.kind != "fold" else None
        if nonfinite:
            label += "<BR/>" + _font(f"⚠ {format_compact(nonfinite)} ops with NaN/Inf", _FAILED, 9)
            return f'label=<{label}>, {self._colors(cat)}, color="{_FAILED}", penwidth=2.2, tooltip={tip}'
        if scope.id in self.failed_scopes:
            label += "<BR/>" + _font("✗ failed here", _FAILED, 9)
            return f'label=<{label}>, {self._colors(cat)}, color="{_FAILED}", penwidth=2.6, tooltip={tip}'
        if scope.id.startswith(BACKWARD_SCOPE):
            return f'label=<{label}>, {self._colors(cat)}, style="rounded,filled,dashed", color="{BACKWARD}", tooltip={tip}'
        return f"label=<{label}>, {self._colors(cat)}, penwidth={width}, tooltip={tip}"

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
        return leaf_module_category(category(n.target, n.kind) for n in unit.nodes if n.kind == "op")

    def _ref_attrs(self, ref: Unit) -> str:
        """A stand-in for a far-away value: where it comes from and its shape."""
        source = self.layout.units[ref.source]
        if source.kind == "fold":
            name = fold_name(source.members)
        elif source.kind == "box":
            name = scope_name(source.scope, self.model)
        elif source.node.kind == "op":
            name = op_display(source.node)
        else:
            name = input_label(source.node.path)
        p = self.palette
        shape = shape_text(self.ir.value_meta(Ref(ref.node.id, ref.slot)), self.dominant)
        label = f"↪ {html_text(name)}<BR/>{_font(html_text(shape), p.muted, 9)}"
        return (
            f'label=<{label}>, style="rounded,dashed", color="{p.edge}", fillcolor="{p.background}",'
            f" fontsize=9, tooltip={tooltip(f'value drawn in full at {name}')}"
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
        label = "\\n".join(quoted(t, 40)[1:-1] for t in _shapes_text(self.ir, edge.values, self.dominant))
        if self._crosses_collective(dst, edge):  # the value goes between ranks
            style += f', style=dashed, color="{p.border["communication"]}"'
        if self._saved_tensor(src, dst):
            style += f', style=dashed, color="{BACKWARD}", fontcolor="{BACKWARD}"'
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

    def _saved_tensor(self, src: str, dst: str) -> bool:
        """A forward value read by the backward part: a tensor autograd saved."""
        return self._in_backward(dst) and not self._in_backward(src)

    def _in_backward(self, unit_id: str) -> bool:
        unit = self.layout.units[unit_id]
        scope = unit.scope.id if unit.scope is not None else unit.node.scope if unit.node is not None else ""
        return scope.startswith(BACKWARD_SCOPE)

    def _legend(self) -> str:
        p = self.palette
        cells = "".join(
            f'<TD BGCOLOR="{p.fill[cat]}" COLOR="{p.border[cat]}" BORDER="1" STYLE="rounded"> </TD>'
            f'<TD ALIGN="LEFT">{_font(html_text(text.split(" (")[0]), p.muted, 9)}</TD>'
            for cat, text in LEGEND
            if cat in self.used_categories
        )
        if self.ir.has_scope(BACKWARD_SCOPE):
            cells += (
                f'<TD COLOR="{BACKWARD}" BORDER="1" STYLE="dashed"> </TD>'
                f'<TD ALIGN="LEFT">{_font("backward (reads saved tensors)", BACKWARD, 9)}</TD>'
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
    layout = build_layout(ir, options)
    return _Writer(layout.ir, options, layout).write()


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
    layout = build_layout(ir, options)
    source = _Writer(layout.ir, options, layout).write()
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
