"""Records one forward pass at the level of the ATen dispatcher.

Two recorders run together. The Python-level ``Recorder`` keeps doing what it
does at level "python" (module scopes, one record per torch call); nested
inside its ``__torch_function__``, a ``TorchDispatchMode`` sees the ATen ops
that call reaches the dispatcher as (``F.linear`` -> ``aten.t`` +
``aten.addmm``) and records them into a second ``Recorder`` that is never
entered: it only lends its data-flow tracking (tensor identity plus
last-writer-by-storage) and its leaf nodes. Each ATen record takes the module
scope of the Python recorder and remembers the Python op it came from.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import replace
from functools import lru_cache
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .._ir import GraphIR
from . import _naming, _source
from ._build import build_graph
from ._recorder import NodeRecord, Recorder, Slot, _meta
from ._values import encode, iter_tensors, split_tensors, tensors_flat

Tensor = torch.Tensor

# Metadata queries that reach the Python key only for tensor subclasses (FakeTensor):
# they compute nothing, and make_fx leaves them out too.
_METADATA_OPS = {
    torch.ops.prim.device, torch.ops.prim.layout, torch.ops.aten.sym_size, torch.ops.aten.sym_stride,
    torch.ops.aten.sym_numel, torch.ops.aten.sym_storage_offset, torch.ops.aten.is_contiguous,
    torch.ops.aten.size, torch.ops.aten.stride, torch.ops.aten.dim, torch.ops.aten.numel,
}


@lru_cache(maxsize=4096)
def _written_arguments(func: Any) -> tuple[tuple[int, str, bool], ...]:
    """(position, name, keyword-only) of each argument the op's schema marks ``Tensor(a!)``."""
    schema = getattr(func, "_schema", None)
    if schema is None:
        return ()
    return tuple(
        (i, a.name, a.kwarg_only)
        for i, a in enumerate(schema.arguments)
        if a.alias_info is not None and a.alias_info.is_write
    )


# Batch norm updates its running stats (arguments 3 and 4) in training, though its
# schema does not mark them written.
_BATCH_NORMS = {
    torch.ops.aten.native_batch_norm.default, torch.ops.aten.cudnn_batch_norm.default,
    torch.ops.aten.miopen_batch_norm.default,
}


def _unmarked_writes(func: Any, args: tuple) -> list[Tensor]:
    if func in _BATCH_NORMS and len(args) > 5 and args[5] is True:
        return [a for a in args[3:5] if isinstance(a, Tensor)]
    return []


class PythonSide(Recorder):
    """The Python-level recorder, telling the ATen store which Python op is running."""

    def __init__(self, model: Any, store: AtenStore, progress: Callable[[int], None] | None = None) -> None:
        super().__init__(model, progress=progress)
        self.store = store
        self.calling: Any = None  # the user frame of the torch call now running
        store.attach(self)

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        caller = sys._getframe(1)
        start, recorded = len(self.store.nodes), len(self.nodes)
        self.calling = _source.user_frame(caller)
        try:
            return super().__torch_function__(func, types, args, kwargs)
        finally:
            self.calling = None
            # Only this call can have appended records: the mode is off while a call runs.
            if len(self.nodes) > recorded and self.nodes[-1].kind == "op":
                link = {"target": self.nodes[-1].target, "index": len(self.nodes) - 1}
            else:
                link = {"target": _naming.target_name(func), "index": None}
            self.store.link_python_op(start, link)

    # ``super().__torch_function__`` hands these its own caller, which is now the
    # override above; the user's frame (whose bytecode names ``+``) is one further out.
    def _record_op(self, func: Any, args: tuple, kwargs: dict, outs: list[Tensor], written: list[Tensor], caller: Any) -> None:
        super()._record_op(func, args, kwargs, outs, written, caller.f_back)

    def _record_failure(self, func: Any, args: tuple, kwargs: dict, exc: BaseException, caller: Any) -> None:
        super()._record_failure(func, args, kwargs, exc, caller.f_back)

    def _push_scope(self, module: Any, path: str, cls: str, frame: Any) -> None:
        first = not self.scopes
        super()._push_scope(module, path, cls, frame)
        if first:
            self.store.open_inputs()

    def _on_module_exit(self, module: Any, args: Any, output: Any) -> None:
        before = len(self.timeline)
        super()._on_module_exit(module, args, output)
        if len(self.timeline) > before and output is not None:
            self.store.close_scope(-self.timeline[-1] - 1, output)


class AtenStore(Recorder):
    """ATen-level records. Never entered as a mode; scopes come from the Python side."""

    def __init__(self, model: Any) -> None:
        super().__init__(model)
        self.py: PythonSide | None = None
        self.phase = "forward"
        self.scope_outputs: dict[int, list[Slot]] = {}

    def attach(self, py: PythonSide) -> None:
        self.py = py

    @property
    def current_scope(self) -> int:
        return self.py.current_scope if self.py is not None else 0

    def _attribute_of_running_module(self, t: Tensor) -> tuple[str, str | None]:
        if self.py is None:
            return super()._attribute_of_running_module(t)
        return self.py._attribute_of_running_module(t)

    def open_inputs(self) -> None:
        for path, t in self._pending_inputs:
            self._new_leaf("input", path, t)
        self._pending_inputs = []

    def close_scope(self, scope: int, output: Any) -> None:
        self.scope_outputs[scope] = [self.ref(t) for _, t in iter_tensors(output, "")]
        self.timeline.append(-(scope + 1))

    def link_python_op(self, start: int, link: dict[str, Any]) -> None:
        for record in self.nodes[start:]:
            if record.kind == "op":
                record.extra["python_op"] = link

    def finish(self) -> None:
        """Scopes (with ATen-level outputs) and failure, taken from the Python side."""
        assert self.py is not None
        self.scopes = [replace(s, outputs=self.scope_outputs.get(i, [])) for i, s in enumerate(self.py.scopes)]
        self.failure = self.py.failure

    # -- recording -------------------------------------------------------------

    def _split_call(self, func: Any, args: tuple, kwargs: dict) -> tuple[list[Tensor], Any, Any, list[Tensor]]:
        """(tensors read, argument templates, tensors written). ``out=`` arguments are written, not read."""
        written: list[Tensor] = []
        write_only: set[str] = set()
        for position, name, kwarg_only in _written_arguments(func):
            value = args[position] if position < len(args) else kwargs.get(name)
            tensors_flat(value, written)
            if kwarg_only:
                write_only.add(name)
        written += _unmarked_writes(func, args)
        reads: list[Tensor] = []
        template = [split_tensors(a, reads) for a in args]
        kw_template = {k: split_tensors(v, reads) for k, v in kwargs.items() if k not in write_only} or None
        return reads, template, kw_template, written

    def _user_frame(self) -> Any:
        calling = self.py.calling if self.py is not None else None
        return calling if calling is not None else _source.user_frame(sys._getframe(2))

    def record(self, func: Any, args: tuple, kwargs: dict, result: Any) -> int:
        ins, template, kw_template, written = self._split_call(func, args, kwargs)
        refs = [self.ref(t) for t in ins]
        extra: dict[str, Any] = {"phase": self.phase}
        outs: list[Tensor] = []
        tensors_flat(result if isinstance(result, (tuple, list)) else [result], outs)
        if not outs and result is not None:  # aten._local_scalar_dense (x.item()), aten.equal...
            extra["returns"] = encode(result)
        # A written argument that is not returned (batch norm's running stats) is one more output.
        outs += [t for t in written if not any(t is o for o in outs)]
        user = self._user_frame()
        index = len(self.nodes)
        self.nodes.append(
            NodeRecord(
                "op", self.current_scope, refs, target=str(func), outputs=[_meta(t) for t in outs],
                args=template, kwargs=kw_template, inplace=bool(written),
                code=user.f_code if user else None, line=user.f_lineno if user else 0, frame=id(user) if user else 0,
                extra=extra,
            )
        )
        self.produced(index, outs, written)
        return index

    def record_failure(self, func: Any, args: tuple, kwargs: dict, exc: BaseException) -> None:
        ins, template, kw_template, _ = self._split_call(func, args, kwargs)
        refs = [self.ref(t) for t in ins]
        user = self._user_frame()
        self.nodes.append(
            NodeRecord(
                "op", self.current_scope, refs, target=str(func), args=template, kwargs=kw_template,
                code=user.f_code if user else None, line=user.f_lineno if user else 0, frame=id(user) if user else 0,
                error=f"{type(exc).__name__}: {exc}".splitlines()[0][:300], extra={"phase": self.phase},
            )
        )


class AtenMode(TorchDispatchMode):
    """Sends every op that reaches the dispatcher's Python key to an ``AtenStore``."""

    def __init__(self, store: AtenStore, after: Callable[[int, Any], None] | None = None) -> None:
        super().__init__()
        self.store = store
        self.after = after  # backward capture: learns each forward record's autograd node

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        try:
            result = func(*args, **kwargs)
        except Exception as exc:
            self.store.record_failure(func, args, kwargs, exc)
            raise
        if getattr(func, "overloadpacket", None) in _METADATA_OPS:
            return result
        index = self.store.record(func, args, kwargs, result)
        if self.after is not None:
            self.after(index, result)
        return result


class AtenSession:
    """The Python recorder, the ATen store and the dispatch mode for one capture."""

    def __init__(
        self,
        model: Any,
        args: tuple,
        kwargs: dict,
        progress: Callable[[int], None] | None = None,
        store: AtenStore | None = None,
        after: Callable[[int, Any], None] | None = None,
    ) -> None:
        self.model = model
        self.store = store if store is not None else AtenStore(model)
        self.py = PythonSide(model, self.store, progress=progress)
        inputs = list(iter_tensors(args, "args")) + list(iter_tensors(kwargs, "kwargs"))
        self.py.add_inputs(inputs)
        self.store.add_inputs(inputs)
        self.mode = AtenMode(self.store, after)

    def open_root(self) -> None:
        if not isinstance(self.model, torch.nn.Module):
            model = self.model
            self.py.open_root(f"{type(model).__module__}.{getattr(model, '__qualname__', type(model).__qualname__)}")

    def build(self, output: Any) -> GraphIR:
        self.store.finish()
        return build_graph(self.store, output, self.model, level="aten")


def capture_aten(
    model: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    progress: Callable[[int], None] | None = None,
    partial: bool = False,
) -> tuple[GraphIR, Any, BaseException | None]:
    """Run ``model(*args, **kwargs)`` once, recording the ATen ops it dispatches.

    Same contract as ``capture_python``: returns the graph (``meta["level"] ==
    "aten"``), the model's output, and with ``partial=True`` the exception that
    stopped the forward pass.
    """
    from . import TraceError, _describe_failure, unwrap_model  # the package imports this module

    model = unwrap_model(model)
    session = AtenSession(model, args, kwargs, progress)
    output: Any = None
    error: BaseException | None = None
    try:
        with session.py, session.mode:
            session.open_root()
            output = model(*args, **kwargs)
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as exc:
        note = _describe_failure(session.py, exc)
        if not partial:
            exc.add_note(note)
            raise
        error = exc
    if not session.py.scopes:
        raise TraceError("torchatlas: the model recorded no module call; is it an nn.Module or a callable?")
    return session.build(output), output, error
