"""What a torch call writes into its arguments, and which arguments it reads only for their shape.

A call *writes* a tensor when it changes its contents (``x.add_(y)``, ``x[i] = v``,
``out=``, ``F.relu(x, inplace=True)``, batch norm's running statistics in training,
``F.embedding`` renormalising its weight under ``max_norm``, ``x.data = y``). Later
readers of a written tensor read from the writer. A call that reads an argument only
for its shape, dtype or device (``x.view_as(y)``, ``torch.zeros_like(y)``) does not
make that argument a data input.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from ._values import tensors_flat

Tensor = torch.Tensor

_INPLACE_DUNDERS = {
    "__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__", "__imod__", "__ipow__",
    "__imatmul__", "__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__", "__setitem__",
}
_NOT_DATA_WRITES = {"requires_grad_", "retain_grad", "share_memory_", "pin_memory", "record_stream"}

DATA_SETTER = torch._C.TensorBase.data.__set__
"""``x.data = y``: reaches the mode as this setter."""
REPOINTS = frozenset({DATA_SETTER, torch._C.TensorBase.set_})
"""Calls that make their first argument hold another tensor's storage (``x.data = y``, ``x.set_(y)``):
they write the first argument and read only the others."""


def _arg(args: tuple, kwargs: dict, position: int, name: str, default: Any = None) -> Any:
    return kwargs[name] if name in kwargs else (args[position] if len(args) > position else default)


def _running_stats(flag_position: int, flag_name: str) -> Callable[[tuple, dict], list[Tensor]]:
    """Batch/instance norm update ``running_mean`` and ``running_var`` when the flag is true."""

    def written(args: tuple, kwargs: dict) -> list[Tensor]:
        if not _arg(args, kwargs, flag_position, flag_name, False):
            return []
        found = (_arg(args, kwargs, 1, "running_mean"), _arg(args, kwargs, 2, "running_var"))
        return [t for t in found if isinstance(t, Tensor)]

    return written


def _dropout(args: tuple, kwargs: dict) -> list[Tensor]:
    """In place only when it drops anything: with ``training=False`` it returns its input untouched."""
    if _arg(args, kwargs, 3, "inplace", False) and _arg(args, kwargs, 2, "training", True):
        first = _arg(args, kwargs, 0, "input")
        return [first] if isinstance(first, Tensor) else []
    return []


def _embedding(args: tuple, kwargs: dict) -> list[Tensor]:
    """Under ``max_norm`` the lookup renormalises the rows it reads of its weight, in place."""
    weight = _arg(args, kwargs, 1, "weight")
    if _arg(args, kwargs, 3, "max_norm") is not None and isinstance(weight, Tensor):
        return [weight]
    return []


_CONDITIONAL_WRITERS: dict[Any, Callable[[tuple, dict], list[Tensor]]] = {
    F.batch_norm: _running_stats(5, "training"),
    F.instance_norm: _running_stats(5, "use_input_stats"),
    F.embedding: _embedding,
    **{f: _dropout for f in (F.dropout, F.dropout1d, F.dropout2d, F.dropout3d, F.alpha_dropout, F.feature_alpha_dropout)},
}


@dataclass(frozen=True, slots=True)
class Writes:
    """How one callable writes. ``first``: it writes its first tensor argument; ``inplace``: the
    position of an ``inplace`` flag that, when true, makes it write its first argument;
    ``conditional``: it decides from its arguments; ``first_name``: the first parameter's
    name, for a call that passes it by keyword (``nn.init.constant_(tensor=w, val=0)``)."""

    first: bool = False
    inplace: int | None = None
    conditional: Callable[[tuple, dict], list[Tensor]] | None = None
    first_name: str | None = None


_NONE = Writes()


def writes_of(func: Callable[..., Any]) -> Writes:
    if func in _CONDITIONAL_WRITERS:
        return Writes(conditional=_CONDITIONAL_WRITERS[func])
    name = getattr(func, "__name__", "")
    if name in _NOT_DATA_WRITES:
        return _NONE
    try:
        params = list(inspect.signature(func).parameters)
    except (TypeError, ValueError):
        params = []
    if name in _INPLACE_DUNDERS or (name.endswith("_") and not name.endswith("__")):
        return Writes(first=True, first_name=params[0] if params else None)
    return Writes(inplace=params.index("inplace")) if "inplace" in params else _NONE


def written_by(spec: Writes, repoints: bool, args: tuple, kwargs: dict) -> list[Tensor]:
    """The tensors a call writes into, given how its callable writes."""
    out = kwargs.get("out") if kwargs else None
    if out is not None:
        found: list[Tensor] = []
        tensors_flat(out, found)
        return found
    if repoints:
        return [args[0]] if args and isinstance(args[0], Tensor) else []
    if spec is _NONE:
        return []
    if spec.conditional is not None:
        return spec.conditional(args, kwargs)
    first = args[0] if args else (kwargs.get(spec.first_name) if spec.first_name else None)
    if not isinstance(first, Tensor):
        return []
    if spec.first or kwargs.get("inplace") or (spec.inplace is not None and len(args) > spec.inplace and args[spec.inplace] is True):
        return [first]
    return []


