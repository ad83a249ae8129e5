"""What the page shows of overlays and of compared runs (``torchatlas.compare``).

Every box carries its overlays' values and words (``ov``, ``ovw``) and where compare marked it,
what that mark means for drawing (``ovs``: the first divergence, an op that diverges, one that
inherits). An op of the first run of a comparison carries a table (``cmp``): a column per run,
the first run's first, and a row per field: the op, its outputs, the status against the first
run and the errors. The cells that differ are listed (``cmph``): an op or output unlike the
first run's, a status past the tolerance, the errors of an op past it.

The table is read from the first run's graph: ``meta["compared_runs"]`` (every run's label) and
each op's ``meta["compared"]`` (its partner in each later run), which ``torchatlas.compare``
writes (``docs/format.md``).
"""

from __future__ import annotations

import math
from typing import Any

from torchatlas._ir import GraphIR, Node
from torchatlas._ops import op_name
from torchatlas._text import visible

from ._document import PageCompared, PageView
from ._overlays import OverlayMarks, number_text

FIELDS = ("op", "outputs", "status", "max abs", "max rel", "cosine")
_OFF = frozenset({"diverges", "inherits"})
"""Statuses past the tolerance: their errors are cells that differ."""
_APART = _OFF | {"not compared", "no partner"}


def with_fill(view: PageView, marks: OverlayMarks, fill: str | None) -> PageView:
    """The first view filled by the number overlay ``fill`` (``HtmlOptions.fill``), if given."""
    if fill is None:
        return view
    if marks.fill_name(fill) and marks.entries[fill]["kind"] != "number":
        raise ValueError(f"the page fills by numbers: overlay {fill!r} is a category")
    view.fill = f"ov:{fill}"
    return view


def overlay_fields(marks: OverlayMarks, item_id: str) -> dict[str, Any]:
    """``ov``, ``ovw`` and ``ovs``: the values of the graph's overlays at an op or call, their
    words, and what compare's marks among them say of it."""
    values = {name: v for name in marks.names if (v := marks.value(name, item_id)) is not None}
    if not values:
        return {}
    words = {name: number_text(v) if marks.entries[name]["kind"] == "number" else visible(str(v)) for name, v in values.items()}
    found: dict[str, Any] = {"ov": values, "ovw": words}
    if state := marks.divergence(item_id):
        found["ovs"] = state
    return found


def compared_runs(ir: GraphIR) -> PageCompared | None:
    """The runs a comparison's table has a column for, and its rows; None for a graph compared with none."""
    labels = ir.meta.get("compared_runs")
    if not isinstance(labels, list) or len(labels) < 2:
        return None
    return PageCompared(runs=[visible(str(label)) for label in labels], fields=list(FIELDS))


def compared_fields(node: Node, runs: int) -> dict[str, Any]:
    """``cmp`` and ``cmph``: an op's table over ``runs`` runs (``PageNode``), or {} where it has none."""
    partners = node.meta.get("compared")
    if node.kind != "op" or runs < 2 or not isinstance(partners, list):
        return {}
    mine = [op_name(node.target), _outputs([[list(m.shape), m.dtype] for m in node.outputs]), "first run", "", "", ""]
    columns = [mine] + [["", "", "no partner", "", "", ""] for _ in range(runs - 1)]
    for row in partners:
        if isinstance(row, dict) and isinstance(row.get("run"), int) and 0 < row["run"] < runs:
            columns[row["run"]] = _column(row)
    hot = [
        [run, field]
        for run, column in enumerate(columns[1:], start=1)
        for field in range(len(FIELDS))
        if _differs(field, column, mine)
    ]
    return {"cmp": columns, "cmph": hot or None}


def _column(row: dict[str, Any]) -> list[str]:
    status = str(row.get("status", ""))
    cosine = row.get("cosine")
    cosine_words = f"{cosine:.6g}" if isinstance(cosine, (int, float)) and math.isfinite(cosine) else _number(cosine)
    return [op_name(row.get("target")), _outputs(row.get("outputs")), status, _number(row.get("max_abs")),
            _number(row.get("max_rel")), cosine_words]


def _differs(field: int, column: list[str], mine: list[str]) -> bool:
    status = column[2]
    if FIELDS[field] in ("op", "outputs"):
        return status != "no partner" and column[field] != mine[field]
    if FIELDS[field] == "status":
        return status in _APART
    return status in _OFF and column[field] != ""


def _outputs(outputs: Any) -> str:
    """``5×16 float32``, one per output: what a column says of an op's outputs."""
    if not isinstance(outputs, list):
        return ""
    words = []
    for item in outputs:
        if isinstance(item, list) and len(item) == 2:
            shape, dtype = item
            words.append(f"{'×'.join(str(size) for size in shape) or 'scalar'} {str(dtype).replace('torch.', '')}")
    return ", ".join(words)


def _number(value: Any) -> str:
    if isinstance(value, str):  # the saved NaN or Inf
        return value
    return number_text(value) if isinstance(value, (int, float)) and math.isfinite(value) else ""
