"""Capture: the only layer that touches torch internals. It emits a ``GraphIR``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .._io import gc_paused
from .._ir import GraphIR
from . import _source
from ._build import build_graph
from ._recorder import Recorder, active_recorder
from ._values import iter_tensors

__all__ = [
    "TraceError",
    "user_location",
    "UnsafeArchiveError",
    "capture_aten",
    "capture_backward",
    "capture_python",
    "from_export",
    "from_fx",
    "load_exported",
    "unwrap_model",
]


class TraceError(RuntimeError):
    """The model could not be traced; the message says why in one line."""


def _describe_failure(rec: Recorder, exc: BaseException) -> str:
    """One line naming the op, the module call and the source line where forward failed."""
    if rec.failure is not None:
        f = rec.failure
        where = f"{f.code.co_filename}:{f.line}" if f.code is not None else "unknown source"
        scope = rec.scopes[f.scope] if f.scope is not None and f.scope < len(rec.scopes) else None
        module = f" in module '{scope.path or '<root>'}' ({scope.cls.rsplit('.', 1)[-1]})" if scope else ""
        return f"torchatlas: forward failed at {f.target}{module}, {where}"
    frame = _source.user_traceback_frame(exc)
    where = f", {frame.filename}:{frame.lineno}" if frame else ""
    module = _raising_module(exc)
    if module is not None:
        path = rec.module_path_of(module)
        return f"torchatlas: forward failed in module '{path or '<root>'}' ({type(module).__name__}){where}"
    return f"torchatlas: forward failed{where}"


def user_location(exc: BaseException) -> str:
    """`` (file.py:12)``: the innermost frame of ``exc`` outside torch and torchatlas, if any."""
    frame = _source.user_traceback_frame(exc)
    return f" ({frame.filename}:{frame.lineno})" if frame else ""


def _raising_module(exc: BaseException) -> Any:
    """The innermost module whose call the exception passed through (read from the
    traceback, so an error the model caught earlier cannot mislead it)."""
    module, tb = None, exc.__traceback__
    call_impl = torch.nn.Module._call_impl.__code__
    while tb is not None:
        if tb.tb_frame.f_code is call_impl:
            module = tb.tb_frame.f_locals.get("self")
        tb = tb.tb_next
    return module


def unwrap_model(model: Any) -> Any:
    """The eager module behind a ``torch.compile`` wrapper; a clear refusal for what can't run eagerly."""
    if isinstance(model, torch.export.ExportedProgram):
        raise TraceError(
            "torchatlas: an ExportedProgram is a graph already, not a model to run; use torchatlas.from_export(ep)"
        )
    if isinstance(model, (torch.jit.ScriptModule, torch.jit.ScriptFunction)):
        raise TraceError(
            "torchatlas: TorchScript runs in C++ where ops cannot be recorded; trace the original nn.Module instead"
        )
    orig = getattr(model, "_orig_mod", None)
    if isinstance(orig, torch.nn.Module) and type(model).__name__ == "OptimizedModule":
        return orig  # torch.compile wraps the eager module; its forward computes the same thing
    if not callable(model):
        raise TraceError(f"torchatlas: cannot trace a {type(model).__name__}; pass an nn.Module or a callable")
    return getattr(model, "_torchdynamo_orig_callable", model)  # torch.compile(function)


def capture_python(
    model: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    progress: Callable[[int], None] | None = None,
    partial: bool = False,
) -> tuple[GraphIR, Any, BaseException | None]:
    """Run ``model(*args, **kwargs)`` once, recording it.

    Returns the graph, the model's output, and (only with ``partial=True``) the
    exception that stopped the forward pass. Without ``partial`` an exception
    propagates unchanged, with a note naming where it happened.
    """
    if active_recorder() is not None:
        raise TraceError("torchatlas.trace cannot run inside another torchatlas.trace in the same thread")
    model = unwrap_model(model)
    rec = Recorder(model, progress=progress)
    inputs = list(iter_tensors(args, "args")) + list(iter_tensors(kwargs, "kwargs"))
    rec.add_inputs(inputs)
    output: Any = None
    error: BaseException | None = None
    try:
        with rec:
            if not isinstance(model, torch.nn.Module):
                rec.open_root(f"{type(model).__module__}.{getattr(model, '__qualname__', type(model).__qualname__)}")
            output = model(*args, **kwargs)
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as exc:
        note = _describe_failure(rec, exc)
        if not partial:
            if hasattr(exc, "add_note"):
                exc.add_note(note)
            raise
        error = exc
    if not rec.scopes:
        raise TraceError("torchatlas: the model recorded no module call; is it an nn.Module or a callable?")
    # A user's own TorchFunctionMode must not see our bookkeeping; no user code runs here.
    with torch._C.DisableTorchFunction(), gc_paused():
        return build_graph(rec, output, model), output, error


# Other capture levels; imported last because they build on the python-level pieces above.
from ._aten import capture_aten  # noqa: E402
from ._backward import capture_backward  # noqa: E402
from ._fx_import import from_export, from_fx  # noqa: E402
from ._pt2 import UnsafeArchiveError, load_exported  # noqa: E402
