"""How far one op output is from another, read from two fingerprints (``trace(fingerprint=True)``).

A fingerprint holds an output's statistics, its values at fixed positions and a hash. The
errors are measured over the sampled positions (all of them for an output of at most
``SAMPLE`` elements, or one kept whole), and the statistics bound the rest from below:
``|max a - max b|``, ``|min a - min b|``, ``|mean a - mean b|`` and ``|‖a‖ - ‖b‖| / √n`` are
each at most ``max |a - b|``, so a difference the sample misses still shows in ``max abs``.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

Metric = Callable[[Sequence[float], Sequence[float]], float]


@dataclass(frozen=True)
class Errors:
    """One output against another."""

    off: bool
    """Past the tolerance: some element ``|b - a| > atol + rtol·|a|`` (or a bound says so)."""
    max_abs: float
    max_rel: float
    cosine: float
    metric: float | None = None
    exact: bool = False
    """Bit for bit equal (the same hash and dtype)."""
    note: str = ""


EQUAL = Errors(False, 0.0, 0.0, 1.0, exact=True)


def errors(fa: dict[str, Any], fb: dict[str, Any], atol: float, rtol: float, metric: Metric | None) -> Errors:
    """``fb`` against ``fa`` (the reference)."""
    if fa.get("count") != fb.get("count"):
        return Errors(True, math.inf, math.inf, 0.0, note=f"{fa.get('count')} elements against {fb.get('count')}")
    if fa.get("hash") == fb.get("hash") and fa.get("dtype") == fb.get("dtype"):
        return EQUAL if metric is None else Errors(False, 0.0, 0.0, 1.0, metric=0.0, exact=True)
    a = [float(v) for v in fa.get("sample", [])]  # a non-finite value is kept as "nan", "inf" or "-inf"
    b = [float(v) for v in fb.get("sample", [])]
    if len(a) != len(b):
        return Errors(True, math.inf, math.inf, 0.0, note="the samples differ in length")
    off, max_abs, max_rel, dot, norm_a, norm_b = _sampled(a, b, atol, rtol)
    for key in ("min", "max"):  # an element of each run: the same test as the sample's
        x, y = fa.get(key), fb.get(key)
        if isinstance(x, (int, float)) and isinstance(y, (int, float)):
            d = abs(x - y)
            max_abs = max(max_abs, d)
            off = off or d > atol + rtol * abs(x)
    count = fa.get("count") or 1
    for key, scale in (("mean", 1.0), ("norm", math.sqrt(count))):
        x, y = fa.get(key), fb.get(key)
        if isinstance(x, (int, float)) and isinstance(y, (int, float)):
            max_abs = max(max_abs, abs(x - y) / scale)
    for key in ("nan", "inf"):
        if (fa.get(key) or 0) != (fb.get(key) or 0):
            off, max_abs, max_rel = True, math.inf, math.inf
    cosine = dot / math.sqrt(norm_a * norm_b) if norm_a and norm_b else (1.0 if norm_a == norm_b else 0.0)
    value = metric(a, b) if metric is not None else None
    note = "" if off or max_abs else "not bit for bit equal, though every sampled value is"
    return Errors(off, max_abs, max_rel, cosine, metric=value, note=note)


def _sampled(a: list[float], b: list[float], atol: float, rtol: float) -> tuple[bool, float, float, float, float, float]:
    """Over the two samples: past the tolerance, max abs, max rel, and the dot product and
    squared norms of the finite pairs. A pair with a NaN or Inf is off unless both are the same."""
    unlike = False
    if not (all(map(math.isfinite, a)) and all(map(math.isfinite, b))):
        unlike = any(not ((x != x and y != y) or x == y) for x, y in zip(a, b) if not (math.isfinite(x) and math.isfinite(y)))
        finite = [(x, y) for x, y in zip(a, b) if math.isfinite(x) and math.isfinite(y)]
        a, b = [x for x, _ in finite], [y for _, y in finite]
    # whole-list builtins, not one loop step per value: a thousand values per op, a thousand ops
    gaps = list(map(abs, map(operator.sub, a, b)))
    off = unlike or any(d > atol + rtol * abs(x) for d, x in zip(gaps, a))
    max_abs = math.inf if unlike else max(gaps, default=0.0)
    max_rel = math.inf if unlike else max((d / abs(x) if x else math.inf for d, x in zip(gaps, a) if d), default=0.0)
    dot = sum(map(operator.mul, a, b))
    return off, max_abs, max_rel, dot, sum(map(operator.mul, a, a)), sum(map(operator.mul, b, b))


def worst(found: list[Errors]) -> Errors:
    """One op's errors over its outputs: the worst of each."""
    if len(found) == 1:
        return found[0]
    metrics = [e.metric for e in found if e.metric is not None]
    return Errors(
        any(e.off for e in found), max(e.max_abs for e in found), max(e.max_rel for e in found),
        min(e.cosine for e in found), max(metrics) if metrics else None, all(e.exact for e in found),
        "; ".join(e.note for e in found if e.note),
    )
