"""Graph breaks per module call: how many of ``compile_report``'s breaks fall inside each call."""

from __future__ import annotations

from torchatlas._ir import GraphIR
from torchatlas._passes._common import MetaUpdate, Pass


def breaks_update(ir: GraphIR) -> MetaUpdate:
    """``scope.meta["graph_breaks"]``: the graph breaks inside the call and the calls it made
    (recompiles not counted); only on graphs from ``compile_report``."""
    if "graph_breaks" not in ir.meta:
        return MetaUpdate()
    counts = {s.id: 0 for s in ir.scopes}
    for brk in ir.graph_breaks:
        if brk.kind != "recompile" and brk.scope is not None and ir.has_scope(brk.scope):
            for sid in ir.ancestry(brk.scope):
                counts[sid] += 1
    return MetaUpdate(scopes={sid: {"graph_breaks": n} for sid, n in counts.items()})


PASS = Pass("breaks", breaks_update, scope_keys=frozenset({"graph_breaks"}))
