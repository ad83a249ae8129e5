"""Timing and memory helpers shared by the benchmarks.

A tool's cost is reported as a ratio to a plain forward pass of the same model
in the same process, measured alternately (forward, tool, forward, tool...) so
that drift in CPU clock or cache state hits both sides alike.
"""

from __future__ import annotations

import gc
import resource
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


@dataclass(frozen=True)
class Alternated:
    baseline_s: float
    """Median time of the baseline (plain forward pass)."""
    candidate_s: float
    """Median time of the candidate (the tool)."""
    ratio: float
    """Median of the per-round ratios candidate / baseline."""
    rounds: int


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    gc.collect()
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def rounds_for(per_round_s: float, budget_s: float, lo: int = 3, hi: int = 15) -> int:
    """How many alternating rounds fit in ``budget_s``, clamped to ``[lo, hi]``."""
    if per_round_s <= 0:
        return hi
    return max(lo, min(hi, int(budget_s / per_round_s)))


def alternate(baseline: Callable[[], Any], candidate: Callable[[], Any], rounds: int) -> Alternated:
    """Time both callables ``rounds`` times, swapping which goes first each round."""
    base, cand, ratios = [], [], []
    for i in range(rounds):
        if i % 2 == 0:
            b, _ = timed(baseline)
            c, _ = timed(candidate)
        else:
            c, _ = timed(candidate)
            b, _ = timed(baseline)
        base.append(b)
        cand.append(c)
        ratios.append(c / b if b > 0 else float("inf"))
    return Alternated(statistics.median(base), statistics.median(cand), statistics.median(ratios), rounds)


def _status_kb(field: str) -> int | None:
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def rss_mb() -> float:
    kb = _status_kb("VmRSS")
    return (kb or 0) / 1024


def peak_rss_mb() -> float:
    """Peak resident memory since start or since the last :func:`reset_peak_rss`."""
    kb = _status_kb("VmHWM")
    if kb is None:
        kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kb / 1024


def reset_peak_rss() -> bool:
    """Restart the peak-RSS counter (Linux ``clear_refs`` 5); False where that is not possible."""
    try:
        _CLEAR_REFS.write_text("5")
        return True
    except OSError:
        return False
