"""``View``: a diagram's units and edges (``build_layout``) with the words each one says,
built once per graph and options. The diagram writers lay it out; they spell nothing."""

from __future__ import annotations

from dataclasses import dataclass, replace

from torchatlas._ir import GraphIR, Ref, read_locally
from torchatlas._view._labels import (
    collectives_under,
    dominant_dtype,
    held_collectives_text,
    loop_body_note,
    loop_iterations,
    model_title,
    shape_list,
    shape_text,
)
from torchatlas._view._units import DotOptions, Layout, Unit, build_layout, fold_totals
from torchatlas._view._words import (
    Mark,
    Words,
    call_words,
    declared_params,
    far_name,
    fold_params_words,
    fold_words,
    io_fact,
    op_words,
    params_words,
    shapes_of,
    time_facts,
    value_words,
)

BOX_SHAPES = 3
"""Tensors a box's ``in → out`` fact and an edge's label name at most, then ``…``."""


@dataclass
class View:
    """What one diagram shows: ``layout`` (units, edges, folds) and ``words`` for each unit id,
    ``labels`` for each edge (one shape per tensor it carries), ``open`` for each call drawn
    open (a cluster, a subgraph: its name, class and ``×N``)."""

    layout: Layout
    words: dict[str, Words]
    labels: dict[tuple[str, str], list[str]]
    open: dict[str, Words]

    @property
    def ir(self) -> GraphIR:
        return self.layout.ir


def build_view(ir: GraphIR, options: DotOptions) -> View:
    """The layout of ``ir`` under ``options`` and every word it shows."""
    layout = build_layout(ir, options)
    ir = layout.ir
    dominant, model = dominant_dtype(ir), model_title(ir)
    ins: dict[str, list[Ref]] = {}
    outs: dict[str, list[Ref]] = {}
    for (src, dst), edge in layout.edges.items():
        if not edge.from_param:
            if layout.units[src].kind != "ref":
                outs.setdefault(src, []).extend(edge.values)
            ins.setdefault(dst, []).extend(edge.values)
    iterations = loop_iterations(ir)
    collectives = collectives_under(ir)

    def box_facts(unit: Unit) -> tuple[str, ...]:
        facts = []
        out_metas = [ir.value_meta(v) for v in dict.fromkeys(_returned(ir, unit) or outs.get(unit.id, []))]
        in_metas = [ir.value_meta(v) for v in dict.fromkeys(ins.get(unit.id, []))]
        # its inputs as it read them (ReLU after ColwiseParallel was given this rank's part)
        shapes_in = shape_list(read_locally(in_metas, out_metas), dominant, BOX_SHAPES)
        shapes_out = shape_list(out_metas, dominant, BOX_SHAPES)
        if shapes_in or shapes_out:
            facts.append(io_fact(shapes_in, shapes_out))
        if params := declared_params(ir, unit.members, unit.nodes):
            facts.append(fold_params_words(unit.members, params) if unit.kind == "fold" else params_words(params))
        assert unit.scope is not None
        facts += time_facts(fold_totals(ir, unit.scope.id) if unit.kind == "fold" else unit.scope.meta)
        if unit.kind == "fold" and (body := loop_body_note(ir, unit.scope)):
            facts.append(body)  # the caller's ops of every iteration are inside the box too
        return tuple(facts)

    def with_collectives(words: Words, scope_id: str) -> Words:
        """No collective hidden in a closed box: ``⇄ all_reduce 2.00 KiB`` (a fold: one member's)."""
        held = held_collectives_text(collectives.get(scope_id, []))
        return replace(words, marks=(*words.marks, Mark("collective", held))) if held else words

    words: dict[str, Words] = {}
    for unit in layout.units.values():
        if unit.kind == "node" and unit.node is not None:
            n = unit.node
            words[unit.id] = op_words(n, iterations.get(n.id)) if n.kind == "op" else value_words(ir, n, dominant)
        elif unit.kind == "ref" and unit.node is not None:
            ref = Ref(unit.node.id, unit.slot)
            words[unit.id] = Words(far_name(ir, ref, model), shape_text(ir.value_meta(ref), dominant))
        elif unit.kind == "fold":
            words[unit.id] = with_collectives(fold_words(ir, unit.members, box_facts(unit)), unit.members[0].id)
        elif unit.scope is not None:
            words[unit.id] = with_collectives(call_words(ir, unit.scope, model, box_facts(unit)), unit.scope.id)
    labels = {key: shapes_of(ir, edge.values, dominant, BOX_SHAPES) for key, edge in layout.edges.items()}
    opened = {}
    for scope_id in layout.first_inside():  # a call drawn open is named as its box would be
        members = layout.folds.get(scope_id)
        opened[scope_id] = fold_words(ir, members) if members else call_words(ir, ir.scope(scope_id), model)
    return View(layout, words, labels, opened)


def _returned(ir: GraphIR, unit: Unit) -> list[Ref]:
    """What a boxed call returned, every tensor of it (an LSTM's output and its ``(h, c)``),
    whether or not each is read on; a fold: its last member's."""
    scope = unit.members[-1] if unit.kind == "fold" and unit.members else unit.scope
    return list(scope.outputs) if scope is not None else []
