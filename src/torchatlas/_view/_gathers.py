"""FSDP2's parameter all-gathers as one step each, for the tree.

Before a unit's forward, FSDP2 lays out the unsharded parameters' storage (``empty``,
``view``), copies this rank's shards in (``all_gather_copy_in``), all-gathers, and splits
the result into each parameter (``split_with_sizes_copy``, ``as_strided``); the capture
records every step, and the parameters as ``torchatlas.updated`` values. A reader wants one
line per all-gather: ``⇄ all_gather over dp:4, 4.25 KiB: 2 params → (64×16, 64)``.
On the first forward pass the parameters are views of the new storage; later ones reuse it.
"""

from __future__ import annotations

import dataclasses

from torchatlas._ir import GraphIR, Node, Ref, Scope
from torchatlas._ops import collective_kind, op_name

UPDATED = "torchatlas.updated"

GATHERED_PARAMS = "gathered_params"
"""``node.meta`` key of a folded all-gather: how many parameters it unshards."""

_STORAGE_STEPS = frozenset(
    {"empty", "view", "as_strided", "detach", "alias", "all_gather_copy_in", "split_with_sizes_copy", "updated"}
)
"""What FSDP2 lays the unsharded parameters out with (``updated``: storage written in place)."""


def _storage_steps(ir: GraphIR, gather: Node, order: dict[str, int]) -> set[str]:
    """The ops of ``gather``'s module call that lay out, fill and split what it gathers."""
    steps = {gather.id}
    for node in ir.nodes[order[gather.id] + 1 :]:
        if node.kind == "op" and node.scope == gather.scope and op_name(node.target or "") in _STORAGE_STEPS:
            if any(r.node in steps for r in node.inputs):
                steps.add(node.id)
    stack = [r.node for step in steps for r in (*ir.node(step).inputs, *ir.node(step).shape_inputs)]
    while stack:  # what the gather and the split read: the buffer, the shards copied in
        node = ir.node(stack.pop())
        if node.id in steps or node.kind != "op" or node.scope != gather.scope:
            continue
        if op_name(node.target or "") not in _STORAGE_STEPS:
            continue
        steps.add(node.id)
        stack.extend(r.node for r in (*node.inputs, *node.shape_inputs))
    return steps


def gathered_parameters(ir: GraphIR) -> GraphIR:
    """The graph with each all-gather that unshards parameters standing for its storage steps:
    it reads what they read from elsewhere and gives the parameters that others read
    (``meta["gathered_params"]``: how many). ``ir`` itself when there is none. An all-gather
    whose steps write no storage in place (sequence parallelism's) is left as it is."""
    order = {n.id: i for i, n in enumerate(ir.nodes)}
    readers: dict[str, set[str]] = {}
    for n in ir.nodes:
        for r in (*n.inputs, *n.shape_inputs):
            readers.setdefault(r.node, set()).add(n.id)
    returned = {r for s in ir.scopes for r in s.outputs}
    moved: dict[Ref, Ref] = {}
    replaced: dict[str, Node] = {}
    gone: set[str] = set()
    for gather in ir.ops():
        if collective_kind(gather.target) != "all_gather":
            continue
        steps = _storage_steps(ir, gather, order)
        if not any(ir.node(step).target == UPDATED for step in steps):
            continue
        ends = [
            Ref(step, slot) for step in sorted(steps, key=order.__getitem__)
            for slot in range(len(ir.node(step).outputs))
            if Ref(step, slot) in returned or any(
                Ref(step, slot) in (*ir.node(r).inputs, *ir.node(r).shape_inputs) for r in readers.get(step, set()) - steps
            )
        ]
        if not ends:
            continue
        outside = [r for step in sorted(steps, key=order.__getitem__) for r in ir.node(step).inputs if r.node not in steps]
        moved.update((end, Ref(gather.id, k)) for k, end in enumerate(ends))
        replaced[gather.id] = dataclasses.replace(
            gather, inputs=list(dict.fromkeys(outside)), shape_inputs=[],
            outputs=[ir.value_meta(end) for end in ends], args=[], kwargs={}, inplace=False,
            meta={**gather.meta, GATHERED_PARAMS: len(ends)},
        )
        gone |= steps - {gather.id}
    if not replaced:
        return ir
    nodes = [_moved_reads(replaced.get(n.id, n), moved) for n in ir.nodes if n.id not in gone]
    scopes = [_moved_scope(s, moved) for s in ir.scopes]
    return GraphIR(scopes, nodes, ir.meta)


def _moved_reads(node: Node, moved: dict[Ref, Ref]) -> Node:
    if not any(r in moved for r in (*node.inputs, *node.shape_inputs)):
        return node
    return dataclasses.replace(
        node, inputs=[moved.get(r, r) for r in node.inputs], shape_inputs=[moved.get(r, r) for r in node.shape_inputs]
    )


def _moved_scope(scope: Scope, moved: dict[Ref, Ref]) -> Scope:
    if not any(r in moved for r in (*scope.inputs, *scope.outputs)):
        return scope
    return dataclasses.replace(
        scope, inputs=[moved.get(r, r) for r in scope.inputs], outputs=[moved.get(r, r) for r in scope.outputs]
    )
