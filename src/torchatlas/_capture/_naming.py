"""Stable names for the callables a TorchFunctionMode sees, and the operator a call was written as."""

from __future__ import annotations

import dis
import sys
import types
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import torch

from . import _distributed

# Namespaces searched, in order of preference, for the public name of a callable.
# ``torch`` comes first so that ``F.conv2d`` (the same object) reads ``torch.conv2d``.
_NAMESPACES: tuple[tuple[str, Any], ...] = (
    ("torch", torch),
    ("torch.nn.functional", torch.nn.functional),
    ("torch.linalg", torch.linalg),
    ("torch.fft", torch.fft),
    ("torch.special", torch.special),
    ("torch.nn.init", torch.nn.init),
)

_METADATA_GETTERS = {
    "shape", "dtype", "device", "layout", "requires_grad", "is_leaf", "grad_fn", "ndim",
    "names", "is_cuda", "is_meta", "is_sparse", "is_quantized", "is_nested", "itemsize",
    "nbytes", "_version", "output_nr", "_base", "is_mkldnn", "is_mps", "is_xpu",
}


@lru_cache(maxsize=1)
def _public_names() -> dict[Any, list[tuple[str, Any]]]:
    """Callable -> its (name, object) pairs, best first: the namespaces in order, public names
    before private ones (``F.threshold`` is ``F._threshold``). Distinct builtins can compare
    equal (``torch.mm == torch.dsmm``: one C function under two names), so one key can hold
    several objects; ``target_name`` takes the name of the one called."""
    names: dict[Any, list[tuple[str, Any]]] = {}
    for prefix, ns in _NAMESPACES:
        for attr in sorted(dir(ns), key=lambda a: a.startswith("_")):
            if attr.startswith("__"):
                continue
            try:
                obj = getattr(ns, attr)
                if callable(obj) and not isinstance(obj, type):
                    names.setdefault(obj, []).append((f"{prefix}.{attr}", obj))
            except Exception:  # some attributes raise on access or are unhashable
                continue
    for attr, obj in vars(torch._C.TensorBase).items():
        _add_method_name(names, attr, obj)
    for attr, obj in vars(torch.Tensor).items():
        _add_method_name(names, attr, obj)
    return names


def _add_method_name(names: dict[Any, list[tuple[str, Any]]], attr: str, obj: Any) -> None:
    try:
        if isinstance(obj, (property, types.GetSetDescriptorType)):
            obj = obj.__get__
        if callable(obj):
            names.setdefault(obj, []).append((f"torch.Tensor.{attr}", obj))
    except TypeError:
        pass


def target_name(func: Callable[..., Any]) -> str:
    """``torch.conv2d``, ``torch.Tensor.view``, ``torch.nn.functional.relu``, ``aten.relu``..."""
    try:
        named = _public_names().get(func)
    except TypeError:  # unhashable
        named = None
    if named:
        return next((name for name, obj in named if obj is func), named[0][0])
    if isinstance(func, _distributed.Packet):  # our stand-in for a functional collective
        func = func.op
    if isinstance(func, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return str(func)  # torch.ops.aten.relu called directly: aten.relu, aten.add.Tensor
    getter_of = getattr(func, "__self__", None)
    if isinstance(getter_of, (property, types.GetSetDescriptorType)):
        setter = ".__set__" if getattr(func, "__name__", "") == "__set__" else ""
        return f"torch.Tensor.{getter_of.__name__}{setter}"
    module = getattr(func, "__module__", None) or "torch"
    qualname = getattr(func, "__qualname__", None) or getattr(func, "__name__", repr(func))
    qualname = qualname.replace("TensorBase.", "Tensor.").replace("_VariableFunctionsClass.", "")
    if module.startswith("torch._C"):
        module = "torch"
    return f"{module}.{qualname}"


def is_metadata_query(func: Callable[..., Any]) -> bool:
    """Property getters such as ``x.shape``: never data flow, so they skip recording."""
    getter_of = getattr(func, "__self__", None)
    return isinstance(getter_of, (property, types.GetSetDescriptorType)) and getter_of.__name__ in _METADATA_GETTERS


# -- operators -----------------------------------------------------------------
# ``a + b`` reaches the mode as ``Tensor.add``; the caller's bytecode says it was ``+``.

_BINARY_DUNDERS = {
    "+": "__add__", "-": "__sub__", "*": "__mul__", "/": "__truediv__", "//": "__floordiv__",
    "%": "__mod__", "**": "__pow__", "@": "__matmul__", "&": "__and__", "|": "__or__",
    "^": "__xor__", "<<": "__lshift__", ">>": "__rshift__",
}
_COMPARE_DUNDERS = {"<": "__lt__", "<=": "__le__", "==": "__eq__", "!=": "__ne__", ">": "__gt__", ">=": "__ge__"}
_UNARY_DUNDERS = {"UNARY_NEGATIVE": "__neg__", "UNARY_INVERT": "__invert__", "UNARY_POSITIVE": "__pos__"}
_LEGACY_BINARY = {  # Python 3.10 spells each operator as its own opcode
    "BINARY_ADD": "+", "BINARY_SUBTRACT": "-", "BINARY_MULTIPLY": "*", "BINARY_TRUE_DIVIDE": "/",
    "BINARY_FLOOR_DIVIDE": "//", "BINARY_MODULO": "%", "BINARY_POWER": "**", "BINARY_MATRIX_MULTIPLY": "@",
    "BINARY_AND": "&", "BINARY_OR": "|", "BINARY_XOR": "^", "BINARY_LSHIFT": "<<", "BINARY_RSHIFT": ">>",
}


def _operator_table() -> dict[int, Any]:
    """opcode -> dunder name, or -> list indexed by oparg (BINARY_OP / COMPARE_OP)."""
    table: dict[int, Any] = {}
    if "BINARY_OP" in dis.opmap:
        ops = []
        for _, symbol in getattr(dis, "_nb_ops", []):
            inplace = symbol.endswith("=") and symbol not in ("==", "!=", "<=", ">=")
            base = _BINARY_DUNDERS.get(symbol[:-1] if inplace else symbol)
            ops.append(("__i" + base[2:]) if (base and inplace) else base)
        table[dis.opmap["BINARY_OP"]] = ops
    for opname, symbol in _LEGACY_BINARY.items():
        if opname in dis.opmap:
            table[dis.opmap[opname]] = _BINARY_DUNDERS[symbol]
        inplace_name = opname.replace("BINARY_", "INPLACE_")
        if inplace_name in dis.opmap:
            table[dis.opmap[inplace_name]] = "__i" + _BINARY_DUNDERS[symbol][2:]
    for opname, dunder in _UNARY_DUNDERS.items():
        if opname in dis.opmap:
            table[dis.opmap[opname]] = dunder
    return table


_OPERATOR_TABLE = _operator_table()
_COMPARE_OP = dis.opmap.get("COMPARE_OP")
# Python 3.12 moved the comparison into the upper bits of COMPARE_OP's argument.
_COMPARE_SHIFT = 5 if sys.version_info >= (3, 13) else 4 if sys.version_info >= (3, 12) else 0

# Tensor methods an operator can arrive as.
_OPERATOR_METHODS = {
    getattr(torch.Tensor, n)
    for n in (
        "add", "sub", "mul", "div", "floor_divide", "remainder", "pow", "matmul", "bitwise_and",
        "bitwise_or", "bitwise_xor", "bitwise_left_shift", "bitwise_right_shift", "__lshift__",
        "__rshift__", "add_", "sub_", "mul_", "div_", "pow_", "remainder_", "floor_divide_",
        "bitwise_and_", "bitwise_or_", "bitwise_xor_", "neg", "bitwise_not", "lt", "le", "eq", "ne",
        "gt", "ge", "__and__", "__or__", "__xor__", "__iand__", "__ior__", "__ixor__", "__ilshift__",
        "__irshift__", "__rpow__", "__rsub__", "__rtruediv__", "__rfloordiv__", "__rmatmul__",
        "__rmod__", "__radd__", "__rmul__", "__floordiv__", "__mod__", "__pos__", "positive",
        "__invert__", "__neg__", "__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__",
        "__imod__", "__ipow__", "__imatmul__",
    )
    if hasattr(torch.Tensor, n)
}


def is_operator_method(func: Callable[..., Any]) -> bool:
    """Whether ``func`` is a Tensor method an operator (``+``, ``@``, ``[]``...) reaches the mode as."""
    return func in _OPERATOR_METHODS


def operator_name(func: Callable[..., Any], caller: types.FrameType) -> str | None:
    """``torch.Tensor.__add__`` when ``func`` ran for an operator in ``caller``'s current instruction."""
    if func not in _OPERATOR_METHODS:
        return None
    code, offset = caller.f_code.co_code, caller.f_lasti
    if offset < 0 or offset + 1 >= len(code):
        return None
    opcode, oparg = code[offset], code[offset + 1]
    entry = _OPERATOR_TABLE.get(opcode)
    if isinstance(entry, list):
        dunder = entry[oparg] if oparg < len(entry) else None
    elif entry is not None:
        dunder = entry
    elif opcode == _COMPARE_OP:
        index = oparg >> _COMPARE_SHIFT
        dunder = _COMPARE_DUNDERS.get(dis.cmp_op[index]) if index < len(dis.cmp_op) else None
    else:
        return None
    return f"torch.Tensor.{dunder}" if dunder else None
