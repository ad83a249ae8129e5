"""Analyses over a :class:`~torchatlas._ir.GraphIR`.

Each pass returns a new graph with its results merged into node, scope and graph
``meta`` (see ``docs/analyses.md`` for every key), so all renderers can show them.
"""

from __future__ import annotations

from torchatlas._passes._analyze import PASSES, analyze, ensure_analyzed, strip_analyses
from torchatlas._passes._common import Pass
from torchatlas._passes._compare import OpComparison, RunComparison, Unmatched, compare_runs, error_value, op_label
from torchatlas._passes._deadcode import dead_code
from torchatlas._passes._diff import GraphDiff, ScopeChange, diff
from torchatlas._passes._flops import flops
from torchatlas._passes._memory import memory
from torchatlas._passes._numerics import first_nonfinite
from torchatlas._passes._params import parameters
from torchatlas._passes._ranks import check_ranks, expert_loads, rank_differences, rank_of
from torchatlas._passes._repeats import find_repeats, structural_hashes
from torchatlas._passes._shapes import io_shapes

__all__ = [
    "PASSES",
    "GraphDiff",
    "OpComparison",
    "Pass",
    "RunComparison",
    "ScopeChange",
    "Unmatched",
    "analyze",
    "check_ranks",
    "expert_loads",
    "compare_runs",
    "dead_code",
    "diff",
    "ensure_analyzed",
    "error_value",
    "find_repeats",
    "first_nonfinite",
    "flops",
    "io_shapes",
    "memory",
    "op_label",
    "parameters",
    "rank_differences",
    "rank_of",
    "strip_analyses",
    "structural_hashes",
]
