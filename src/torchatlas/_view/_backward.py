"""The backward pass as its own part of a picture (``trace(backward=True)``).

A capture records each backward op in the module call of the forward op it
differentiates, which suits the numbers (a call's backward FLOPs) but not a
picture: drawn in place, forward modules would seem to feed later backward ops.
Pictures keep the forward graph as it is and show the backward ops apart, grouped
by the forward call they belong to, linked to the forward ops whose saved tensors
they read.
"""

from __future__ import annotations

import dataclasses

from torchatlas._ir import GraphIR, Node, Scope

BACKWARD_SCOPE = "s_backward"
"""Id of the one drawn scope that holds the backward part (a view id, never saved)."""


def _is_backward(node: Node) -> bool:
    return node.meta.get("phase") == "backward"


def backward_ids(ir: GraphIR) -> set[str]:
    """The nodes of the backward part: those marked so, and any node that reads one (a
    forward part never reads the backward one, whatever a loaded file says)."""
    ids: set[str] = set()
    for n in ir.nodes:
        if _is_backward(n) or any(ref.node in ids for ref in n.inputs):
            ids.add(n.id)
    return ids


def forward_part(ir: GraphIR) -> GraphIR:
    """The graph without its backward ops and gradient outputs (``ir`` itself when it has none)."""
    backward = backward_ids(ir)
    if not backward:
        return ir
    return GraphIR(ir.scopes, [n for n in ir.nodes if n.id not in backward], ir.meta)


def backward_groups(ir: GraphIR) -> list[tuple[Scope, list[Node]]]:
    """Backward ops in execution order, split into runs of one forward module call each."""
    backward = backward_ids(ir)
    groups: list[tuple[Scope, list[Node]]] = []
    for n in ir.nodes:
        if n.kind != "op" or n.id not in backward:
            continue
        if groups and groups[-1][0].id == n.scope:
            groups[-1][1].append(n)
        else:
            groups.append((ir.scope(n.scope), [n]))
    return groups


def forward_reads(ir: GraphIR) -> set[str]:
    """Nodes whose results a forward op or an output reads (for :func:`of_the_loss`)."""
    return {r.node for n in ir.nodes if n.kind == "output" or n.meta.get("phase") != "backward" for r in n.inputs}


def of_the_loss(forward: Scope, nodes: list[Node], read: set[str]) -> bool:
    """Whether backward ops in the model's own call differentiate the loss alone: the seed
    gradient and the ops after the model's whose results only backward reads (``read``:
    :func:`forward_reads`). Every output names them ``(loss)``."""
    return forward.parent is None and all(n.meta.get("grad_of") not in read for n in nodes)


def backward_apart(ir: GraphIR) -> GraphIR:
    """The graph with every backward op moved into a ``backward`` scope under the model's
    call, one child scope per forward call it differentiates (``backward.fc2 (∇Linear)``)."""
    groups = backward_groups(ir)
    root = next((s for s in ir.scopes if s.parent is None), None)
    if not groups or root is None:
        return ir
    scopes = [*ir.scopes, Scope(BACKWARD_SCOPE, root.id, "backward", "torchatlas.backward", 0)]
    moved: dict[str, str] = {}  # node id -> its backward scope
    read = forward_reads(ir)
    loss = all(of_the_loss(forward, nodes, read) for forward, nodes in groups if forward.parent is None)
    made: set[str] = set()
    for forward, nodes in groups:
        # nested as the forward calls are (backward.layer1 > backward.layer1.0 > …), so that a
        # depth closes the backward part as it closes the forward one
        chain = [forward] if forward.parent is None else [s for s in (ir.scope(a) for a in ir.ancestry(forward.id)) if s.parent is not None]
        parent = BACKWARD_SCOPE
        for call in chain:
            sid = f"{BACKWARD_SCOPE}_{call.id}"
            if sid not in made:
                made.add(sid)
                name = f"backward.{call.path or ('(loss)' if loss else '(model)')}"
                scopes.append(Scope(sid, parent, name, f"torchatlas.∇{call.class_name}", 0))
            parent = sid
        moved.update((n.id, parent) for n in nodes)
    for n in ir.nodes:  # a parameter's gradient: returned where the backward op that made it is
        if n.kind == "output" and n.inputs and n.inputs[0].node in moved:
            moved[n.id] = moved[n.inputs[0].node]
    nodes = [dataclasses.replace(n, scope=moved[n.id]) if n.id in moved else n for n in ir.nodes]
    return GraphIR(scopes, nodes, ir.meta)
