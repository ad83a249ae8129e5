"""Failed calls: the module calls that hold the op a partial trace stopped at.

A capture whose forward pass raised keeps what ran, and the op that failed carries
``node.meta["error"]``. Every output marks the calls around it (``✗ failed here`` on a
closed box, ``✗ FAILED inside`` on a collapsed tree line), so the rule is decided once.
"""

from __future__ import annotations

from torchatlas._ir import GraphIR
from torchatlas._passes._common import MetaUpdate, Pass


def failed_calls_update(ir: GraphIR) -> MetaUpdate:
    """``scope.meta["failed"] = True`` on every call holding an op with ``meta["error"]``."""
    failed = {sid for n in ir.nodes if "error" in n.meta for sid in ir.ancestry(n.scope)}
    return MetaUpdate(scopes={sid: {"failed": True} for sid in failed})


PASS = Pass("failures", failed_calls_update, scope_keys=frozenset({"failed"}))
