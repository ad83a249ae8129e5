"""Which statement a value read into Python decided, and which way it went, from the
statement's syntax: the user's file is parsed (``ast``) and the read found in it by the source
span of the instruction that read it (``co_positions``), so a trailing comment, a slice colon
or a condition over several lines read as Python reads them.

``if a and b:`` reads ``a``, then ``b`` only if ``a`` was true: each operand is a read of its
own. The read after which Python knew the answer is the statement's (its value: whether the
body ran, ``not`` counted); a read that left it open is its ``and``/``or``'s, with the operand's
truth.
"""

from __future__ import annotations

import ast
import dis
import inspect
import linecache
import textwrap
import tokenize
import types
from dataclasses import dataclass
from functools import lru_cache

Span = tuple[int, int, int, int]
"""(line, column, end line, end column) of an expression, columns in UTF-8 bytes as both
``ast`` and ``co_positions`` count them."""

# An instruction that tests its operand's truth: the operand is the instruction before it.
_TRUTH_TESTS = ("POP_JUMP", "JUMP_IF_", "TO_BOOL", "UNARY_NOT")
_SCOPES = (ast.comprehension, ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


@dataclass(frozen=True, slots=True)
class Place:
    """Where in its statement a read happened: the ``not``/``and``/``or`` it went through, outermost
    last (``("and", True)``: an ``and`` it is the last operand of), and the statement whose test
    the whole expression is (``if``, ``while``, ``assert``, ``break``, ``continue``), else None."""

    steps: tuple[tuple[str, bool], ...]
    statement: str | None

    def decide(self, value: bool) -> tuple[str | None, bool]:
        """(statement, value) of a read of truth ``value``: the statement and whether its body ran
        where this read settled it; else the ``and``/``or`` that went on to its next operand and
        this operand's truth; else (None, value)."""
        truth = value
        for op, last in self.steps:
            if op == "not":
                truth = not truth
            elif not last and truth == (op == "and"):
                return op, truth  # ``a and …`` with a true: the next operand decides
        return (self.statement, truth) if self.statement is not None else (None, value)


def read_span(
    code: types.CodeType, lasti: int, spans: dict[tuple[int, int], tuple[Span, int] | None]
) -> tuple[Span, int] | None:
    """The span of the expression whose value the instruction at ``lasti`` read, and how many
    comparisons of that span ran before it (which link of ``0 < t < 1`` it is, every link
    having the chain's span). Memoised in ``spans``, one build's, by code id and offset: a
    lasting cache would keep models' code alive."""
    key = (id(code), lasti)
    if key in spans:
        return spans[key]
    found: tuple[Span, int] | None = None
    previous = None
    links: dict[Span, int] = {}
    for instruction in dis.get_instructions(code):
        p = getattr(instruction, "positions", None)  # Python 3.10 has none: the line alone then says
        here = (p.lineno, p.col_offset, p.end_lineno, p.end_col_offset) if p is not None else None
        if instruction.offset == lasti:
            tests = previous is not None and instruction.opname.startswith(_TRUTH_TESTS)
            read, span = previous if tests else (instruction, here)  # type: ignore[misc]
            if span is not None and None not in span:
                # the comparisons of this span before the one read (counted already, if it is one)
                found = (span, links.get(span, 0) - (read is not instruction and read.opname == "COMPARE_OP"))
            break
        if instruction.opname == "COMPARE_OP" and here is not None:
            links[here] = links.get(here, 0) + 1
        if instruction.opname != "EXTENDED_ARG":  # a prefix of the next instruction's argument
            previous = (instruction, here)
    spans[key] = found
    return found


@dataclass(frozen=True)
class _File:
    expressions: dict[Span, ast.expr]
    """Span -> the outermost expression with it."""
    parents: dict[ast.AST, ast.AST]
    tests: dict[int, ast.stmt | ast.IfExp]
    """Line -> the innermost ``if``/``while``/``assert`` or conditional expression whose test covers it."""


@lru_cache(maxsize=256)
def _parsed(filename: str, first_line: int) -> _File | None:
    """The function that starts at ``first_line`` (the whole file for module code), parsed: a
    function is parsed in a millisecond, where transformers' 5,000-line files take a second."""
    lines = linecache.getlines(filename)
    if not lines or not 0 < first_line <= len(lines):
        return None
    margin = 0
    if first_line > 1:
        try:
            block = inspect.getblock(lines[first_line - 1 :])
        except (SyntaxError, IndentationError, tokenize.TokenError):
            return None
        source = textwrap.dedent("".join(block))
        margin = len(block[0]) - len(source.splitlines(True)[0])  # removed from every line alike
    else:
        source = "".join(lines)
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    shift = first_line - 1 if first_line > 1 else 0

    def span(node: ast.expr) -> Span:
        return (node.lineno + shift, node.col_offset + margin, node.end_lineno + shift, node.end_col_offset + margin)  # type: ignore[operator]

    expressions: dict[Span, ast.expr] = {}
    parents: dict[ast.AST, ast.AST] = {}
    tests: dict[int, ast.stmt | ast.IfExp] = {}
    for node in ast.walk(tree):  # breadth first: outer nodes come before inner ones
        for child in ast.iter_child_nodes(node):
            parents[child] = node
        if isinstance(node, ast.expr) and node.end_lineno is not None and node.end_col_offset is not None:
            expressions.setdefault(span(node), node)
        if isinstance(node, (ast.If, ast.While, ast.Assert, ast.IfExp)):
            for line in range(node.test.lineno, (node.test.end_lineno or node.test.lineno) + 1):
                tests[line + shift] = node
    return _File(expressions, parents, tests)


def _statement_of(node: ast.AST) -> str:
    """``break``/``continue`` for an ``if`` whose body ends in one (it decides the loop's exit)."""
    if isinstance(node, ast.If):
        last = node.body[-1]
        return "break" if isinstance(last, ast.Break) else "continue" if isinstance(last, ast.Continue) else "if"
    return "while" if isinstance(node, ast.While) else "assert" if isinstance(node, ast.Assert) else "if"


@lru_cache(maxsize=4096)
def read_place(filename: str, first_line: int, line: int, read: tuple[Span, int] | None, truth: bool) -> Place:
    """Where a read on ``line`` of the function starting at ``first_line`` (of the expression at
    ``read``'s span, where known) sits in its statement. ``truth``: a truth test (``if t:``), which the ``and``/``or``/``not`` around it
    carry to the statement; other reads (``t.item() > 0``) are in a statement's test anywhere
    inside it."""
    parsed = _parsed(filename, first_line)
    if parsed is None:
        return Place((), None)
    node = parsed.expressions.get(read[0]) if read is not None else None
    if node is None:  # no exact expression: the statement whose test holds the line, if plain
        holder = parsed.tests.get(line)
        plain = holder is not None and not any(
            isinstance(n, (ast.BoolOp, ast.UnaryOp)) or (isinstance(n, ast.Compare) and len(n.ops) > 1)
            for n in ast.walk(holder.test)
        )
        return Place((), _statement_of(holder) if plain or (holder is not None and not truth) else None)
    steps: list[tuple[str, bool]] = []
    if truth and isinstance(node, ast.Compare) and len(node.ops) > 1 and read is not None:
        # ``0 < t < 1`` is ``0 < t and t < 1``: which link was read, counted from the chain's
        # first (a ``while`` test compiled twice counts on from its first copy)
        steps.append(("and", read[1] % len(node.ops) == len(node.ops) - 1))
    parent = parsed.parents.get(node)
    while parent is not None:
        if isinstance(parent, (ast.If, ast.While, ast.Assert, ast.IfExp)) and parent.test is node:
            return Place(tuple(steps), _statement_of(parent))
        if isinstance(parent, (ast.stmt, *_SCOPES)):
            break
        if truth:
            if isinstance(parent, ast.UnaryOp) and isinstance(parent.op, ast.Not):
                steps.append(("not", True))
            elif isinstance(parent, ast.BoolOp):
                steps.append(("and" if isinstance(parent.op, ast.And) else "or", parent.values[-1] is node))
            else:
                break  # the truth went into another expression (``bool(t) + 1``): no statement's
        node, parent = parent, parsed.parents.get(parent)
    return Place(tuple(steps), None)
