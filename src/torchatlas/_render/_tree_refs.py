"""Trees for flow that is not series-parallel: break it at values read in several places.

A call whose steps do not nest as series and parallel parts (the adaLN-Zero block whose
``norm1`` returns six values read at five places, ReXNet's ``cat([x[:, :c] + shortcut,
x[:, c:]])``, BotNet's ``q`` read by ``q @ k`` and by the position bias) is laid out again
with some values turned into named references, as side values are: the value keeps its
edge to the first step that reads it, and each later read is ``← gate_msa``. A single value
whose later reads untangle the call nearly as flat as breaking them all does is preferred (the
call's input, then each step's result read again, then the results of calls whose several
values are read apart, in order); else every value read in several places is broken. Where even
that leaves a part that does not nest, that part alone is a numbered listing.

Sibling branches named alike are named by their calls instead. The layout is probed without drawing (the builder's ``probing`` mode lays out the items and
reports whether a listing was needed, without descending into module calls).
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Any

from torchatlas._ir import Ref, Source
from torchatlas._text import visible
from torchatlas._view import LINE_LIMIT, operand_names, parsed_line

from ._flow import SINK, SOURCE, Item, ScopeFlow

if TYPE_CHECKING:
    from ._tree import _TreeBuilder
    from ._tree_lines import Line

Edge = tuple[Item, Item]
_SINGLES_TRIED = 8
"""Values tried alone before every one is broken: each try lays the call out once more."""


def nesting(builder: _TreeBuilder, flow: ScopeFlow, items: list[Item]) -> int | None:
    """How deep branches nest when ``items`` of ``flow`` are laid out; None if a numbered
    listing is needed."""
    saved = builder.probing, builder.probe_failed
    builder.probing, builder.probe_failed = True, False
    try:
        lines = builder.sequence(flow, items, 0)
        return None if builder.probe_failed else _depth(lines)
    finally:
        builder.probing, builder.probe_failed = saved
        builder.forget(flow)


def _depth(lines: list[Line]) -> int:
    deepest, stack = 0, [(line, 1) for line in lines]
    while stack:
        line, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in line.children)
    return deepest


def untangled(builder: _TreeBuilder, flow: ScopeFlow, items: list[Item]) -> ScopeFlow | None:
    """``flow`` with reads turned into references so that ``items`` lay out, registering the
    references with the builder; None when ``flow`` lays out as it is or nothing can be broken."""
    if nesting(builder, flow, items) is not None:
        return None
    later = _later_reads(flow, items)
    if not later:
        return None
    # Every value broken at once nests least; one value broken is kept if it nests at most one
    # level deeper (a dense block, each step read by all later ones, is a chain only when all are).
    chosen = _with_references(flow, [edge for edges in later.values() for edge in edges])
    least = nesting(builder, chosen, items)
    if len(later) > 1:
        for edges in list(later.values())[:_SINGLES_TRIED]:
            trial = _with_references(flow, edges)
            depth = nesting(builder, trial, items)
            if depth is not None and (least is None or depth <= least + 1):
                chosen = trial
                break
    for item, refs in chosen.references.items():
        if item in chosen.items and refs != flow.references.get(item):
            builder.references[item] = refs
    return chosen


def tangled(builder: _TreeBuilder, flow: ScopeFlow, items: list[Item], level: int) -> list[Line]:
    """A section with one component and nothing bypassing it: break it, else list it."""
    if builder.probing:
        builder.probe_failed = True
        return []
    better = untangled(builder, flow, items)
    if better is not None:
        return builder.sequence(better, items, level)
    return builder.listing(flow, items, level)


def distinct_labels(builder: _TreeBuilder, branches: list[list[Item]], lines: list[Line]) -> list[Line]:
    """Sibling branches named alike (two calls whose results were each called ``x`` inside them,
    MobileOne's ``conv_scale`` and ``conv_kxk.0``) are named by their calls instead."""
    labels = [line.text for line in lines]
    for branch, line in zip(branches, lines):
        if line.children and labels.count(line.text) > 1:
            line.text = "┬ " + visible(builder.short_name(branch[-1]), LINE_LIMIT)
    return lines


def _later_reads(flow: ScopeFlow, items: list[Item]) -> dict[Item, list[Edge]]:
    """Each value read by several of ``items``: the edges to its readers after the first.
    The call's input first, then in the order of the items that make them."""
    position = {it: k for k, it in enumerate(items)}
    readers: dict[Item, list[Item]] = {}
    for a, targets in flow.edges.items():
        for b in targets:
            if b in position and b != a:
                readers.setdefault(a, []).append(b)
    order = {SOURCE: -1, **position}
    again: dict[Item, list[Edge]] = {}  # one value read again (``q`` by ``q @ k`` and the position bias)
    apart: dict[Item, list[Edge]] = {}  # several values of one call read apart (``q, k, v = split``)
    for a in sorted(readers, key=lambda it: order.get(it, len(position))):
        reads = sorted(readers[a], key=position.__getitem__)
        if len(reads) > 1:
            first = set(flow.carried.get((a, reads[0]), ()))
            same = all(first.intersection(flow.carried.get((a, b), ())) for b in reads[1:])
            (again if same or a == SOURCE else apart)[a] = [(a, b) for b in reads[1:]]
    return {**again, **apart}


def _with_references(flow: ScopeFlow, edges: list[Edge]) -> ScopeFlow:
    moved = set(edges)
    references = {b: list(refs) for b, refs in flow.references.items()}
    for a, b in edges:
        references.setdefault(b, []).extend((a, value) for value in flow.carried.get((a, b), ()))
    return ScopeFlow(
        items=flow.items,
        edges={a: [b for b in targets if (a, b) not in moved] for a, targets in flow.edges.items()},
        references=references,
        inputs=flow.inputs,
        carried=flow.carried,
    )


def reference_names(builder: _TreeBuilder, item: Item, side: list[tuple[Item, Ref]]) -> list[str]:
    """The names of the side values ``item`` reads, once each: values it was given in one list
    (a dense layer's ``features``, ``torch.cat(features, 1)``) by their place in it,
    ``features[0..2]``; the others as the reader calls them, else by their own names."""
    listed = _list_positions(builder, item)
    places = sorted({listed[1][ref] for _, ref in side if ref in listed[1]}) if listed else []
    names: list[str] = []
    start = 0
    for k in range(1, len(places) + 1):  # runs of consecutive places: features[0..2]
        if k == len(places) or places[k] != places[k - 1] + 1:
            first, last = places[start], places[k - 1]
            names.append(f"{listed[0]}[{first}]" if first == last else f"{listed[0]}[{first}..{last}]")  # type: ignore[index]
            start = k
    names += [
        builder.read_name(item, ref) or builder.value_name(producer, ref)
        for producer, ref in side
        if not listed or ref not in listed[1]
    ]
    return list(dict.fromkeys(names))


def _list_positions(builder: _TreeBuilder, item: Item) -> tuple[str, dict[Ref, int]] | None:
    """(the list variable, value -> its index there) when ``item`` was given a list first."""
    if item.is_scope:
        scope = builder.ir.scope(item.id)
        k = scope.meta.get("works_on")
        variable = _first_argument(scope.source)
        if not isinstance(k, int) or variable is None:
            return None
        return variable, {ref: i for i, ref in enumerate(scope.inputs[: k + 1])}
    node = builder.ir.node(item.id)
    first = node.args[0] if isinstance(node.args, list) and node.args else None
    if not isinstance(first, list) or len(first) < 2 or not all(_tensor(a) is not None for a in first):
        return None
    variable = _first_argument(node.source)
    if variable is None:
        return None
    return variable, {node.inputs[_tensor(a)]: i for i, a in enumerate(first) if _tensor(a) < len(node.inputs)}


def _tensor(argument: Any) -> int | None:
    value = argument.get("tensor") if isinstance(argument, dict) and len(argument) == 1 else None
    return value if isinstance(value, int) else None


def _first_argument(source: Source | None) -> str | None:
    """``features`` of ``new = layer(features)``: the one variable the line's calls pass first."""
    if source is None or not source.code:
        return None
    text = source.code.strip()
    tree = parsed_line(text[len("return "):] if text.startswith("return ") else text)
    if tree is None:
        return None
    names = {
        call.args[0].id for call in ast.walk(tree)
        if isinstance(call, ast.Call) and call.args and isinstance(call.args[0], ast.Name)
    }
    return names.pop() if len(names) == 1 else None


def joined_as(builder: _TreeBuilder, flow: ScopeFlow, end: Item, inside: set[Item]) -> str | None:
    """What the op that joins a branch back reads its value as (``feed_forward_hidden_states``
    in ``residual + feed_forward_hidden_states``): a branch is named by its reader, as every
    reader of the code names it; None where the join's line names none."""
    if end == SOURCE:
        refs = list(flow.inputs)  # the values the call was given
    elif end.is_scope:
        refs = list(builder.ir.scope(end.id).outputs)
    else:
        refs = [Ref(end.id, 0)]
    for join in flow.edges.get(end, ()):
        if join in inside or join == SINK:
            continue
        if join.is_scope:
            continue
        node = builder.ir.node(join.id)
        operands = operand_names(node)  # the join's own line: ``residual + feed_forward_hidden_states``
        names = [operands[k] for k, ref in enumerate(node.inputs) if ref in refs and k in operands]
        if names:
            return names[0]
    for reader, side in flow.references.items():  # read by reference: as its ``←`` names it (``temb``)
        for producer, ref in side:
            if producer == end and reader not in inside and reader != SINK and (name := builder.read_name(reader, ref)):
                return name
    return None
