"""Every pass at once."""

from __future__ import annotations

from torchatlas._ir import GraphIR
from torchatlas._passes._common import MetaUpdate
from torchatlas._passes._deadcode import dead_code_update
from torchatlas._passes._flops import flops_update
from torchatlas._passes._memory import memory_update
from torchatlas._passes._params import parameters_update
from torchatlas._passes._repeats import find_repeats_update
from torchatlas._passes._shapes import io_shapes_update

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
