"""The decisions table: each place Python read a tensor's value, and which ways it went
(``--decisions``, ``Graph.decisions()``)."""

from __future__ import annotations

from torchatlas._ir import GraphIR
from torchatlas._text import to_ascii, visible
from torchatlas._view import LINE_LIMIT, decisions, op_display, read_outcome, short_source

_WHAT = {
    "item": ".item()", "tolist": ".tolist()", "int": "int()", "float": "float()", "complex": "complex()",
    "index": "index", "print": "print", "numpy": "to numpy", "count": "size",
}


def decision_table(ir: GraphIR, ascii: bool = False) -> str:
    """One row per source line and statement that read a tensor's value into Python, in the
    order they first ran: the line, the statement (``if``, ``while``, ``break``, ``.item()``),
    the outcomes counted (``went on ×3, broke ×1``) and the op whose value it read."""
    rows: dict[tuple[str, str], tuple[list[str], str]] = {}
    for node in ir.nodes:
        for read in decisions(node):
            where = short_source(read.source) if read.source is not None else "?"
            what = read.statement if read.how == "bool" and read.statement else _WHAT.get(read.how, "bool")
            outcomes, _ = rows.setdefault((where, what), ([], op_display(node)))
            outcomes.append(read_outcome(read) or "read")
    sized = sum(1 for n in ir.ops() if n.meta.get("size_only"))
    if not rows:
        text = "decisions: no tensor value was read into Python" + (f" (size only: {sized} op(s))" if sized else "") + "\n"
        return to_ascii(text) if ascii else text
    reads = sum(len(outcomes) for outcomes, _ in rows.values())
    header = f"decisions: {len(rows)} place(s) Python read a tensor's value, {reads} read(s)"
    if sized:
        header += f"; size only: {sized} op(s)"
    table = [("where", "what", "outcomes", "op")]
    for (where, what), (outcomes, op) in rows.items():
        counted = {o: outcomes.count(o) for o in dict.fromkeys(outcomes)}
        shown = ", ".join(o if n == 1 else f"{o} ×{n}" for o, n in counted.items())
        table.append((where, what, shown, op))
    widths = [max(len(row[i]) for row in table) for i in range(3)]
    lines = [header] + [
        visible("  " + "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:3])) + "  " + row[3], LINE_LIMIT)
        for row in table
    ]
    text = "\n".join(line.rstrip() for line in lines) + "\n"
    return to_ascii(text) if ascii else text
