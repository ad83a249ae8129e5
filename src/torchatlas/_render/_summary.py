"""The summary table: one row per module call with shapes, parameters, FLOPs and memory.

``fmt="rich"`` draws a box table with rich (fixed width, so the text is the same on
a terminal and in a file; ``color=True`` adds ANSI styles), ``"text"`` aligned plain
columns, ``"markdown"`` a pipe table. Module names come from user code and are
escaped for each format.
"""

from __future__ import annotations

import io
import re
import textwrap
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from torchatlas._ir import GraphIR, Scope, TensorMeta
from torchatlas._text import (
    format_bytes,
    format_compact,
    format_count,
    format_duration,
    format_shapes,
    format_si,
    markdown_text,
    visible,
)
from torchatlas._view import (
    LINE_LIMIT,
    STATE_KINDS,
    OverlayMarks,
    ViewOptions,
    dominant_dtype,
    fold_runs,
    fold_totals,
    number_text,
    overlay_marks,
    relative_name,
    run_label,
    run_words,
    shape_list,
)

SummaryFormat = Literal["rich", "text", "markdown"]

COLUMNS: tuple[str, ...] = (
    "Module",
    "Input shapes",
    "Output shapes",
    "Params",
    "Trainable",
    "Param bytes",
    "FLOPs",
    "MACs",
    "Activations",
    "% FLOPs",
)
BREAKS_COLUMN = "Graph breaks"
"""On graphs from ``compile_report``: breaks inside each call."""
TIME_COLUMNS = ("Time", "% Time")
"""On graphs traced with ``profile=True``: each call's inclusive CPU time and its share of the model's."""
DEVICE_TIME_COLUMNS = ("CUDA time", "% CUDA")
"""On graphs profiled on CUDA: each call's inclusive device time (its kernels') and its share."""
_TIME_KEYS = {"Time": "time_us", "% Time": "time_us", "CUDA time": "cuda_time_us", "% CUDA": "cuda_time_us"}
NUMERICS_COLUMNS = ("Output range", "NaN/Inf ops")
"""On graphs traced with ``stats=True``: the min and max of each call's (first) output, and
how many of its ops made a NaN or Inf."""
DISTRIBUTED_COLUMNS = ("Params/rank", "FLOPs/rank", "Comm", "Collectives")
"""On distributed models: the parameters each rank holds, and what each call's collectives move."""
_NUMERIC = frozenset(
    (*COLUMNS[3:], BREAKS_COLUMN, *TIME_COLUMNS, *DEVICE_TIME_COLUMNS, NUMERICS_COLUMNS[1], *DISTRIBUTED_COLUMNS)
)
# Which columns a narrow terminal keeps, most wanted first; the first group before longer names.
# The per-rank columns a distributed trace exists for go last of all.
_FIRST = (*DISTRIBUTED_COLUMNS, "Output shapes", "Params", "FLOPs", BREAKS_COLUMN, "CUDA time", "Time", "NaN/Inf ops")
_THEN = (
    "Input shapes", "% FLOPs", "% CUDA", "% Time", "Output range", "Activations", "MACs", "Trainable", "Param bytes",
)
GLOBAL_COUNTS = ("FLOPs", "MACs")
"""Columns titled ``(global)`` beside ``FLOPs/rank``: each op at its global size, what the
unsharded model computes, where ``FLOPs/rank`` counts what this rank computes."""
_MIN_MODULE = 24
_WANT_MODULE = 40
_CLASS_PART = re.compile(r"(.*\()([^()]*)(\)[^()]*)")


def summary_columns(ir: GraphIR) -> tuple[str, ...]:
    """:data:`COLUMNS`, then the columns this graph has numbers for."""
    extra: list[str] = []
    if "graph_breaks" in ir.meta:
        extra.append(BREAKS_COLUMN)
    if any(isinstance(s.meta.get("time_us"), (int, float)) for s in ir.scopes):
        extra += TIME_COLUMNS
    if _device_timed(ir):
        extra += DEVICE_TIME_COLUMNS
    if any("output_stats" in s.meta for s in ir.scopes):
        extra += NUMERICS_COLUMNS
    if "param_count_per_rank" in ir.meta:
        extra.append(DISTRIBUTED_COLUMNS[0])
    if "flops_per_rank" in ir.meta:
        extra.append(DISTRIBUTED_COLUMNS[1])
    if "comm_bytes" in ir.meta:
        extra += DISTRIBUTED_COLUMNS[2:]
    extra += [name for name in overlay_marks(ir).names if name not in COLUMNS and name not in extra]
    return (*COLUMNS, *extra)


def _device_timed(ir: GraphIR) -> bool:
    return any(isinstance(s.meta.get("cuda_time_us"), (int, float)) for s in ir.scopes)


@dataclass(frozen=True)
class Row:
    depth: int
    cells: tuple[str, ...]
    """Cell texts in :func:`summary_columns` order; the module cell is not yet escaped or indented."""
    time_us: float = 0.0
    """The call's inclusive time, for ``sort="time"``: the device time where the graph has one."""


def _group_count(count: int, each: str, total: str, narrow: bool) -> str:
    """``218.0M ×80 = 17.4B`` for a folded run (``run_words``); ``narrow``: the per-call number
    alone, ``218.0M ×80``."""
    return f"{each} ×{count}" if narrow and each not in ("-", "", "0") else run_words(count, each, total)


def _owned(owners: list[dict[str, Any]], total: Any, show: Callable[[Any], str], narrow: bool, key: str) -> str:
    """A parameter column of a folded run: one module's number ×N and the run's total (the
    repeats pass's; ``?`` where a member has no number)."""
    return _group_count(len(owners), show(owners[0].get(key) or 0), "?" if total is None else show(total), narrow)


def summary_rows(
    ir: GraphIR, depth: int | None = None, fold_repeats: bool = True, sort: str | None = None, narrow: bool = False
) -> tuple[list[Row], Row]:
    """The module-call rows (calls deeper than ``depth`` left out; a run of identical calls
    one row when ``fold_repeats``) and the totals row; ``ir`` is analysed. ``sort="time"``:
    every call, flat, with its full name, hottest first (by device time on a graph profiled on
    CUDA). ``narrow``: for a terminal too
    small for every column: counts compact (``70.6B``), folded runs per call only, no
    notes beside the totals."""

    def count(value: object) -> str:
        """A parameter count as every output writes it (``1.2M``, the diagram's ``1.2M params``)."""
        counted = isinstance(value, int) and not isinstance(value, bool)
        return format_compact(value) if counted else format_count(value)  # type: ignore[arg-type]

    shapes_shown = 2 if narrow else 3  # a terminal too small for every column: the first two, then +N
    dominant = dominant_dtype(ir)
    total_flops = ir.meta.get("flops") or 0
    columns = summary_columns(ir)
    time_key = "cuda_time_us" if _device_timed(ir) else "time_us"
    runs = fold_runs(ir) if fold_repeats else {}
    hidden = {sid for run in runs.values() for sid in run[1:]}
    rows: list[Row] = []
    depths: dict[str, int] = {}
    for s in ir.scopes:
        d = depths[s.id] = 0 if s.parent is None else depths[s.parent] + 1
        if s.parent in hidden:
            hidden.add(s.id)  # inside a folded member: its first member's rows stand for it
        if s.id in hidden or (depth is not None and d > depth):
            continue
        m = _forward_numbers(s.meta)
        flops = m.get("flops")
        unknown = "+?" if m.get("flops_unknown") else ""
        run = [ir.scope(sid).meta for sid in runs.get(s.id, [])]
        within = ir.scope(s.parent).path if s.parent is not None else ""
        label, params, flops_text = s.label, count(m.get("params")), format_si(flops) + unknown
        trainable, param_bytes = count(m.get("trainable_params")), format_bytes(m.get("param_bytes"))
        macs_text = format_si(m.get("macs")) + unknown
        activations = format_bytes(m.get("activation_bytes"))
        if run:
            last = ir.scope(runs[s.id][-1])
            label = run_label(ir, s, last, len(run))
            # Calls of one shared module own one set of parameters, not one per call.
            owners = list({ir.scope(sid).path: ir.scope(sid).meta for sid in runs[s.id]}.values())
            totals = fold_totals(ir, s.id)  # the repeats pass's sums: every output shows the same
            if len(owners) > 1:
                params = _owned(owners, totals.get("params"), format_compact, narrow, "params")
                trainable = _owned(owners, totals.get("trainable_params"), format_compact, narrow, "trainable_params")
                param_bytes = _owned(owners, totals.get("param_bytes"), format_bytes, narrow, "param_bytes")
            flops = totals.get("flops", flops)
            flops_text = _group_count(len(run), flops_text, format_si(flops) + unknown, narrow)
            macs_text = _group_count(len(run), macs_text, format_si(totals.get("macs", m.get("macs"))) + unknown, narrow)
            # every member allocates its own: one member's ×N, as the FLOPs beside it
            activations = _group_count(len(run), activations, format_bytes(totals.get("activation_bytes")), narrow)
        if sort is None:
            label = relative_name(label, within)  # indented under its parent: the parent's path is known
        share = f"{100 * flops / total_flops:.1f}%" if isinstance(flops, int) and total_flops else "-"
        members = [ir.scope(sid) for sid in runs.get(s.id, [s.id])]
        numbers = fold_totals(ir, s.id) if run else m  # a folded run: the repeats pass's totals
        time_us = t if isinstance(t := numbers.get(time_key), (int, float)) else 0
        rows.append(
            Row(
                0 if sort else d,
                (
                    label,
                    _shapes_cell(m, "input", dominant, shapes_shown),
                    _shapes_cell(m, "output", dominant, shapes_shown),
                    params,
                    trainable,
                    param_bytes,
                    flops_text,
                    macs_text,
                    activations,
                    share,
                    *_runtime_cells(ir, columns, members, numbers),
                ),
                time_us,
            )
        )
    root = next((s for s in ir.scopes if s.parent is None), None)
    if root is not None and "backward_flops" in root.meta and sort is None:  # kept apart, as the tree's ◀ backward
        b = root.meta
        flops_text = format_si(b["backward_flops"]) + ("+?" if b.get("backward_flops_unknown") else "")
        macs_text = format_si(b.get("backward_macs")) + ("+?" if b.get("backward_flops_unknown") else "")
        share = f"{100 * b['backward_flops'] / total_flops:.1f}%" if total_flops else "-"
        rows.append(Row(0, ("◀ backward", "", "", "", "", "", flops_text, macs_text, "", share, *("" for _ in columns[len(COLUMNS) :])), 0))
    g = ir.meta
    shared = g.get("shared_param_count") or 0
    # narrow: the note would widen the column
    params = count(g.get("param_count")) + (f" ({format_count(shared)} shared, counted once)" if shared and not narrow else "")
    unknown_ops = g.get("flops_unknown_ops") or 0
    unknown = "+?" if unknown_ops else ""  # as the model's own row spells it
    totals = Row(
        0,
        (
            "Total" + (f" ({unknown_ops} op{'s' if unknown_ops != 1 else ''} of unknown cost)" if unknown_ops else ""),
            "",
            "",
            params,
            count(g.get("trainable_param_count")),
            format_bytes(g.get("param_bytes")),
            format_si(g.get("flops")) + unknown,
            format_si(g.get("macs")) + unknown,
            f"peak {format_bytes(g.get('peak_activation_bytes'))}",
            "100.0%" if total_flops else "-",
            *_runtime_cells(ir, columns, None, None),
        ),
    )
    if sort == "time":
        rows.sort(key=lambda row: -row.time_us)
    return rows, totals


def _forward_numbers(meta: dict[str, Any]) -> dict[str, Any]:
    """A call's numbers without what its backward ops add (``backward=True``): the backward part
    is its own row, as the tree's ``◀ backward`` section."""
    if "backward_flops" not in meta:
        return meta
    out = dict(meta)
    for key in ("flops", "macs", "flops_unknown"):
        if isinstance(meta.get(key), int) and isinstance(meta.get(f"backward_{key}"), int):
            out[key] = meta[key] - meta[f"backward_{key}"]
    return out


def _shapes_cell(meta: dict[str, Any], which: str, dominant: str | None, limit: int) -> str:
    """``1×16 int64, 1×16×32``: a call's input or output shapes, each with its dtype where it is
    not the graph's dominant one (as the tree and diagram write them); ``-`` for none."""
    shapes, dtypes = meta.get(f"{which}_shapes", []), meta.get(f"{which}_dtypes")
    if not isinstance(dtypes, list) or len(dtypes) != len(shapes):
        return format_shapes(shapes, limit)
    texts = shape_list([TensorMeta(tuple(s), str(d), "") for s, d in zip(shapes, dtypes, strict=True)], dominant)
    if not texts:
        return "-"
    more = f" +{len(texts) - limit}" if len(texts) > limit else ""
    return ", ".join(texts[:limit]) + more


def _runtime_cells(
    ir: GraphIR, columns: tuple[str, ...], members: list[Scope] | None, numbers: Mapping[str, Any] | None
) -> list[str]:
    """The cells after :data:`COLUMNS` for a call or, with ``members`` None, for the totals.
    ``numbers``: the call's meta, or a folded run's totals (``_view.fold_totals``, summed once
    by the repeats pass), where its time and NaN/Inf counts are read; the range is over all members."""
    root = next((s for s in ir.scopes if s.parent is None), None)
    marks = overlay_marks(ir)
    cells: list[str] = []
    for name in columns[len(COLUMNS) :]:
        if name in marks.entries and name not in _NON_OVERLAY:
            cells.append(_overlay_cell(marks, name, members))
        elif name == BREAKS_COLUMN:
            count = sum(m.meta.get("graph_breaks", 0) for m in members) if members is not None else sum(
                1 for b in ir.graph_breaks if b.kind != "recompile"
            )
            cells.append(str(count))
        elif name in _TIME_KEYS:
            key = _TIME_KEYS[name]
            model_time = root.meta.get(key) if root is not None else None
            time = numbers.get(key) if numbers is not None else model_time
            total = time if isinstance(time, (int, float)) else None
            if not name.startswith("%"):
                cells.append(format_duration(total))
            else:
                cells.append(f"{100 * total / model_time:.1f}%" if total is not None and model_time else "-")
        elif name == "Output range":
            cells.append(_output_range(members) if members is not None else "")
        elif name in DISTRIBUTED_COLUMNS:
            key, graph_key, show = _DISTRIBUTED_KEYS[name]
            if members is None:
                cells.append(show(ir.meta.get(graph_key)))
                continue
            # calls of one shared module own one set of parameters, not one per call
            owners = list({m.path: m for m in members}.values()) if name == "Params/rank" else members
            if len(owners) > 1 and show is format_count:  # "106.97M ×80 = 8.56B", as the Params column
                show = format_compact
            total = show(sum(m.meta.get(key) or 0 for m in owners))
            each = show(owners[0].meta.get(key) or 0)
            cells.append(total if len(owners) == 1 else _group_count(len(owners), each, total, False))
        else:
            count = (numbers if numbers is not None else ir.meta).get("nonfinite_ops", 0)
            cells.append(str(count) if count else "-")
    return cells


_NON_OVERLAY = frozenset((BREAKS_COLUMN, *TIME_COLUMNS, *DEVICE_TIME_COLUMNS, *NUMERICS_COLUMNS, *DISTRIBUTED_COLUMNS))


def _overlay_cell(marks: OverlayMarks, name: str, members: list[Scope] | None) -> str:
    """A call's value of overlay ``name`` (a folded run's: its members' largest number, or its
    first member's category); ``-`` where none, "" on the totals row."""
    if members is None:
        return ""
    values = [v for m in members if (v := marks.value(name, m.id)) is not None]
    if not values:
        return "-"
    if marks.entries[name]["kind"] == "number":
        return number_text(max(values))
    return visible(str(values[0]))


_DISTRIBUTED_KEYS: dict[str, tuple[str, str, Callable[[Any], str]]] = {
    "Params/rank": ("params_per_rank", "param_count_per_rank", format_count),
    "FLOPs/rank": ("flops_per_rank", "flops_per_rank", format_si),
    "Comm": ("comm_bytes", "comm_bytes", lambda n: format_bytes(n) if n else "-"),
    "Collectives": ("collectives", "collective_count", lambda n: str(n) if n else "-"),
}


def _output_range(members: list[Scope]) -> str:
    """``[-1.2, 3.4]`` over the first output of each member (``≈[…]`` where a strided sample
    was measured, ``stats="sample"``); ``-`` without numbers."""
    lows, highs, nonfinite, sampled = [], [], 0, False
    for m in members:
        stats = m.meta.get("output_stats")
        first = stats[0] if isinstance(stats, list) and stats else None
        if not isinstance(first, dict):
            continue
        nonfinite += (first.get("nan") or 0) + (first.get("inf") or 0)
        sampled = sampled or "sampled" in first
        if isinstance(first.get("min"), (int, float)) and isinstance(first.get("max"), (int, float)):
            lows.append(first["min"])
            highs.append(first["max"])
    if nonfinite:
        return "NaN/Inf"  # the range of the finite values would hide what matters
    return f"{'≈' if sampled else ''}[{min(lows):.3g}, {max(highs):.3g}]" if lows else "-"


def _titles(columns: tuple[str, ...]) -> list[str]:
    """The header: beside ``FLOPs/rank``, the FLOPs and MACs columns say they count globally."""
    per_rank = DISTRIBUTED_COLUMNS[1] in columns
    return [f"{name} (global)" if per_rank and name in GLOBAL_COUNTS else name for name in columns]


def _cells(columns: tuple[str, ...], rows: list[Row], totals: Row) -> list[list[str]]:
    """Header, rows and totals as escaped text, the module cell indented."""
    lines = [_titles(columns)]
    for row in [*rows, totals]:
        cells = [visible(c, LINE_LIMIT) for c in row.cells]
        lines.append(["  " * row.depth + cells[0], *cells[1:]])
    return lines


def fit_columns(
    columns: tuple[str, ...], lines: list[list[str]], width: int | None, gap: int = 2
) -> tuple[list[int], int]:
    """The column indexes to show (table order) and the module column's width, so that each
    line fits in ``width`` characters; None: every column, nothing cut."""
    widths = [max(len(line[i]) for line in lines) for i in range(len(columns))]
    if width is None:
        return list(range(len(columns))), widths[0]
    # the four wanted columns with a short module column; then the names get room (up to
    # _WANT_MODULE) before any further column
    chosen = [0]
    overlays = tuple(c for c in columns[len(COLUMNS) :] if c not in _FIRST and c not in _THEN)  # graph.overlay's
    for names, module in (((*_FIRST, *overlays), _MIN_MODULE), (_THEN, _WANT_MODULE)):
        used = min(widths[0], module) + sum(widths[i] + gap for i in chosen[1:])
        for name in (n for n in names if n in columns):
            i = columns.index(name)
            if used + gap + widths[i] <= width:
                chosen.append(i)
                used += gap + widths[i]
    others = sum(widths[i] + gap for i in chosen[1:])
    return sorted(chosen), max(8, min(widths[0], width - others))


def _cut(text: str, width: int) -> str:
    """A module cell cut to ``width``: the class name gives way first, so the call's name
    and a fold's ``×80`` stay (``layers.0–79 (LlamaDeco…) ×80``)."""
    if len(text) <= width:
        return text
    parts = _CLASS_PART.fullmatch(text)
    if parts and len(parts[1]) + len(parts[3]) + 2 <= width:
        keep = width - len(parts[1]) - len(parts[3]) - 1
        return parts[1] + parts[2][:keep] + "…" + parts[3]
    return text[: width - 1] + "…"


def summary_table(ir: GraphIR, options: SummaryOptions) -> Table:
    """The summary as a rich renderable, for ``Console.print``: the columns that fit ``options.width``."""
    width = options.width
    rows, totals = summary_rows(ir, options.depth, options.fold_repeats, options.sort, narrow=width is not None)
    columns = summary_columns(ir)
    lines = _cells(columns, rows, totals)
    # rich draws a space at each edge and pads each cell by one on both sides
    shown, module_width = fit_columns(columns, lines, None if width is None else width - 2, gap=3)
    table = Table(box=box.SIMPLE_HEAD, show_footer=False, pad_edge=False)
    for i in shown:
        justify = "right" if columns[i] in _NUMERIC else "left"
        table.add_column(lines[0][i], justify=justify, no_wrap=True, overflow="ellipsis")
    for line in lines[1:-1]:
        table.add_row(*(Text(_cut(line[i], module_width) if i == 0 else line[i]) for i in shown))
    table.add_section()
    table.add_row(*(Text(_cut(lines[-1][i], module_width) if i == 0 else lines[-1][i], style="bold") for i in shown))
    return table


@dataclass(frozen=True)
class SummaryOptions(ViewOptions):
    """What the summary table shows and how; every field is also a keyword of ``Graph.summary``.

    ``depth``: deeper calls are left out; ``fold_repeats``: a run of identical sibling calls
    (``layers.0–79 ×80``) is one row, with per-call and total params and FLOPs, its inside shown once.
    Its rows are module calls, so the fields about drawn nodes are refused (``UNHONOURED``)."""

    UNHONOURED: ClassVar[dict[str, str]] = {
        "expand_leaf_modules": "its rows are module calls, a leaf module's ops are never rows",
        "show_params": "parameters are its Params column, never rows",
        "show_constants": "its rows are module calls, constants are never rows",
        "direction": "a table reads top to bottom",
    }

    format: SummaryFormat = "text"
    """``"rich"`` (a box table), ``"text"`` (aligned plain columns) or ``"markdown"``."""
    width: int | None = None
    """Characters per line: the columns that fit, most wanted first (module, output shapes,
    params, FLOPs, ...), the module names cut with ``…``, nothing wrapped. None: every column."""
    color: bool = False
    """ANSI styles in ``"rich"``."""
    sort: Literal["time"] | None = None
    """``"time"``: every call as one flat list, full names, hottest first (``profile=True`` graphs)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.format not in ("rich", "text", "markdown"):
            raise ValueError(f"unknown summary format {self.format!r}; use 'rich', 'text' or 'markdown'")
        if self.width is not None and (type(self.width) is not int or self.width < 20):
            raise ValueError(f"width must be None or an integer >= 20, not {self.width!r}")
        if self.sort not in (None, "time"):
            raise ValueError(f"sort must be None or 'time', not {self.sort!r}")


def summary(ir: GraphIR, options: SummaryOptions | None = None) -> str:
    """The summary table as a string; ``depth=0`` keeps only the root call.

    A partial trace (the forward pass failed) ends with a line naming the failing op."""
    options = options or SummaryOptions()
    fmt, width, color = options.format, options.width, options.color
    if options.sort == "time" and "Time" not in summary_columns(ir):
        raise ValueError("summary(sort='time') needs a graph traced with profile=True (or torchatlas.profile)")
    if fmt == "rich":
        buffer = io.StringIO()
        console = Console(
            file=buffer, width=width or 10_000, force_terminal=color, color_system="standard" if color else None
        )
        console.print(summary_table(ir, options))
        text = buffer.getvalue()
        if width is None:  # rich pads to the console width: trim what it added
            text = "\n".join(line.rstrip() for line in text.splitlines()) + "\n"
        return text + _hidden_line(ir, options) + _notes(ir)
    narrow = width is not None and fmt == "text"  # markdown has every column whatever the width
    rows, totals = summary_rows(ir, options.depth, options.fold_repeats, options.sort, narrow)
    columns = summary_columns(ir)
    if fmt == "text":
        text = _text_table(columns, rows, totals, width)
        return text + (_shared_line(ir) + _hidden_line(ir, options) if narrow else "") + _notes(ir)
    return _markdown_table(columns, rows, totals) + _notes(ir)


def _notes(ir: GraphIR) -> str:
    return _unregistered_line(ir) + _failure_line(ir)


def _hidden_line(ir: GraphIR, options: SummaryOptions) -> str:
    """Below a narrow table: the columns it left out, so none is dropped silently."""
    if options.width is None:
        return ""
    rows, totals = summary_rows(ir, options.depth, options.fold_repeats, options.sort, narrow=True)
    columns = summary_columns(ir)
    lines = _cells(columns, rows, totals)
    rich = options.format == "rich"
    shown = set(fit_columns(columns, lines, options.width - 2 if rich else options.width, gap=3 if rich else 2)[0])
    hidden = [title for i, title in enumerate(lines[0]) if i not in shown]
    if not hidden:
        return ""
    text = f"Hidden at width {options.width}: {', '.join(hidden)} (a wider terminal, wide=True or --wide shows them)"
    return "\n" + textwrap.fill(visible(text, LINE_LIMIT), options.width, break_on_hyphens=False) + "\n"


def _shared_line(ir: GraphIR) -> str:
    """Below a narrow table, whose Total cell has no room for it: why the rows' parameters add
    up to more than the total (T5's embedding, read by its encoder and its decoder)."""
    shared = ir.meta.get("shared_param_count") or 0
    if not shared:
        return ""
    return "\n" + visible(f"Params: {format_count(shared)} shared between modules, counted once in the total", LINE_LIMIT) + "\n"


def _unregistered_line(ir: GraphIR) -> str:
    """Modules called but not registered with the model (kept in a plain list, made in forward):
    their parameters are not the model's, so optimizers and ``.to()`` never see them."""
    unregistered = {s.path for s in ir.scopes if s.meta.get("unregistered")}
    if not unregistered:
        return ""
    # only those holding state matter: transformers' shared GELUActivation owns nothing to lose
    holders = [n.path.rsplit(".", 1)[0] for n in ir.nodes if n.kind in STATE_KINDS and n.path and "." in n.path]
    paths = list(dict.fromkeys(p for p in holders if p in unregistered))
    if not paths:
        return ""
    shown = ", ".join(paths[:3]) + (f" +{len(paths) - 3}" if len(paths) > 3 else "")
    text = f"⚠ not registered with the model, so their parameters are not counted (nor trained, nor moved by .to()): {shown}"
    return "\n" + visible(text, LINE_LIMIT) + "\n"


def _failure_line(ir: GraphIR) -> str:
    failed = next((n for n in ir.nodes if "error" in n.meta), None)
    if failed is None:
        return ""
    scope = ir.scope(failed.scope)
    where = f" at {failed.source}" if failed.source else ""
    # torchatlas.raise marks a failure outside any op (an assert, a KeyError): no op to name
    at = "" if failed.target == "torchatlas.raise" else f" at {failed.target}"
    text = f"✗ the forward pass failed{at} in {scope.label}{where}: {failed.meta['error']}"
    return "\n" + visible(text, LINE_LIMIT) + "\n"


def _text_table(columns: tuple[str, ...], rows: list[Row], totals: Row, width: int | None) -> str:
    lines = _cells(columns, rows, totals)
    shown, module_width = fit_columns(columns, lines, width)
    lines = [[_cut(line[0], module_width), *line[1:]] for line in lines]
    widths = {i: max(len(line[i]) for line in lines) for i in shown}

    def render(cells: list[str]) -> str:
        parts = [cells[i].rjust(widths[i]) if columns[i] in _NUMERIC else cells[i].ljust(widths[i]) for i in shown]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * widths[i] for i in shown)
    out = [render(lines[0]), rule, *(render(line) for line in lines[1:-1]), rule, render(lines[-1])]
    return "\n".join(out) + "\n"


def _markdown_table(columns: tuple[str, ...], rows: list[Row], totals: Row) -> str:
    out = [
        "| " + " | ".join(_titles(columns)) + " |",
        "|" + "|".join("---:" if name in _NUMERIC else "---" for name in columns) + "|",
    ]
    for row in rows:
        cells = [markdown_text(c[:LINE_LIMIT]) for c in row.cells]
        out.append("| " + " | ".join(["&nbsp;&nbsp;" * row.depth + cells[0], *cells[1:]]) + " |")
    out.append("| " + " | ".join(f"**{markdown_text(c[:LINE_LIMIT])}**" if c else "" for c in totals.cells) + " |")
    return "\n".join(out) + "\n"
