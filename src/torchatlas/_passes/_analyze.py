"""Every pass at once: the pass registry."""

from __future__ import annotations

from dataclasses import replace

from torchatlas._ir import GraphIR
from torchatlas._passes import (
    _breaks,
    _comm,
    _deadcode,
    _failures,
    _flops,
    _memory,
    _numerics,
    _params,
    _repeats,
    _shapes,
)
from torchatlas._passes._common import MetaUpdate, Pass

PASSES: tuple[Pass, ...] = (
    _params.PASS, _shapes.PASS, _flops.PASS, _memory.PASS, _repeats.PASS, _deadcode.PASS, _numerics.PASS,
    _breaks.PASS, _failures.PASS, _comm.PASS,
)
"""What :func:`analyze` runs, in order. A new analysis is one module defining a ``Pass`` and one line here."""

ANALYZED_KEY = "analyzed"
"""Graph meta key :func:`analyze` sets, so callers can skip analysing twice."""


def analyze(ir: GraphIR) -> GraphIR:
    """Run every pass (parameters, shapes, FLOPs, memory, repeats, dead code).

    Same result as applying the passes one after another, with one copy of the graph.
    """
    update = MetaUpdate(graph={ANALYZED_KEY: True})
    for p in PASSES:
        update.merge(p.update(ir))
    return update.apply(ir)


def ensure_analyzed(ir: GraphIR) -> GraphIR:
    """``ir`` itself if :func:`analyze` already ran on it, else the analysed copy."""
    return ir if ir.meta.get(ANALYZED_KEY) else analyze(ir)


def strip_analyses(ir: GraphIR) -> GraphIR:
    """``ir`` without any analysis result: what a loaded document says it computed is not trusted."""
    node_keys = frozenset().union(*(p.node_keys for p in PASSES))
    scope_keys = frozenset().union(*(p.scope_keys for p in PASSES))
    graph_keys = frozenset().union(*(p.graph_keys for p in PASSES)) | {ANALYZED_KEY}

    def keep(meta: dict, drop: frozenset[str]) -> dict:
        return {k: v for k, v in meta.items() if k not in drop}

    return GraphIR(
        scopes=[replace(s, meta=keep(s.meta, scope_keys)) for s in ir.scopes],
        nodes=[replace(n, meta=keep(n.meta, node_keys)) for n in ir.nodes],
        meta=keep(ir.meta, graph_keys),
    )
