"""Dead code: ops whose results never reach a graph output.

Liveness flows backwards from the output nodes through ``inputs``. An in-place
write is live when a later live op reads what it wrote (capture makes such reads
point at the writing op). Writes into a parameter, buffer or model input are
side effects on state that outlives the call (running statistics, caches), so
they are live even when nothing reads them afterwards. A collective that sends without
receiving (``send``) is live: its effect is on another rank. The buffer a live ``out=``
call (or a collective) writes into is needed: what allocated it is live. A capture cut
short by an exception has no outputs to reach, so nothing in it is judged dead.

A value read into Python (``if t:``, ``t.item()``, capture's node meta ``reads``) decided
what ran next, so it is live like an output. A value only its size was read of (``x.shape``,
or a shape-only argument such as ``zeros_like(y)``'s) is not unused either: it is marked
``size_only``, as are the ops that only fed it.
"""

from __future__ import annotations

from typing import Any

from torchatlas._ir import GraphIR
from torchatlas._passes._common import MetaUpdate, Pass, storage_roots

_STATE_KINDS = frozenset({"param", "buffer", "input"})


def dead_code(ir: GraphIR) -> GraphIR:
    """Set ``node.meta["dead"]`` on every op (True when its result reaches no output and was
    never read into Python) and ``node.meta["size_only"]`` (True when only its size was read).

    Graph meta gains ``dead_op_count`` (None for a capture that failed part-way).
    """
    return dead_code_update(ir).apply(ir)


def dead_code_update(ir: GraphIR) -> MetaUpdate:
    """The meta :func:`dead_code` adds, not yet applied."""
    nodes = ir.nodes
    if any("error" in n.meta for n in nodes):
        return MetaUpdate(graph={"dead_op_count": None})
    position = {n.id: i for i, n in enumerate(nodes)}
    roots = storage_roots(ir)
    live = [False] * len(nodes)
    sized = [False] * len(nodes)
    for i, n in enumerate(nodes):
        reads = n.meta.get("reads")
        if n.kind == "output" or (n.inplace and nodes[roots[i]].kind in _STATE_KINDS):
            live[i] = True
        elif not n.outputs and "collective" in n.meta:
            live[i] = True
        elif reads:
            live[i] = any(r.get("as") != "size" for r in reads)
            sized[i] = not live[i]
    for i in range(len(nodes) - 1, -1, -1):
        if live[i]:
            for ref in nodes[i].inputs:
                live[position[ref.node]] = True
            if nodes[i].inplace:  # the buffer it writes into (out=): what allocated it is needed
                for ref in nodes[i].shape_inputs:
                    live[position[ref.node]] = True
        if live[i] or sized[i]:
            for ref in nodes[i].shape_inputs:
                sized[position[ref.node]] = True
        if sized[i]:
            for ref in nodes[i].inputs:
                sized[position[ref.node]] = True
    node_meta: dict[str, dict[str, Any]] = {}
    dead = 0
    for i, n in enumerate(nodes):
        if n.kind == "op":
            unused = not live[i] and not sized[i]
            node_meta[n.id] = {"dead": unused, "size_only": sized[i] and not live[i]}
            dead += unused
    return MetaUpdate(nodes=node_meta, graph={"dead_op_count": dead})


PASS = Pass("dead_code", dead_code_update, node_keys=frozenset({"dead", "size_only"}), graph_keys=frozenset({"dead_op_count"}))
