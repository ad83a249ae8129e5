"""Where a tensor's value leaves into Python: ``if t:``, ``v in t``, ``t.item()``,
``t.numpy()``, ``x.shape[0]``.

The mode sees these calls (``Tensor.__bool__``, ``Tensor.__contains__``, ``Tensor.item``, the
``shape`` getter...) like any other, so nothing is patched for them; they make no tensor, so
they are not ops. Each is noted on the node that
made the value read, with the user line that read it: the op decided which path Python
took, or gave a size, so it is used even when no tensor of the graph reads it.
"""

from __future__ import annotations

import math
from typing import Any

import torch

Tensor = torch.Tensor

# callable -> how it reads (one of ``_ir.READ_KINDS``): "size" reads only the shape; every other kind the value.
_KINDS: dict[Any, str] = {
    Tensor.__bool__: "bool",
    Tensor.item: "item",
    Tensor.tolist: "tolist",
    Tensor.__int__: "int",
    Tensor.__float__: "float",
    Tensor.__index__: "index",
    Tensor.__complex__: "complex",
    Tensor.__contains__: "bool",  # ``v in t``: ``(t == v).any()``, run where no mode sees it
    Tensor.numpy: "numpy",
    Tensor.__array__: "numpy",
    Tensor.__dlpack__: "numpy",
    Tensor.__repr__: "print",
    Tensor.__format__: "print",
    torch.is_nonzero: "bool",
    torch.equal: "bool",
    torch.allclose: "bool",
    Tensor.equal: "bool",
    Tensor.allclose: "bool",
    Tensor.shape.__get__: "size",
    Tensor.ndim.__get__: "size",
    Tensor.size: "size",
    Tensor.numel: "size",
    Tensor.dim: "size",
    Tensor.__len__: "size",
}

def read_kind(func: Any) -> str | None:
    """How ``func`` reads a tensor into Python, or None when it does not."""
    try:
        return _KINDS.get(func)
    except TypeError:  # an unhashable callable
        return None


def read_value(kind: str, result: Any) -> bool | int | float | None:
    """What the read gave Python, where it is one plain value worth showing (a branch's
    direction, a scalar); None for lists, sizes and non-finite numbers."""
    if kind == "bool" and type(result) is bool:
        return result
    if kind in ("item", "int", "float", "index", "count") and type(result) in (bool, int, float):
        return result if type(result) is not float or math.isfinite(result) else None
    return None


def read_tensors(kind: str, args: tuple) -> list[Tensor]:
    """The tensors a read reads: its tensor arguments (``torch.equal(a, b)`` reads both)."""
    if kind != "bool" or len(args) < 2:
        return [args[0]] if args and isinstance(args[0], Tensor) else []
    return [a for a in args if isinstance(a, Tensor)]
