"""Analyses over a :class:`~torchatlas._ir.GraphIR`.

Each pass returns a new graph with its results merged into node, scope and graph
``meta`` (see ``docs/analyses.md`` for every key), so all renderers can show them.
"""

from __future__ import annotations

from torchatlas._ir import GraphIR
from torchatlas._passes._common import MetaUpdate
from torchatlas._passes._deadcode import dead_code, dead_code_update
from torchatlas._passes._diff import GraphDiff, ScopeChange, diff
from torchatlas._passes._flops import flops, flops_update
from torchatlas._passes._memory import memory, memory_update
from torchatlas._passes._params import parameters, parameters_update
from torchatlas._passes._repeats import find_repeats, find_repeats_update, structural_hashes
from torchatlas._passes._shapes import io_shapes, io_shapes_update

_UPDATES = (parameters_update, io_shapes_update, flops_update, memory_update, find_repeats_update, dead_code_update)
"""What :func:`analyze` runs, in order. Each reads only capture facts, so they share one input."""

ANALYZED_KEY = "analyzed"
"""Graph meta key :func:`analyze` sets, so callers can skip analysing twice."""


def analyze(ir: GraphIR) -> GraphIR:
    """Run every pass: parameters, shapes, FLOPs, memory, repeats, dead code.

    Same result as applying the passes one after another, with one copy of the graph.
    """
    update = MetaUpdate(graph={ANALYZED_KEY: True})
    for collect in _UPDATES:
        update.merge(collect(ir))
    return update.apply(ir)


def ensure_analyzed(ir: GraphIR) -> GraphIR:
    """``ir`` itself if :func:`analyze` already ran on it, else the analysed copy."""
    return ir if ir.meta.get(ANALYZED_KEY) else analyze(ir)


__all__ = [
    "GraphDiff",
    "ScopeChange",
    "analyze",
    "dead_code",
    "diff",
    "ensure_analyzed",
    "find_repeats",
    "flops",
    "io_shapes",
    "memory",
    "parameters",
    "structural_hashes",
]
