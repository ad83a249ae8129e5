"""Communication: what the collectives of a distributed model move, per call and per mesh dimension.

Capture records each collective's facts in ``node.meta["collective"]`` (its group, the
bytes it moves on this rank); this pass adds them up. A graph without collectives gets
no keys at all.
"""

from __future__ import annotations

from typing import Any

from torchatlas._ir import GraphIR
from torchatlas._ops import collective_kind
from torchatlas._passes._common import MetaUpdate, Pass, roll_up


def communication_update(ir: GraphIR) -> MetaUpdate:
    """Scope ``comm_bytes`` and ``collectives`` (the call's own and its callees'); graph
    ``comm_bytes``, ``collective_count``, ``comm_by_group`` (mesh dim -> bytes) and
    ``collectives_by_kind`` (``all_reduce`` -> count)."""
    own_bytes: dict[str, float] = {}
    own_count: dict[str, float] = {}
    by_group: dict[str, int] = {}
    by_kind: dict[str, int] = {}
    for n in ir.nodes:
        facts = n.meta.get("collective")
        kind = collective_kind(n.target)
        if n.kind != "op" or kind is None or not isinstance(facts, dict):
            continue
        size = facts.get("bytes")
        size = size if isinstance(size, int) and not isinstance(size, bool) else 0
        own_bytes[n.scope] = own_bytes.get(n.scope, 0) + size
        own_count[n.scope] = own_count.get(n.scope, 0) + 1
        group = str(facts.get("group", "?"))
        by_group[group] = by_group.get(group, 0) + size
        by_kind[kind] = by_kind.get(kind, 0) + 1
    if not own_count:
        return MetaUpdate()
    total_bytes, total_count = roll_up(ir, own_bytes), roll_up(ir, own_count)
    scopes: dict[str, dict[str, Any]] = {
        s.id: {"comm_bytes": int(total_bytes[s.id]), "collectives": int(total_count[s.id])} for s in ir.scopes
    }
    graph = {
        "comm_bytes": sum(by_group.values()),
        "collective_count": sum(by_kind.values()),
        "comm_by_group": dict(sorted(by_group.items())),
        "collectives_by_kind": dict(sorted(by_kind.items())),
    }
    return MetaUpdate(scopes=scopes, graph=graph)


PASS = Pass(
    "communication",
    communication_update,
    scope_keys=frozenset({"comm_bytes", "collectives"}),
    graph_keys=frozenset({"comm_bytes", "collective_count", "comm_by_group", "collectives_by_kind"}),
)
