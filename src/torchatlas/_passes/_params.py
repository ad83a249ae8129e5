"""Parameter counts per module call, with shared (tied) parameters counted once.

The list comes from ``ir.meta["parameters"]`` (every parameter of the model, used or
not, each shared tensor listed once with its other names in ``shared_with``). Graphs
saved without it fall back to the parameter nodes the forward pass read, which are
all taken as trainable.
"""

from __future__ import annotations

import math
from typing import Any

from torchatlas._ir import GraphIR
from torchatlas._passes._common import MetaUpdate, Pass, dtype_bytes


def _entries(ir: GraphIR, key: str, kind: str) -> list[dict[str, Any]]:
    listed = ir.meta.get(key)
    if isinstance(listed, list):
        return [e for e in listed if isinstance(e, dict) and "path" in e]
    seen: dict[str, dict[str, Any]] = {}
    for n in ir.nodes:
        if n.kind == kind and n.path and n.outputs and n.path not in seen:
            m = n.outputs[0]
            seen[n.path] = {"path": n.path, "shape": list(m.shape), "dtype": m.dtype, "requires_grad": True}
    return list(seen.values())


def _numel(entry: dict[str, Any]) -> int:
    return math.prod(s if isinstance(s, int) else 1 for s in entry.get("shape", []))


def _local_numel(entry: dict[str, Any]) -> int:
    """Elements this rank holds: a sharded (DTensor) parameter's local shard, else all of it."""
    local = entry.get("local_shape")
    if not isinstance(local, list):
        return _numel(entry)
    return math.prod(s if isinstance(s, int) else 1 for s in local)


def _local_bytes(entry: dict[str, Any]) -> int:
    return int(_local_numel(entry) * (dtype_bytes(str(entry.get("dtype", ""))) or 0))


def _bytes(entry: dict[str, Any]) -> int:
    return int(_numel(entry) * (dtype_bytes(str(entry.get("dtype", ""))) or 0))


def _module_prefixes(path: str) -> list[str]:
    """``a.b.weight`` -> ``["a", "a.b"]``: the modules that own a parameter."""
    parts = path.split(".")
    return [".".join(parts[:k]) for k in range(1, len(parts))]


def state_bytes(ir: GraphIR) -> tuple[int, int]:
    """Total bytes of parameters and of buffers, each shared tensor once."""
    return (
        sum(_bytes(e) for e in _entries(ir, "parameters", "param")),
        sum(_bytes(e) for e in _entries(ir, "buffers", "buffer")),
    )


def parameters(ir: GraphIR) -> GraphIR:
    """Annotate each scope with ``params``, ``trainable_params`` and ``param_bytes`` (and, for a
    model with sharded DTensor parameters, ``params_per_rank`` and ``param_bytes_per_rank``: what
its local shards hold).

    A module call owns the parameters under its path (the root owns all); a tied
    parameter counts once in every module that reaches it under any of its names.
    Graph meta gains ``param_count``, ``trainable_param_count``, ``param_bytes``,
    ``shared_param_count`` (tensors with more than one name, counted once),
    ``buffer_count`` and ``buffer_bytes`` (and ``param_count_per_rank``, ``param_bytes_per_rank`` when sharded).
    """
    return parameters_update(ir).apply(ir)


def parameters_update(ir: GraphIR) -> MetaUpdate:
    """The meta :func:`parameters` adds, not yet applied."""
    params = _entries(ir, "parameters", "param")
    buffers = _entries(ir, "buffers", "buffer")
    sharded = any("local_shape" in e for e in params)
    by_module: dict[str, list[int]] = {}  # module path -> [params, trainable, bytes, params on this rank]
    for e in params:
        numel, size = _numel(e), _bytes(e)
        trainable = numel if e.get("requires_grad", True) else 0
        owners: set[str] = set()
        for name in [e["path"], *e.get("shared_with", [])]:
            owners.update(_module_prefixes(str(name)))
        for owner in owners:
            totals = by_module.setdefault(owner, [0, 0, 0, 0, 0])
            totals[0] += numel
            totals[1] += trainable
            totals[2] += size
            totals[3] += _local_numel(e)
            totals[4] += _local_bytes(e)
    all_params = [
        sum(_numel(e) for e in params),
        sum(_numel(e) for e in params if e.get("requires_grad", True)),
        sum(_bytes(e) for e in params),
        sum(_local_numel(e) for e in params),
        sum(_local_bytes(e) for e in params),
    ]
    scope_meta = {}
    for s in ir.scopes:
        count, trainable, size, local, local_size = all_params if s.path == "" else by_module.get(s.path, [0] * 5)
        scope_meta[s.id] = {"params": count, "trainable_params": trainable, "param_bytes": size}
        if sharded:
            scope_meta[s.id].update(params_per_rank=local, param_bytes_per_rank=local_size)
    graph = {
        "param_count": all_params[0],
        "trainable_param_count": all_params[1],
        "param_bytes": all_params[2],
        "shared_param_count": sum(1 for e in params if e.get("shared_with")),
        "buffer_count": sum(_numel(e) for e in buffers),
        "buffer_bytes": sum(_bytes(e) for e in buffers),
    }
    if sharded:
        graph.update(param_count_per_rank=all_params[3], param_bytes_per_rank=all_params[4])
    return MetaUpdate(scopes=scope_meta, graph=graph)


PASS = Pass(
    "parameters",
    parameters_update,
    scope_keys=frozenset({"params", "trainable_params", "param_bytes", "params_per_rank", "param_bytes_per_rank"}),
    graph_keys=frozenset(
        {
            "param_count", "trainable_param_count", "param_bytes", "shared_param_count", "buffer_count",
            "buffer_bytes", "param_count_per_rank", "param_bytes_per_rank",
        }
    ),
)
