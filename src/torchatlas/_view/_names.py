"""Names at the reading site: a value read across module calls is called what its reader calls it.

A value's own name is the variable it had where it was made: T5's encoder output is
``hidden_states`` inside the encoder, which in a decoder layer means the decoder's own
running state. Where it is read, the reader knows it otherwise:

* a module call that was given it knows it by the parameter it was passed as
  (``key_value_states``, ``position_bias``: ``scope.meta["input_names"]``, from the capture);
* code that got it back from a call knows it by the variable it assigned the call's result
  to (``residual = self.shortcut(residual)``: ``residual``, not the ``hidden_state`` of the
  shortcut's inside), read from the call's own source line.

Else the value keeps its own name; where it has none the outputs name its producer.
"""

from __future__ import annotations

import ast
import bisect
import re

from torchatlas._ir import GraphIR, Node, Ref, Scope
from torchatlas._ops import op_name

_STANDARD_LAYERS = "torch.nn."
_ASSIGNED = re.compile(r"^\s*([A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*)\s*,?\s*=(?!=)\s*[A-Za-z_][\w.]*(?:\[[^\]]*\])?\(")


MAX_READ_LINE = 1_000
"""The longest source line read for names: a line of code is far shorter, and a document's
line of any length must not cost the tree more than this (regexes and ``ast`` backtrack or
recurse on long runs)."""


def parsed_line(code: str) -> ast.Module | None:
    """A source line's syntax tree; None when it is not one line of Python, or too long to read."""
    if len(code) > MAX_READ_LINE:
        return None
    try:
        return ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def assigned_names(scope: Scope) -> list[str]:
    """``["attn_output", "_"]`` for a call made as ``attn_output, _ = self.attn(x)``: the
    variables its caller assigned its result to; empty unless the line assigns plain names the
    result of one call and nothing more (``h = x + self.pos(i)`` names the sum, not the call)."""
    code = (scope.source.code if scope.source is not None else None) or ""
    match = _ASSIGNED.match(code) if len(code) <= MAX_READ_LINE else None
    if not match:
        return []
    depth = 1
    for at, char in enumerate(code[match.end():]):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0:
            rest = code[match.end() + at + 1:].split("#", 1)[0]
            if rest.strip():
                return []  # the call is part of a longer expression
            break
    return [name.strip() for name in match.group(1).split(",")]


_BINARY: dict[type, str] = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "truediv", ast.MatMult: "matmul"}


def _called(func: ast.expr) -> str | None:
    """``where`` of ``torch.where``, ``contiguous`` of ``x.contiguous``."""
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None


def operand_names(node: Node) -> dict[int, str]:
    """Input index -> the name the op's own line gives that tensor operand: ``residual`` and
    ``hidden_states`` in ``hidden_states = residual + hidden_states``, ``hidden_state`` and
    ``residual`` in ``hidden_state += residual``, ``d2`` and ``e2`` in ``torch.cat((d2, e2), 1)``,
    ``position_bias`` in ``torch.where(mask, position_bias, low)``; only plain names, matched to
    the recorded arguments (``{"tensor": k}``), so a constant between them shifts nothing."""
    code = (node.source.code if node.source is not None else None) or ""
    tree = parsed_line(code.strip())
    if tree is None or not tree.body:
        return {}
    statement = tree.body[0]
    name = op_name(node.target or "")
    written: list[ast.expr] = []
    if isinstance(statement, ast.AugAssign):
        if _BINARY.get(type(statement.op)) == name:
            written = [statement.target, statement.value]
    elif isinstance(statement, (ast.Assign, ast.Expr, ast.Return)) and statement.value is not None:
        value = statement.value  # the op must be the line's whole expression, not a part of it
        if isinstance(value, ast.BinOp) and _BINARY.get(type(value.op)) == name:
            reflected = (node.target or "").rsplit(".", 1)[-1].startswith("__r")  # 2 * x: x.__rmul__(2)
            written = [value.right, value.left] if reflected else [value.left, value.right]
        elif isinstance(value, ast.Call) and _called(value.func) == name:
            method = (node.target or "").startswith("torch.Tensor.") and isinstance(value.func, ast.Attribute)
            written = [value.func.value, *value.args] if method else list(value.args)  # type: ignore[union-attr]
    names: dict[int, str] = {}
    for recorded, expr in zip(node.args, written):
        pairs = [(recorded, expr)]
        if isinstance(recorded, list) and isinstance(expr, (ast.Tuple, ast.List)) and len(recorded) == len(expr.elts):
            pairs = list(zip(recorded, expr.elts))
        for arg, e in pairs:
            if isinstance(arg, dict) and isinstance(arg.get("tensor"), int) and isinstance(e, ast.Name):
                names.setdefault(arg["tensor"], e.id)
    return names


class ReadingNames:
    """What each value is called where it is read."""

    def __init__(self, ir: GraphIR) -> None:
        self.ir = ir
        self._assigned: dict[str, list[str]] = {}
        self._position = {n.id: k for k, n in enumerate(ir.nodes)}
        self._begins: dict[str, int] | None = None
        self._children = ir.children()
        self._named: dict[tuple[str, str], list[int]] | None = None
        self._operands: dict[str, dict[Ref, str]] = {}  # op id -> each input's name on its line, first read

    def _begin(self, scope_id: str) -> int:
        """Where a call began: the position of the first node recorded inside it."""
        if self._begins is None:
            self._begins = {}
            for k, n in enumerate(self.ir.nodes):
                for sid in self.ir.ancestry(n.scope):
                    self._begins.setdefault(sid, k)
        return self._begins.get(scope_id, len(self.ir.nodes))

    def _assigned_names(self, call: Scope) -> list[str]:
        if call.id not in self._assigned:
            self._assigned[call.id] = assigned_names(call)
        return self._assigned[call.id]

    def _rebound(self, name: str, call: Scope, reader_scope: str, at: int) -> bool:
        """Whether code in ``reader_scope`` gave ``name`` another value after ``call`` returned and
        before the reader at position ``at`` read it (``new = layer(features)`` in a loop: by the
        third layer, ``new`` is the second layer's output, not the first's)."""
        returned = max((self._position[r.node] for r in call.outputs), default=-1)
        for sibling in self._children.get(reader_scope, ()):
            scope = self.ir.scope(sibling)
            if sibling != call.id and returned < self._begin(sibling) < at and name in self._assigned_names(scope):
                return True
        if self._named is None:  # (scope, variable) -> positions of the ops assigned to it there
            self._named = {}
            for k, n in enumerate(self.ir.nodes):
                if n.name:
                    self._named.setdefault((n.scope, n.name), []).append(k)
        assigned = self._named.get((reader_scope, name), [])
        first_after = bisect.bisect_right(assigned, returned)
        return first_after < len(assigned) and assigned[first_after] < at

    def given_as(self, ref: Ref, call_id: str) -> str | None:
        """The parameter a module call was given ``ref`` as (``key_value_states``)."""
        call = self.ir.scope(call_id)
        names = call.meta.get("input_names")
        if not isinstance(names, list) or len(names) != len(call.inputs) or ref not in call.inputs:
            return None
        name = names[call.inputs.index(ref)]
        if not isinstance(name, str) or not name.isidentifier() or names.count(name) > 1:
            return None  # one parameter for several values (``position_embeddings``): they keep theirs
        return name

    def returned_as(self, ref: Ref, reader_scope: str, at: int) -> str | None:
        """The variable code in ``reader_scope`` assigned ``ref`` to, when a call it made returned it
        and nothing gave that variable another value before the reader at position ``at``."""
        chain = self.ir.ancestry(self.ir.node(ref).scope)
        if reader_scope not in chain or chain[-1] == reader_scope:
            return None
        call = self.ir.scope(chain[chain.index(reader_scope) + 1])
        if ref not in call.outputs:
            return None
        names = self._assigned_names(call)
        if len(names) == len(call.outputs) and len(call.outputs) > 0:
            name = names[call.outputs.index(ref)]
            return None if name == "_" or self._rebound(name, call, reader_scope, at) else name
        return None

    def read_by_op(self, ref: Ref, reader: Node) -> str | None:
        """What an op's own line calls ``ref`` (``residual`` in ``h = residual + h``), else what
        the code around it calls it (:meth:`name`)."""
        operands = self._operands.get(reader.id)
        if operands is None:  # once per op: an op may read thousands of values (torch.stack)
            names = operand_names(reader)
            operands = self._operands[reader.id] = {}
            for k, r in enumerate(reader.inputs):
                if k in names:
                    operands.setdefault(r, names[k])
        named = operands.get(ref)
        return named if named is not None else self.name(ref, reader.scope, at=self._position[reader.id])

    def read_by_call(self, ref: Ref, call_id: str) -> str | None:
        """What a module call calls ``ref``: the parameter the nearest call around it (itself
        first) that was given it took it as (a standard ``torch.nn`` layer's ``input`` says
        nothing: the call around it speaks, so T5's ``k`` reads ``key_value_states``), else the
        variable its caller assigned a call's result to; None where the reading site gives no
        name, and for the model's inputs, whose own names are the user's."""
        parent = self.ir.scope(call_id).parent
        return None if parent is None else self.name(ref, parent, call_id, self._begin(call_id))

    def name(self, ref: Ref, reader_scope: str, reader_call: str | None = None, at: int = 0) -> str | None:
        if self.ir.node(ref).kind == "input":
            return None
        made_in = set(self.ir.ancestry(self.ir.node(ref).scope))
        calls = [reader_call] if reader_call is not None else []
        calls += reversed(self.ir.ancestry(reader_scope))
        for call in calls:
            if call in made_in:
                break  # made inside this call: nothing around the reader was given it
            if not self.ir.scope(call).cls.startswith(_STANDARD_LAYERS) and (given := self.given_as(ref, call)):
                return given
        return self.returned_as(ref, reader_scope, at)
