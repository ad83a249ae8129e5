"""The summary table: one row per module call with shapes, parameters, FLOPs and memory.

``fmt="rich"`` draws a box table with rich (fixed width, so the text is the same on
a terminal and in a file; ``color=True`` adds ANSI styles), ``"text"`` aligned plain
columns, ``"markdown"`` a pipe table. Module names come from user code and are
escaped for each format.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Literal

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from torchatlas._ir import GraphIR
from torchatlas._text import format_bytes, format_count, format_shapes, format_si, markdown_text, visible

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
"""Added after :data:`COLUMNS` on graphs from ``compile_report``: breaks inside each call."""
_NUMERIC = frozenset((*COLUMNS[3:], BREAKS_COLUMN))


def _columns(totals: Row) -> tuple[str, ...]:
    return COLUMNS if len(totals.cells) == len(COLUMNS) else (*COLUMNS, BREAKS_COLUMN)


def _with_breaks(ir: GraphIR, rows: list[Row], totals: Row) -> tuple[list[Row], Row]:
    """The graph-breaks column, on graphs that have one (``compile_report``)."""
    if "graph_breaks" not in ir.meta:
        return rows, totals
    by_label = {s.label: s.meta.get("graph_breaks", 0) for s in ir.scopes}
    rows = [Row(r.depth, (*r.cells, str(by_label.get(r.cells[0], 0)))) for r in rows]
    total = sum(1 for b in ir.graph_breaks if b.kind != "recompile")
    return rows, Row(totals.depth, (*totals.cells, str(total)))


@dataclass(frozen=True)
class Row:
    depth: int
    cells: tuple[str, ...]
    """Cell texts in :data:`COLUMNS` order; the module cell is not yet escaped or indented."""


def summary_rows(ir: GraphIR, depth: int | None = None) -> tuple[list[Row], Row]:
    """The module-call rows (calls deeper than ``depth`` left out) and the totals row; ``ir`` is analysed."""
    total_flops = ir.meta.get("flops") or 0
    rows: list[Row] = []
    depths: dict[str, int] = {}
    for s in ir.scopes:
        d = depths[s.id] = 0 if s.parent is None else depths[s.parent] + 1
        if depth is not None and d > depth:
            continue
        m = s.meta
        flops = m.get("flops")
        unknown = "+?" if m.get("flops_unknown") else ""
        share = f"{100 * flops / total_flops:.1f}%" if isinstance(flops, int) and total_flops else "-"
        rows.append(
            Row(
                d,
                (
                    s.label,
                    format_shapes(m.get("input_shapes", [])),
                    format_shapes(m.get("output_shapes", [])),
                    format_count(m.get("params")),
                    format_count(m.get("trainable_params")),
                    format_bytes(m.get("param_bytes")),
                    format_si(flops) + unknown,
                    format_si(m.get("macs")) + unknown,
                    format_bytes(m.get("activation_bytes")),
                    share,
                ),
            )
        )
    g = ir.meta
    shared = g.get("shared_param_count") or 0
    params = format_count(g.get("param_count")) + (f" ({shared} shared, counted once)" if shared else "")
    unknown_ops = g.get("flops_unknown_ops") or 0
    totals = Row(
        0,
        (
            "Total" + (f" ({unknown_ops} ops of unknown cost)" if unknown_ops else ""),
            "",
            "",
            params,
            format_count(g.get("trainable_param_count")),
            format_bytes(g.get("param_bytes")),
            format_si(g.get("flops")),
            format_si(g.get("macs")),
            f"peak {format_bytes(g.get('peak_activation_bytes'))}",
            "100.0%" if total_flops else "-",
        ),
    )
    return _with_breaks(ir, rows, totals)


def summary_table(ir: GraphIR, depth: int | None = None) -> Table:
    """The summary as a rich renderable, for ``Console.print``."""
    rows, totals = summary_rows(ir, depth)
    table = Table(box=box.SIMPLE_HEAD, show_footer=False, pad_edge=False)
    for name in _columns(totals):
        table.add_column(name, justify="right" if name in _NUMERIC else "left", overflow="fold")
    for row in rows:
        module = Text("  " * row.depth + visible(row.cells[0]))
        table.add_row(module, *(Text(visible(c)) for c in row.cells[1:]))
    table.add_section()
    table.add_row(*(Text(visible(c), style="bold") for c in totals.cells))
    return table


@dataclass(frozen=True)
class SummaryOptions:
    """What the summary table shows and how; every field is also a keyword of ``Graph.summary``."""

    depth: int | None = None
    """Module nesting to list (the model is depth 0); deeper calls are left out. None: all."""
    format: SummaryFormat = "text"
    """``"rich"`` (a box table), ``"text"`` (aligned plain columns) or ``"markdown"``."""
    width: int = 160
    """Characters per line for ``"rich"``."""
    color: bool = False
    """ANSI styles in ``"rich"``."""

    def __post_init__(self) -> None:
        if self.format not in ("rich", "text", "markdown"):
            raise ValueError(f"unknown summary format {self.format!r}; use 'rich', 'text' or 'markdown'")
        if self.depth is not None and (type(self.depth) is not int or self.depth < 0):
            raise ValueError(f"depth must be None or an integer >= 0, not {self.depth!r}")


def summary(ir: GraphIR, options: SummaryOptions | None = None) -> str:
    """The summary table as a string; ``depth=0`` keeps only the root call.

    A partial trace (the forward pass failed) ends with a line naming the failing op."""
    options = options or SummaryOptions()
    depth, fmt, width, color = options.depth, options.format, options.width, options.color
    if fmt == "rich":
        buffer = io.StringIO()
        console = Console(file=buffer, width=width, force_terminal=color, color_system="standard" if color else None)
        console.print(summary_table(ir, depth))
        return buffer.getvalue() + _failure_line(ir)
    rows, totals = summary_rows(ir, depth)
    if fmt == "text":
        return _text_table(rows, totals) + _failure_line(ir)
    return _markdown_table(rows, totals) + _failure_line(ir)


def _failure_line(ir: GraphIR) -> str:
    failed = next((n for n in ir.nodes if "error" in n.meta), None)
    if failed is None:
        return ""
    scope = ir.scope(failed.scope)
    where = f" at {failed.source}" if failed.source else ""
    text = f"✗ the forward pass failed at {failed.target} in {scope.label}{where}: {failed.meta['error']}"
    return "\n" + visible(text) + "\n"


def _text_table(rows: list[Row], totals: Row) -> str:
    columns = _columns(totals)
    lines = [list(columns)]
    for row in [*rows, totals]:
        cells = [visible(c) for c in row.cells]
        lines.append(["  " * row.depth + cells[0], *cells[1:]])
    widths = [max(len(line[i]) for line in lines) for i in range(len(columns))]

    def render(cells: list[str]) -> str:
        parts = [c.rjust(w) if name in _NUMERIC else c.ljust(w) for c, w, name in zip(cells, widths, columns)]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * w for w in widths)
    out = [render(lines[0]), rule, *(render(line) for line in lines[1:-1]), rule, render(lines[-1])]
    return "\n".join(out) + "\n"


def _markdown_table(rows: list[Row], totals: Row) -> str:
    columns = _columns(totals)
    out = [
        "| " + " | ".join(columns) + " |",
        "|" + "|".join("---:" if name in _NUMERIC else "---" for name in columns) + "|",
    ]
    for row in rows:
        cells = [markdown_text(c) for c in row.cells]
        out.append("| " + " | ".join(["&nbsp;&nbsp;" * row.depth + cells[0], *cells[1:]]) + " |")
    out.append("| " + " | ".join(f"**{markdown_text(c)}**" if c else "" for c in totals.cells) + " |")
    return "\n".join(out) + "\n"
