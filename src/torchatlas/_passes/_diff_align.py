"""Aligning two op sequences: the least-cost edit script between the steps left in a pair
of matched calls, or, for long ones, ``difflib`` over runs of one op (linear in a long run)."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from torchatlas._ir import Ref


@dataclass
class Step:
    """One step of a call's op sequence: an op, a chain of indexing ops, or a decomposed
    ``linear`` (``t`` of a weight and ``addmm``/``mm``, as ATen records it)."""

    nodes: list[str]
    """Its ops in execution order; the last one makes the step's result."""
    key: tuple[Any, ...]
    """(op, input shapes and dtypes, output shapes and dtypes, in place): what the alignment compares."""
    name: str
    """The op it computes, spelled the same eagerly and in ATen (``normal_name``)."""
    sources: list[Ref]
    """The values it reads from outside itself, read through pass-through copies."""
    main: str
    """The op that names it: the first of a chain, the ``addmm`` of a linear."""


_EDIT_CELLS = 40_000
"""Leftovers up to this many (a × b) are aligned by least edits; longer ones by ``difflib``."""


def align(a_steps: list[Step], b_steps: list[Step]) -> tuple[list[tuple[Step, Step]], list[Step], list[Step]]:
    """Pairs of steps that line up, and the ones left on each side."""
    if len(a_steps) * len(b_steps) <= _EDIT_CELLS:
        return _least_edits(a_steps, b_steps)
    return _by_difflib(a_steps, b_steps)


def _cost(x: Step, y: Step) -> float:
    """Of taking ``y`` for ``x``: nothing for the same op on the same shapes, less than dropping one and
    adding the other (2) for the same op on other shapes or another op on the same shapes."""
    if x.key == y.key:
        return 0.0
    if x.name == y.name:
        return 0.5
    return 1.0 if x.key[1:] == y.key[1:] else 1.9


def _least_edits(a_steps: list[Step], b_steps: list[Step]) -> tuple[list[tuple[Step, Step]], list[Step], list[Step]]:
    """The alignment with the least cost (Levenshtein, substitutions weighed by ``_cost``): of two
    alike ops in ``a`` and one in ``b``, the change is one op changed, not one dropped and one added."""
    n, k = len(a_steps), len(b_steps)
    cost = [[0.0] * (k + 1) for _ in range(n + 1)]
    for i in range(1, n + 1):
        cost[i][0] = float(i)
    for j in range(1, k + 1):
        cost[0][j] = float(j)
    for i in range(1, n + 1):
        row, prev, x = cost[i], cost[i - 1], a_steps[i - 1]
        for j in range(1, k + 1):
            row[j] = min(prev[j - 1] + _cost(x, b_steps[j - 1]), prev[j] + 1.0, row[j - 1] + 1.0)
    pairs: list[tuple[Step, Step]] = []
    only_a: list[Step] = []
    only_b: list[Step] = []
    i, j = n, k
    while i > 0 or j > 0:
        if i > 0 and j > 0 and cost[i][j] == cost[i - 1][j - 1] + _cost(a_steps[i - 1], b_steps[j - 1]):
            pairs.append((a_steps[i - 1], b_steps[j - 1]))
            i, j = i - 1, j - 1
        elif i > 0 and cost[i][j] == cost[i - 1][j] + 1.0:
            only_a.append(a_steps[i - 1])
            i -= 1
        else:
            only_b.append(b_steps[j - 1])
            j -= 1
    return pairs[::-1], only_a[::-1], only_b[::-1]


def _by_difflib(a_steps: list[Step], b_steps: list[Step]) -> tuple[list[tuple[Step, Step]], list[Step], list[Step]]:
    pairs: list[tuple[Step, Step]] = []
    only_a: list[Step] = []
    only_b: list[Step] = []

    def pair(xa: list[Step], xb: list[Step]) -> None:
        n = min(len(xa), len(xb))
        pairs.extend(zip(xa[:n], xb[:n]))
        only_a.extend(xa[n:])
        only_b.extend(xb[n:])

    for tag, sa, sb in _run_opcodes(a_steps, b_steps, lambda s: s.key):
        if tag == "equal":
            pair(sa, sb)
            continue
        for inner, xa, xb in _run_opcodes(sa, sb, lambda s: s.name):
            if inner in ("equal", "replace"):  # same op with other shapes, or another op in its place
                pair(xa, xb)
            else:
                only_a.extend(xa)
                only_b.extend(xb)
    return pairs, only_a, only_b


def _run_opcodes(
    a: list[Step], b: list[Step], key: Callable[[Step], Any]
) -> Iterator[tuple[str, list[Step], list[Step]]]:
    """difflib's opcodes over runs of steps of one key: (tag, a's steps, b's steps), an ``equal``
    per pair of runs (their lengths may differ). difflib is quadratic in a long run of one
    element (a chain of 6,000 ``relu``); a run is one element here."""
    runs_a, runs_b = _runs(a, key), _runs(b, key)
    matcher = difflib.SequenceMatcher(None, [k for k, _ in runs_a], [k for k, _ in runs_b], autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            for (_, run_a), (_, run_b) in zip(runs_a[i1:i2], runs_b[j1:j2]):
                yield tag, run_a, run_b
        else:
            yield tag, [s for _, run in runs_a[i1:i2] for s in run], [s for _, run in runs_b[j1:j2] for s in run]


def _runs(steps: list[Step], key: Callable[[Step], Any]) -> list[tuple[Any, list[Step]]]:
    runs: list[tuple[Any, list[Step]]] = []
    for step in steps:
        k = key(step)
        if runs and runs[-1][0] == k:
            runs[-1][1].append(step)
        else:
            runs.append((k, [step]))
    return runs
