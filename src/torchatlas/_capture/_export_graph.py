"""The records an exported program is read into, and the one builder that turns them into a
``GraphIR``.

Two readers fill the same records: an ``ExportedProgram`` in memory (``_export_import``)
and a ``.pt2`` archive read as data (``_pt2_reader``), so both give the same graph node
for node. A record holds plain values only: graph values are :class:`Use`, sizes are ints
or the text :func:`size_text` makes of a symbolic size.
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass, field
from typing import Any

from .._ir import GraphIR, Node, Ref, TensorMeta
from ._fx_import import _NO_MODULE_STACK, _fill_scope_outputs, _module_path, _ScopeTracker, _user_source, _variable_name
from ._values import encode


@dataclass(frozen=True)
class Use:
    """In an op's arguments: the graph value of this name (a tensor, a symbolic int...)."""

    name: str


@dataclass
class ExportLeaf:
    """A placeholder: a parameter, buffer, constant or user input."""

    name: str
    kind: str
    path: str
    outputs: list[TensorMeta]


@dataclass
class ExportOp:
    """One ``call_function`` node; ``results`` maps each value it makes to its output slot."""

    name: str
    target: str
    args: list[Any]
    kwargs: dict[str, Any]
    results: dict[str, int]
    outputs: list[TensorMeta]
    stack: list[tuple[str, str, str]]
    """``nn_module_stack``: (call key, module path as recorded, class name), outermost first."""
    stack_trace: str | None = None
    inplace: bool = False


@dataclass
class ExportProgram:
    model: str | None
    level: str
    leaves: list[ExportLeaf] = field(default_factory=list)
    ops: list[ExportOp] = field(default_factory=list)
    outputs: list[tuple[str | None, str]] = field(default_factory=list)
    """(value name, or None for a constant, path) of each value the program returns."""
    tied: list[list[str]] = field(default_factory=list)
    """The parameter names that are one tensor (a tied embedding and head), where known."""


def graph_of(program: ExportProgram, imported: str, torch_version: str) -> GraphIR:
    """The ``GraphIR`` of an exported program's records, one scope per module call."""
    tracker = _ScopeTracker(program.model or "torch.export.ExportedProgram")
    nodes: list[Node] = []
    value: dict[str, tuple[str, int]] = {}  # value name -> (IR node id, slot)
    for leaf in program.leaves:
        value[leaf.name] = (f"n{len(nodes)}", 0)
        nodes.append(Node(id=f"n{len(nodes)}", kind=leaf.kind, scope="s0", path=leaf.path, outputs=leaf.outputs))
    for op in program.ops:
        chain = [(key, path, cls) for key, raw, cls in op.stack if key != _NO_MODULE_STACK and (path := _module_path(raw))]
        scope = tracker.enter(chain)
        index: dict[str, int] = {}
        inputs: list[Ref] = []
        for use in _uses((op.args, op.kwargs)):
            if use.name in value:
                index.setdefault(use.name, len(inputs))
                inputs.append(Ref(*value[use.name]))
        node_id = f"n{len(nodes)}"
        nodes.append(
            Node(
                id=node_id, kind="op", scope=scope, inputs=inputs, target=op.target, outputs=op.outputs,
                args=_encode(op.args, index), kwargs=_encode(op.kwargs, index)["dict"], inplace=op.inplace,
                source=_user_source(op.stack_trace), name=_variable_name(op.name, op.target),
            )
        )
        value[op.name] = (node_id, 0)
        for name, slot in op.results.items():
            value[name] = (node_id, slot)
    for name, path in program.outputs:
        if name is None or name not in value:
            continue
        node_id, slot = value[name]
        outs = nodes[int(node_id[1:])].outputs
        nodes.append(
            Node(id=f"n{len(nodes)}", kind="output", scope="s0", inputs=[Ref(node_id, slot)], path=path, outputs=outs[slot:slot + 1])
        )
    _fill_scope_outputs(tracker.scopes, nodes)
    meta: dict[str, Any] = {"level": program.level, "torch": torch_version, "imported": imported}
    if program.model is not None:
        meta["model"] = program.model
    if program.tied:
        meta["parameters"] = _parameter_table(program)
    return GraphIR(scopes=tracker.scopes, nodes=nodes, meta=meta)


def _parameter_table(program: ExportProgram) -> list[dict[str, Any]]:
    """Every parameter once, a tied tensor under its first name with the others in
    ``shared_with``, as a trace lists them (``_values.tensor_table``)."""
    first_of = {name: group[0] for group in program.tied for name in group}
    table: dict[str, dict[str, Any]] = {}
    for leaf in program.leaves:
        if leaf.kind != "param" or not leaf.outputs:
            continue
        head = first_of.get(leaf.path, leaf.path)
        if head in table:
            table[head]["shared_with"].append(leaf.path)
            continue
        meta = leaf.outputs[0]
        table[head] = {"path": leaf.path, "shape": list(meta.shape), "dtype": meta.dtype, "requires_grad": True, "shared_with": []}
    return list(table.values())


def _uses(value: Any) -> list[Use]:
    """The graph values in an op's arguments, in argument order."""
    found: list[Use] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, Use):
            found.append(item)
        elif isinstance(item, (list, tuple)):
            stack.extend(reversed(item))
        elif isinstance(item, dict):
            stack.extend(reversed(list(item.values())))
    return found


def _encode(value: Any, index: dict[str, int]) -> Any:
    if isinstance(value, Use):
        return {"tensor": index[value.name]} if value.name in index else {"repr": value.name}
    if isinstance(value, (list, tuple)):
        return [_encode(v, index) for v in value]
    if isinstance(value, dict):
        return {"dict": {str(k): _encode(v, index) for k, v in value.items()}}
    return encode(value)


# -- symbolic sizes -----------------------------------------------------------------

MAX_SIZE_TEXT = 4096
"""Longest symbolic-size expression read; torch writes a few dozen characters."""
_MAX_DEPTH = 64
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_INFIX = {"Add": (" + ", 10), "Mul": ("*", 20), "Pow": ("**", 30), "FloorDiv": ("//", 20), "CleanDiv": ("//", 20)}


class SizeExpressionError(ValueError):
    """A symbolic size that is not a sympy expression of names, numbers and calls."""


@functools.lru_cache(maxsize=4096)  # a program repeats a few sizes on every node
def size_text(expression: str) -> str:
    """The text of a symbolic size written as sympy's ``srepr`` (``Add(Symbol('s0', integer=True),
    Integer(1))`` -> ``s0 + 1``). The text is parsed, never evaluated: ``Pow(10, Pow(10, 9))``
    is the text ``10**10**9``, and anything but calls of plain names on numbers and strings
    (``__import__('os')...``) raises :class:`SizeExpressionError`."""
    if len(expression) > MAX_SIZE_TEXT:
        raise SizeExpressionError(f"a symbolic size of {len(expression)} characters (at most {MAX_SIZE_TEXT})")
    try:
        tree = ast.parse(expression, mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise SizeExpressionError(f"a symbolic size that is not an expression: {expression[:80]!r}") from None
    return _print(tree, 0, expression)[0]


def _print(node: ast.AST, depth: int, whole: str) -> tuple[str, int]:
    """(text, precedence) of one sympy constructor call."""
    if depth > _MAX_DEPTH:
        raise SizeExpressionError(f"a symbolic size nested over {_MAX_DEPTH} deep")
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str)) and not isinstance(node.value, bool):
        return str(node.value), 100
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
        text, _ = _print(node.operand, depth + 1, whole)
        return f"-{text}", 15
    if isinstance(node, ast.Name) and _NAME.fullmatch(node.id):
        return node.id, 100
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and _NAME.fullmatch(node.func.id)):
        raise SizeExpressionError(f"a symbolic size that is not a sympy expression: {whole[:80]!r}")
    for keyword in node.keywords:  # Symbol('s0', integer=True, positive=True): assumptions, not shown
        if not (isinstance(keyword.value, ast.Constant) and isinstance(keyword.value.value, (bool, int, str))):
            raise SizeExpressionError(f"a symbolic size that is not a sympy expression: {whole[:80]!r}")
    name = node.func.id
    parts = [_print(a, depth + 1, whole) for a in node.args]
    if name in ("Symbol", "Integer", "Float") and len(parts) >= 1:
        return parts[0][0], (15 if parts[0][0].startswith("-") else 100)
    if name == "Rational" and len(parts) == 2:
        return f"{parts[0][0]}/{parts[1][0]}", 20
    if name in _INFIX and len(parts) >= 2:
        return _infix(name, parts)
    return f"{name}({', '.join(text for text, _ in parts)})", 100


def _infix(name: str, parts: list[tuple[str, int]]) -> tuple[str, int]:
    sign, precedence = _INFIX[name]
    if name == "Add":  # sympy keeps numbers first; it shows them last, and subtracts negative terms
        ordered = [p for p in parts if not _is_number(p[0])] + [p for p in parts if _is_number(p[0])]
        text = ordered[0][0]
        for term, _ in ordered[1:]:
            text += f" - {term[1:]}" if term.startswith("-") else f" + {term}"
        return text, precedence
    if name == "Mul" and parts[0][0] == "-1":  # Mul(Integer(-1), x) is -x
        rest, _ = _infix(name, parts[1:]) if len(parts) > 2 else (_wrap(parts[1], precedence), 0)
        return f"-{rest}", 15
    text = sign.join(_wrap(p, precedence + (1 if name == "Pow" and i == 0 else 0)) for i, p in enumerate(parts))
    if name in ("FloorDiv", "CleanDiv"):
        return f"({text})", 100
    return text, precedence


def _wrap(part: tuple[str, int], precedence: int) -> str:
    text, own = part
    return f"({text})" if own < precedence else text


def _is_number(text: str) -> bool:
    return bool(re.fullmatch(r"-?[0-9.]+(/[0-9]+)?", text))
