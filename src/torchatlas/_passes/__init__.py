"""Analyses over a :class:`~torchatlas._ir.GraphIR`.

Each pass returns a new graph with its results merged into node, scope and graph
``meta`` (see ``docs/analyses.md`` for every key), so all renderers can show them.
"""

from __future__ import annotations

from torchatlas._ir import GraphIR
from torchatlas._passes._deadcode import dead_code
from torchatlas._passes._diff import GraphDiff, ScopeChange, diff
from torchatlas._passes._flops import flops
from torchatlas._passes._memory import memory
from torchatlas._passes._params import parameters
from torchatlas._passes._repeats import find_repeats, structural_hashes
from torchatlas._passes._shapes import io_shapes

PASSES = (parameters, io_shapes, flops, memory, find_repeats, dead_code)
"""What :func:`analyze` runs, in order."""

ANALYZED_KEY = "analyzed"
"""Graph meta key :func:`analyze` sets, so callers can skip analysing twice."""


def analyze(ir: GraphIR) -> GraphIR:
    """Run every pass: parameters, shapes, FLOPs, memory, repeats, dead code."""
    for run in PASSES:
        ir = run(ir)
    return ir.with_meta(graph={ANALYZED_KEY: True})


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
