"""Activation memory: bytes of every value and the peak held at once in execution order.

A value is live from the op that allocates it until the last op that reads it or any
view of it. Views and in-place writes allocate nothing (they reuse their argument's
storage). Model inputs count as activations; parameters, buffers and constants do not
(``parameters`` reports those).
"""

from __future__ import annotations

from typing import Any

from torchatlas._ir import GraphIR, TensorMeta
from torchatlas._passes._common import MetaUpdate, Pass, roll_up, storage_roots, tensor_bytes
from torchatlas._passes._params import state_bytes

_ACTIVATION_KINDS = frozenset({"input", "op"})


def memory(ir: GraphIR) -> GraphIR:
    """Annotate nodes with ``bytes`` and scopes with ``activation_bytes`` (allocated inside, inclusive).

    Graph meta gains ``activation_bytes`` (all allocations), ``peak_activation_bytes``,
    ``peak_activation_node`` and ``peak_activation_scope`` (where the peak is reached),
    ``param_bytes``/``buffer_bytes`` and ``bytes_unknown`` (values of unknown dtype, left out);
    with DTensor values, ``activation_bytes_per_rank`` (scopes too) and
    ``peak_activation_bytes_per_rank``: what one rank holds.
    """
    return memory_update(ir).apply(ir)


def memory_update(ir: GraphIR) -> MetaUpdate:
    """The meta :func:`memory` adds, not yet applied."""
    nodes = ir.nodes
    position = {n.id: i for i, n in enumerate(nodes)}
    roots = storage_roots(ir)
    node_meta: dict[str, dict[str, Any]] = {}
    allocated = [0] * len(nodes)
    sharded = any(m.placements for n in nodes for m in n.outputs)
    allocated_here = [0] * len(nodes)  # on this rank: a DTensor's local part
    unknown = 0
    for i, n in enumerate(nodes):
        sizes = [tensor_bytes(m) for m in n.outputs]
        if any(b is None for b in sizes):
            unknown += 1
        size = sum(b for b in sizes if b is not None)
        node_meta[n.id] = {"bytes": size}
        if n.kind in _ACTIVATION_KINDS and roots[i] == i:
            allocated[i] = size
            if sharded:
                allocated_here[i] = sum(_local_bytes(m) for m in n.outputs)

    # A storage dies after the last read of any value that shares it.
    last_use = list(range(len(nodes)))
    for i, n in enumerate(nodes):
        for ref in n.inputs:
            root = roots[position[ref.node]]
            last_use[root] = max(last_use[root], i)
        last_use[roots[i]] = max(last_use[roots[i]], i)
    peak, peak_at = _peak(allocated, last_use)
    inclusive = _per_scope(ir, allocated)
    param_bytes, buffer_bytes = state_bytes(ir)
    graph = {
        "activation_bytes": sum(allocated),
        "peak_activation_bytes": peak,
        "peak_activation_node": nodes[peak_at].id if peak_at is not None else None,
        "peak_activation_scope": nodes[peak_at].scope if peak_at is not None else None,
        "param_bytes": param_bytes,
        "buffer_bytes": buffer_bytes,
        "bytes_unknown": unknown,
    }
    scope_meta = {s.id: {"activation_bytes": int(inclusive[s.id])} for s in ir.scopes}
    if sharded:
        here = _per_scope(ir, allocated_here)
        for s in ir.scopes:
            scope_meta[s.id]["activation_bytes_per_rank"] = int(here[s.id])
        graph["activation_bytes_per_rank"] = sum(allocated_here)
        graph["peak_activation_bytes_per_rank"] = _peak(allocated_here, last_use)[0]
    return MetaUpdate(node_meta, scope_meta, graph)


def _peak(allocated: list[int], last_use: list[int]) -> tuple[int, int | None]:
    """The most bytes live at once, and the position where that is reached."""
    frees: dict[int, int] = {}
    for i, size in enumerate(allocated):
        if size:
            frees[last_use[i]] = frees.get(last_use[i], 0) + size
    live = peak = 0
    peak_at: int | None = None
    for i in range(len(allocated)):
        live += allocated[i]
        if live > peak:
            peak, peak_at = live, i
        live -= frees.get(i, 0)
    return peak, peak_at


def _per_scope(ir: GraphIR, allocated: list[int]) -> dict[str, float]:
    own: dict[str, float] = {}
    for i, n in enumerate(ir.nodes):
        if allocated[i] and n.kind == "op":
            own[n.scope] = own.get(n.scope, 0) + allocated[i]
    return roll_up(ir, own)


def _local_bytes(meta: TensorMeta) -> int:
    """Bytes this rank holds of a value: a DTensor's local part, else all of it."""
    size = tensor_bytes(meta) or 0
    numel = meta.numel()
    return size * meta.local_numel() // numel if meta.placements and numel else size


PASS = Pass(
    "memory",
    memory_update,
    node_keys=frozenset({"bytes"}),
    scope_keys=frozenset({"activation_bytes", "activation_bytes_per_rank"}),
    graph_keys=frozenset(
        {
            "activation_bytes", "peak_activation_bytes", "peak_activation_node", "peak_activation_scope",
            "param_bytes", "buffer_bytes", "bytes_unknown", "activation_bytes_per_rank",
            "peak_activation_bytes_per_rank",
        }
    ),
)
