"""What the web page says of a graph, decided here so that it reads as the tree, the summary
and the diagram do: every number in its one spelling, every shape, every fold's name and
totals, the graph's counts. ``_render/_html`` puts these words in the page document; the
viewer (``web/src``) lays them out and formats no graph fact of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from torchatlas._ir import GraphIR, TensorMeta
from torchatlas._text import format_bytes, format_compact, format_duration, format_shape, format_si
from torchatlas._view._labels import fold_name, relative_name, scope_name, shape_text
from torchatlas._view._options import STATE_KINDS, ViewOptions
from torchatlas._view._units import fold_runs, fold_totals


def _count(value: Any) -> str:
    return f"{value:,}"


METRIC_WORDS: dict[str, Callable[[Any], str]] = {
    "f": format_si,  # FLOPs, as the summary writes them: 653.32K
    "params": format_compact,  # parameters, as the diagram writes them: 7.1B
    "ab": format_bytes,  # bytes: 1.50 KiB, 0.98 GiB
    "tu": format_duration,  # time: 812 µs, 3.40 ms
    "ctu": format_duration,
    "nf": _count,  # ops with NaN/Inf outputs
}
"""Page metric key -> the one spelling of that quantity in every output."""


def metric_words(values: Mapping[str, Any]) -> dict[str, str]:
    """``{"f": 653320, "ab": 1024}`` -> ``{"f": "653.32K", "ab": "1.00 KiB"}`` for the keys the page colours by."""
    return {key: METRIC_WORDS[key](value) for key, value in values.items() if key in METRIC_WORDS and value is not None}


def params_text(count: int) -> str:
    """``7.1B (7,100,000,000)``: a parameter count short, then in full."""
    return f"{format_compact(count)} ({count:,})"


@dataclass(frozen=True)
class ShapeWords:
    """How the page writes one tensor."""

    shape: str
    """``2×10×96``, with the dtype where it is not the graph's main one (``1×16 int64``); a 0-d
    tensor is ``scalar``: an edge's label and a box's subtitle, as the tree and diagram write it."""
    full: str
    """``2×10×96  float32  cpu``: a tooltip's and the details panel's line."""


def shape_words(meta: TensorMeta, dominant: str | None = None) -> ShapeWords:
    return ShapeWords(shape_text(meta, dominant), f"{format_shape(meta.shape)}  {meta.dtype}  {meta.device}")


def nonfinite_words(nan: int, inf: int) -> str:
    """``NaN×3 Inf×1``: the non-finite counts of an op's outputs (zeros left out)."""
    return " ".join(f"{name}×{format_compact(n)}" for name, n in (("NaN", nan), ("Inf", inf)) if n)


@dataclass(frozen=True)
class PageFold:
    """A run of identical sibling calls the page folds to one ``×N`` box: the one fold rule
    (``fold_runs``), so the page folds what the tree and the diagram fold."""

    members: list[str]
    """The members' scope ids, in call order."""
    name: str
    """``layers.0–79`` below its caller's path; a loop calling one module: its path alone
    (``block``), as in the tree, the summary and the diagram."""
    totals: dict[str, int | float] = field(default_factory=dict)
    """The run's numbers (page metric keys), as the repeats pass totalled them (``repeat_groups``)."""
    words: dict[str, str] = field(default_factory=dict)
    """``totals`` as every output writes them."""


_PAGE_KEYS = {"flops": "f", "params": "params", "activation_bytes": "ab", "time_us": "tu", "cuda_time_us": "ctu", "nonfinite_ops": "nf"}
"""The repeats pass's run totals (scope meta keys) -> the page's metric keys."""


def page_folds(ir: GraphIR) -> dict[str, PageFold]:
    """First member's scope id -> its run, for every run the outputs fold, with the totals
    the repeats pass wrote for it (``repeat_groups``' ``totals``)."""
    folds: dict[str, PageFold] = {}
    for first, member_ids in fold_runs(ir).items():
        members = [ir.scope(sid) for sid in member_ids]
        found = fold_totals(ir, first)
        totals = {page: found[key] for key, page in _PAGE_KEYS.items() if _number(found.get(key))}
        parent = ir.scope(members[0].parent).path if members[0].parent is not None else ""
        folds[first] = PageFold(member_ids, relative_name(fold_name(members), parent), totals, metric_words(totals))
    return folds


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value and abs(value) != float("inf")


def call_name(ir: GraphIR, scope_id: str, model: str) -> str:
    """A module call's box name below its caller's path, ``#k`` for a repeated call
    (``layers.0``, ``fc#1``; the model's title for its own call): the summary's and the diagram's."""
    scope = ir.scope(scope_id)
    parent = ir.scope(scope.parent).path if scope.parent is not None and ir.has_scope(scope.parent) else ""
    return relative_name(scope_name(scope, model), parent)


@dataclass(frozen=True)
class GraphCounts:
    """How big a graph is, as ``repr(graph)`` and the page's status line say it."""

    ops: int
    calls: int
    """Module calls, the model's own included (``len(ir.scopes)``)."""

    @property
    def text(self) -> str:
        """``1,234 ops · 32 module calls``."""
        return f"{self.ops:,} op{'s' if self.ops != 1 else ''} · {self.calls:,} module call{'s' if self.calls != 1 else ''}"


def graph_counts(ir: GraphIR) -> GraphCounts:
    return GraphCounts(sum(1 for _ in ir.ops()), len(ir.scopes))


def page_view(options: ViewOptions) -> dict[str, Any]:
    """The page's first view from the one set of view options: which node kinds it hides
    (the diagram's rule, ``ViewOptions.hidden_kinds``; the params switch shows them), which
    kinds are a module's state (an op's box lists the weights it reads), whether
    runs start folded, how deep calls start open (None: as deep as fits the window) and
    which way values flow (ELK's ``DOWN`` or ``RIGHT``)."""
    return {
        "hidden": sorted(options.hidden_kinds()),
        "state": sorted(STATE_KINDS),
        "fold": options.fold_repeats,
        "depth": options.depth,
        "direction": "RIGHT" if options.direction == "LR" else "DOWN",
    }
