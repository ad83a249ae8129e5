"""Reading a pass-through's call site in its source file (``_passthrough``): which variable a
tuple assignment stores a call in, where a call's arguments are."""

from __future__ import annotations

import ast
import linecache
from typing import Any

Span = tuple[int, int, int, int]
"""(line, column, end line, end column) of code; columns count UTF-8 bytes, as ``ast`` does."""


def tuple_target(code: Any, call: tuple[int, int, int, int]) -> str | None:
    """The variable an assignment of tuples (``q, k = f(q), g(k)``) stores the call at ``call`` in."""
    lines = linecache.getlines(code.co_filename)
    try:
        tree = ast.parse("".join(lines))
    except (SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Assign) and node.lineno <= call[0] <= (node.end_lineno or 0)):
            continue
        target, value = node.targets[0], node.value
        if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) and len(target.elts) == len(value.elts):
            for name, item in zip(target.elts, value.elts):
                span = (item.lineno, item.col_offset, item.end_lineno, item.end_col_offset)
                if span == call and isinstance(name, ast.Name):
                    return name.id
    return None


def argument_spans(code: Any, call: tuple[int, int, int, int], arguments: tuple[tuple[int, ...], tuple[str, ...]]) -> list[tuple[int, int, int, int]]:
    """The spans of the arguments ``arguments`` of the call at ``call`` in ``code``'s file; empty
    when the call cannot be read so (``*args``, a source that does not parse)."""
    lines = linecache.getlines(code.co_filename)
    if not lines or call[2] > len(lines):
        return []
    segment = _segment(lines, call)
    wrapped = "(" + segment + ")" if call[0] != call[2] else segment
    try:
        node = ast.parse(wrapped, mode="eval").body
    except (SyntaxError, ValueError):
        return []
    if not isinstance(node, ast.Call) or any(isinstance(a, ast.Starred) for a in node.args):
        return []
    positions, names = arguments
    chosen = [a for k, a in enumerate(node.args) if k in positions]
    chosen += [kw.value for kw in node.keywords if kw.arg in names]
    return [_shift(call, call[0] != call[2], a) for a in chosen]


def _segment(lines: list[str], span: tuple[int, int, int, int]) -> str:
    """The source at ``span`` (columns count UTF-8 bytes, as in code positions and ``ast``)."""
    line, col, end_line, end_col = span
    if line == end_line:
        return lines[line - 1].encode()[col:end_col].decode()
    middle = "".join(lines[line : end_line - 1])
    return lines[line - 1].encode()[col:].decode() + middle + lines[end_line - 1].encode()[:end_col].decode()


def _shift(call: tuple[int, int, int, int], wrapped: bool, node: ast.expr) -> tuple[int, int, int, int]:
    """A node's span in the file, from its span in the parsed source of ``call``."""

    def at(lineno: int, col: int) -> tuple[int, int]:
        if lineno == 1:
            return call[0], call[1] + col - (1 if wrapped else 0)
        return call[0] + lineno - 1, col

    start, end = at(node.lineno, node.col_offset), at(node.end_lineno or node.lineno, node.end_col_offset or 0)
    return start[0], start[1], end[0], end[1]
