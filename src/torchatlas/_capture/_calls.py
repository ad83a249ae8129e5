"""What capture needs to know about a callable, worked out once per callable.

Every op the mode sees looks these facts up in one dict: its stable name, whether
the caller's bytecode names it (``+`` reaches the mode as ``Tensor.add``), how it
writes, which arguments it reads for their shape only, and its code object (to tell
a call from the user's line from one made by library code).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .._ops import SHAPE_ONLY_ARGS, op_name
from . import _distributed, _naming, _source
from ._reads import read_kind
from ._writes import REPOINTS, Writes, writes_of


@dataclass(frozen=True, slots=True)
class CallInfo:
    target: str
    """The stable name (``torch.conv2d``); an operator's name comes from the caller's bytecode."""
    operator: bool
    """It may have been written as an operator: ask the caller's bytecode."""
    writes: Writes
    may_write: bool
    """It writes into an argument on some calls (``out=`` is checked on every call)."""
    repoints: bool
    """``x.data = y`` / ``x.set_(y)``: writes its first argument, reads only the rest."""
    shape_only: tuple[tuple[int, str], ...]
    code: Any
    """Its code object, when it is a Python function."""
    python_read: str | None = None
    """How it reads a tensor's value (or size) into Python (``_reads.READ_KINDS``), if it does."""
    role: str | None = None
    """``"plumbing"`` (passes its argument on: DTensor's wrapping, a wait) or ``"collective"``
    (a functional collective), else None."""


_INFO: dict[Any, CallInfo] = {}
_MAX = 8192  # torch's callables (and C extensions'), which live as long as the process anyway
# The user's own Python functions (``__torch_function__`` overrides) are keyed weakly: a
# cache must not keep every traced model's code, and its globals, alive.
_USER_INFO: weakref.WeakKeyDictionary[Any, CallInfo] = weakref.WeakKeyDictionary()


def call_info(func: Callable[..., Any]) -> CallInfo:
    try:
        hit = _INFO.get(func)
    except TypeError:  # an unhashable callable
        return _work_out(func)
    if hit is None:
        hit = _user_info(func)
    return hit


def _user_info(func: Callable[..., Any]) -> CallInfo:
    try:
        hit = _USER_INFO.get(func)
    except TypeError:  # not weakly referenceable: a C callable
        hit = None
    if hit is not None:
        return hit
    hit = _work_out(func)  # the first call of this callable
    if hit.code is not None and not _source.is_library_file(hit.code.co_filename):
        try:
            _USER_INFO[func] = hit
        except TypeError:
            pass
        return hit
    if len(_INFO) >= _MAX:
        _INFO.clear()
    _INFO[func] = hit
    return hit


def _work_out(func: Callable[..., Any]) -> CallInfo:
    target = _naming.target_name(func)
    writes = writes_of(func)
    return CallInfo(
        target=target,
        operator=_naming.is_operator_method(func),
        writes=writes,
        may_write=writes != Writes() or func in REPOINTS,
        repoints=func in REPOINTS,
        shape_only=SHAPE_ONLY_ARGS.get(op_name(target), ()),
        code=getattr(func, "__code__", None),
        python_read=read_kind(func),
        role=_role(target),
    )


def _role(target: str) -> str | None:
    if target in _distributed.PLUMBING:
        return "plumbing"
    if target.startswith(_distributed.FUNCTIONAL_PREFIX):
        return "collective"
    return None
