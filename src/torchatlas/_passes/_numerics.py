"""Run-time numbers on the graph: where the first NaN or Inf appeared, and each module call's
output range.

The numbers themselves are recorded by capture (``node.meta["stats"]``, ``time_us``); this
pass reads them into module-call summaries.
"""

from __future__ import annotations

from typing import Any

from torchatlas._ir import GraphIR, Node
from torchatlas._passes._common import MetaUpdate, Pass, roll_up


def _nonfinite_counts(node: Node) -> tuple[int, int]:
    """NaN and Inf counts over the node's outputs."""
    stats = node.meta.get("stats")
    if not isinstance(stats, list):
        return 0, 0
    found = [s for s in stats if isinstance(s, dict)]
    return int(sum(s.get("nan") or 0 for s in found)), int(sum(s.get("inf") or 0 for s in found))


def _nonfinite(node: Node) -> bool:
    return any(_nonfinite_counts(node))


def first_nonfinite(ir: GraphIR) -> Node | None:
    """The first op, in execution order, with a NaN or Inf in one of its outputs."""
    return next((n for n in ir.ops() if _nonfinite(n)), None)


def numerics_update(ir: GraphIR) -> MetaUpdate:
    """Node meta ``nonfinite`` (``{"nan": count, "inf": count}`` on ops whose outputs hold any);
    scope meta ``output_stats`` (the stats of each value the call returned) and
    ``nonfinite_ops`` (inclusive count of ops with NaN/Inf outputs); graph meta ``nonfinite_ops``
    and ``first_nonfinite`` (its node id)."""
    if not any("stats" in n.meta for n in ir.ops()):
        return MetaUpdate()
    own: dict[str, float] = {}
    nodes: dict[str, dict[str, Any]] = {}
    for n in ir.ops():
        nan, inf = _nonfinite_counts(n)
        if nan or inf:
            own[n.scope] = own.get(n.scope, 0) + 1
            nodes[n.id] = {"nonfinite": {"nan": nan, "inf": inf}}
    inclusive = roll_up(ir, own)
    scopes: dict[str, dict[str, Any]] = {}
    for s in ir.scopes:
        outputs = []
        for ref in s.outputs:
            stats = ir.node(ref).meta.get("stats")
            outputs.append(stats[ref.slot] if isinstance(stats, list) and ref.slot < len(stats) else None)
        scopes[s.id] = {"output_stats": outputs, "nonfinite_ops": int(inclusive[s.id])}
    first = first_nonfinite(ir)
    graph = {"nonfinite_ops": int(sum(own.values())), "first_nonfinite": first.id if first else None}
    return MetaUpdate(nodes=nodes, scopes=scopes, graph=graph)


PASS = Pass(
    "numerics",
    numerics_update,
    node_keys=frozenset({"nonfinite"}),
    scope_keys=frozenset({"output_stats", "nonfinite_ops"}),
    graph_keys=frozenset({"nonfinite_ops", "first_nonfinite"}),
)
