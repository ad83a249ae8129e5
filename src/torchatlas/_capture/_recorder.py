"""Records one forward pass at the level of the Python torch API.

A ``TorchFunctionMode`` sees every torch function, Tensor method, operator and
factory call; global module hooks see every ``nn.Module`` call. Data flow is
tracked by tensor identity (weak references, never kept alive) plus, for
in-place writes, the storage each tensor aliases: a reader of a tensor whose
storage was written after the tensor was made reads from the last writer.
"""

from __future__ import annotations

import gc
import sys
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from . import _naming, _source
from ._values import iter_tensors, split_tensors, tensors_flat

Tensor = torch.Tensor
_tls = threading.local()

# (producer record index, output slot): an edge while recording, before ids exist
Slot = tuple[int, int]


def active_recorder() -> Recorder | None:
    return getattr(_tls, "recorder", None)


@dataclass(slots=True)
class NodeRecord:
    kind: str
    scope: int
    inputs: list[Slot]
    target: str | None = None
    path: str | None = None
    outputs: list[tuple[tuple[Any, ...], Any, Any]] = field(default_factory=list)
    args: Any = None
    kwargs: Any = None
    inplace: bool = False
    code: Any = None  # code object of the user frame that ran it
    line: int = 0
    frame: int = 0  # id() of that frame, only to group ops by line execution
    error: str | None = None
    extra: dict[str, Any] | None = None


@dataclass(slots=True)
class ScopeRecord:
    parent: int | None
    path: str
    cls: str
    call: int
    code: Any
    line: int
    frame: int
    outputs: list[Slot] = field(default_factory=list)


@dataclass(slots=True)
class Failure:
    """An op that raised during the forward pass."""

    target: str | None
    scope: int | None
    code: Any
    line: int
    record: int
    exc: BaseException | None


class Recorder(TorchFunctionMode):
    """Collects node and scope records; ``_build.py`` turns them into a ``GraphIR``."""

    def __init__(self, model: Any, progress: Callable[[int], None] | None = None) -> None:
        super().__init__()
        self.nodes: list[NodeRecord] = []
        self.scopes: list[ScopeRecord] = []
        self.timeline: list[int] = []  # op index, or -(scope index + 1) when a scope returns
        self.failure: Failure | None = None  # the failure that escaped forward, once it returned
        self._failures: list[Failure] = []
        self._progress = progress
        self._next_progress = 1024
        self._stack: list[tuple[int, Any]] = []  # (scope index, module)
        self._producer: dict[int, tuple[Any, int, int]] = {}  # id(t) -> (weakref, record, slot)
        self._writes: dict[int, Slot] = {}  # storage key -> last writer
        self._calls: dict[str, int] = {}
        self._model = model
        self._module_paths: dict[int, str] = {}
        self._unregistered: dict[int, tuple[Any, str]] = {}
        self._unregistered_count: dict[str, int] = {}
        self._class_names: dict[type, str] = {}
        self._named: dict[int, tuple[str, str]] = {}  # id(param or buffer) -> (kind, path)
        self.parameters: list[tuple[str, Tensor]] = []  # (path, tensor), shared ones under each path
        self.buffers: list[tuple[str, Tensor]] = []
        self._pending_inputs: list[tuple[str, Tensor]] = []
        if isinstance(model, torch.nn.Module):
            self._index_model(model)
        self._hooks: list[Any] = []
        self._quiet = False
        self._frozen = False

    # -- set-up -------------------------------------------------------------

    def _index_model(self, model: torch.nn.Module) -> None:
        """One walk of the model: module paths, and every parameter and buffer under each
        name it has (the order of ``named_parameters(remove_duplicate=False)``)."""
        self.parameters, self.buffers = [], []
        for name, module in model.named_modules(remove_duplicate=False):
            self._module_paths.setdefault(id(module), name)
            prefix = f"{name}." if name else ""
            for table, kind, out in (
                (module._parameters, "param", self.parameters),
                (module._buffers, "buffer", self.buffers),
            ):
                for attr, t in table.items():
                    if t is not None:
                        out.append((prefix + attr, t))
                        self._named.setdefault(id(t), (kind, prefix + attr))

    def add_inputs(self, named: list[tuple[str, Tensor]]) -> None:
        """Inputs are recorded in the root scope as soon as it opens."""
        self._pending_inputs.extend(named)

    def open_root(self, cls: str) -> None:
        """For a plain callable (no module call to hook), open the root scope by hand."""
        self._push_scope(None, "", cls, None)

    def __enter__(self) -> Recorder:
        if active_recorder() is not None:
            raise RuntimeError("torchatlas.trace cannot run inside another torchatlas.trace in the same thread")
        _tls.recorder = self
        # Full collections would walk every object the process already holds (the model,
        # torch) again and again as our records accumulate; frozen objects are skipped,
        # while garbage the forward pass makes is still collected.
        gc.freeze()
        self._frozen = True
        # Under a user's own TorchFunctionMode, our bookkeeping (t.shape, ...) must not reach it.
        self._quiet = torch._C._len_torch_function_stack() > 0
        try:
            self._hooks = [
                torch.nn.modules.module.register_module_forward_pre_hook(self._module_enter_hook),
                torch.nn.modules.module.register_module_forward_hook(self._module_exit_hook, always_call=True),
            ]
            super().__enter__()
        except BaseException:
            self._uninstall()
            raise
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            super().__exit__(exc_type, exc, tb)
        finally:
            self._uninstall()
            self._settle_failures(exc)

    def _settle_failures(self, escaped: BaseException | None) -> None:
        """Keep as *the* failure the op whose error escaped forward; errors the model
        caught itself only mark their op (``caught_error``)."""
        chain = set()
        while escaped is not None and id(escaped) not in chain:
            chain.add(id(escaped))
            escaped = escaped.__cause__ or escaped.__context__
        for failure in self._failures:
            if failure.exc is not None and id(failure.exc) in chain:
                self.failure = failure
            else:
                record = self.nodes[failure.record]
                record.extra = {**(record.extra or {}), "caught_error": record.error}
                record.error = None
            failure.exc = None  # drop the traceback and the frames it holds
        self._failures = []

    def _uninstall(self) -> None:
        if self._frozen:
            gc.unfreeze()
            self._frozen = False
        for handle in self._hooks:
            handle.remove()
        self._hooks = []
        if active_recorder() is self:
            del _tls.recorder
        self._stack.clear()

    # -- module scopes --------------------------------------------------------

    def _module_path(self, module: Any) -> str:
        path = self._module_paths.get(id(module))
        if path is None and isinstance(self._model, torch.nn.Module):
            self._index_model(self._model)  # forward may have attached new submodules
            path = self._module_paths.get(id(module))
        return path if path is not None else self._unregistered_path(module)

    def _unregistered_path(self, module: Any) -> str:
        """``parent.<Linear>``, ``parent.<Linear:1>``... for modules the model does not register
        (plain lists, made inside forward): one path per module object, so calls count right."""
        known = self._unregistered.get(id(module))
        if known is not None and known[0]() is module:
            return known[1]
        parent = self.scopes[self._stack[-1][0]].path if self._stack else ""
        base = f"{parent}.<{type(module).__name__}" if parent else f"<{type(module).__name__}"
        index = self._unregistered_count.get(base, 0)
        self._unregistered_count[base] = index + 1
        path = f"{base}:{index}>" if index else f"{base}>"
        self._unregistered[id(module)] = (weakref.ref(module), path)
        return path

    def _push_scope(self, module: Any, path: str, cls: str, frame: Any) -> None:
        user = _source.user_frame(frame)
        call = self._calls.get(path, 0)
        self._calls[path] = call + 1
        parent = self._stack[-1][0] if self._stack else None
        self.scopes.append(
            ScopeRecord(
                parent, path, cls, call,
                user.f_code if user else None, user.f_lineno if user else 0, id(user) if user else 0,
            )
        )
        self._stack.append((len(self.scopes) - 1, module))
        if self._pending_inputs:
            seen: set[int] = set()
            for input_path, t in self._pending_inputs:
                if id(t) not in seen:  # one tensor passed twice is one input, under its first path
                    seen.add(id(t))
                    self._new_leaf("input", input_path, t)
            self._pending_inputs = []

    def _module_enter_hook(self, module: Any, args: Any) -> None:
        if active_recorder() is not self:
            return
        if self._quiet:
            with torch._C.DisableTorchFunction():  # a user's mode must not see our tensor queries
                self._on_module_enter(module, args)
        else:
            self._on_module_enter(module, args)

    def _module_exit_hook(self, module: Any, args: Any, output: Any) -> None:
        if active_recorder() is not self:
            return
        if self._quiet:
            with torch._C.DisableTorchFunction():
                self._on_module_exit(module, args, output)
        else:
            self._on_module_exit(module, args, output)

    def module_path_of(self, module: Any) -> str:
        """The qualified path of a module of this model (as in ``named_modules()``)."""
        return self._module_path(module)

    def _on_module_enter(self, module: Any, args: Any) -> None:
        cls = type(module)
        name = self._class_names.get(cls)
        if name is None:
            name = self._class_names[cls] = f"{cls.__module__}.{cls.__qualname__}"
        self._push_scope(module, self._module_path(module), name, sys._getframe(1))

    def _on_module_exit(self, module: Any, args: Any, output: Any) -> None:
        while self._stack:  # unwinds scopes left open by an exception
            index, top = self._stack.pop()
            if top is module:
                break
        else:
            return
        scope = self.scopes[index]
        if isinstance(output, Tensor):
            scope.outputs = [self.ref(output)]
        elif output is not None:
            scope.outputs = [self.ref(t) for _, t in iter_tensors(output, "")]
        self.timeline.append(-(index + 1))

    # -- values -----------------------------------------------------------------

    @property
    def current_scope(self) -> int:
        return self._stack[-1][0] if self._stack else 0

    def _register(self, t: Tensor, record: int, slot: int) -> None:
        self._producer[id(t)] = (weakref.ref(t), record, slot)

    def _new_leaf(self, kind: str, path: str | None, t: Tensor) -> Slot:
        index = len(self.nodes)
        self.nodes.append(NodeRecord(kind, self.current_scope, [], path=path, outputs=[_meta(t)]))
        if kind in ("param", "buffer"):
            self.nodes[-1].extra = {"requires_grad": bool(t.requires_grad)}
        self._register(t, index, 0)
        return index, 0

    def _attribute_of_running_module(self, t: Tensor) -> tuple[str, str | None]:
        """(kind, path) of a tensor the model does not register: a parameter, buffer or plain
        tensor attribute of the running module (one the model does not know), else a constant."""
        kind = "param" if isinstance(t, torch.nn.Parameter) else "constant"
        if not self._stack:
            return kind, None
        module = self._stack[-1][1]
        scope_path = self.scopes[self._stack[-1][0]].path
        for table, table_kind in (("_parameters", "param"), ("_buffers", "buffer"), ("__dict__", kind)):
            for attr, value in (getattr(module, table, None) or {}).items():
                if value is t:
                    return table_kind, f"{scope_path}.{attr}" if scope_path else attr
        return kind, None

    def ref(self, t: Tensor) -> Slot:
        """The (record, slot) a read of ``t`` depends on."""
        entry = self._producer.get(id(t))
        if entry is None or entry[0]() is not t:
            named = self._named.get(id(t))
            if named is not None:
                return self._new_leaf(named[0], named[1], t)
            return self._new_leaf(*self._attribute_of_running_module(t), t)
        if self._writes:
            # Not only when t._version moved: writes through ``.data`` bump another counter.
            written = self._writes.get(_storage_key(t))
            if written is not None and written[0] > entry[1]:
                return written
        return entry[1], entry[2]

    # -- ops ---------------------------------------------------------------------

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if kwargs is None:
            kwargs = {}
        try:
            result = func(*args, **kwargs)
        except BaseException as exc:
            if not isinstance(exc, (KeyboardInterrupt, SystemExit)):
                if self._quiet:
                    with torch._C.DisableTorchFunction():
                        self._record_failure(func, args, kwargs, exc, sys._getframe(1))
                else:
                    self._record_failure(func, args, kwargs, exc, sys._getframe(1))
            raise
        if isinstance(result, Tensor):
            outs = [result]
        elif isinstance(result, (tuple, list)) and type(result) is not torch.Size:
            outs = []
            tensors_flat(result, outs)
        else:
            outs = []
        spec = _naming.mutation_spec(func)
        if spec is None and "out" not in kwargs:
            # Nothing made (x.shape, x.item()) or nothing computed (x.to(x.dtype), x.contiguous()
            # when contiguous): not recorded, so readers keep reading the original value.
            if not outs or (len(outs) == 1 and any(a is result for a in args)):
                return result
            written: list[Tensor] = []
        else:
            written = self._written(func, spec, args, kwargs)
            if not written:
                if not outs or (len(outs) == 1 and any(a is result for a in args)):
                    return result
            else:
                # A written tensor the op does not return (x[i] = v, running stats) is an extra output.
                outs = outs + [t for t in written if not any(t is o for o in outs)]
        if self._quiet:
            with torch._C.DisableTorchFunction():
                self._record_op(func, args, kwargs, outs, written, sys._getframe(1))
        else:
            self._record_op(func, args, kwargs, outs, written, sys._getframe(1))
        return result

    def _written(self, func: Any, spec: int | str | None, args: tuple, kwargs: dict) -> list[Tensor]:
        out = kwargs.get("out")
        if out is not None:
            found: list[Tensor] = []
            tensors_flat(out, found)
            return found
        if spec == "stats":
            return _naming.stats_written(func, args, kwargs)
        if spec is None or not args or not isinstance(args[0], Tensor):
            return []
        if spec == "self" or kwargs.get("inplace") or (len(args) > spec and args[spec] is True):
            return [args[0]]
        return []

    def _split_call(self, args: tuple, kwargs: dict) -> tuple[list[Tensor], list[Any], dict[str, Any] | None]:
        """Tensor inputs in argument order, and the call's templates (``out=`` is a write, not a read)."""
        tensors: list[Tensor] = []
        template = [split_tensors(a, tensors) for a in args]
        kw_template = {k: split_tensors(v, tensors) for k, v in kwargs.items() if k != "out"} if kwargs else None
        return tensors, template, kw_template

    def _refs(self, tensors: list[Tensor]) -> list[Slot]:
        if self._writes:
            return [self.ref(t) for t in tensors]
        refs = []
        get = self._producer.get
        for t in tensors:
            entry = get(id(t))
            refs.append((entry[1], entry[2]) if entry is not None and entry[0]() is t else self.ref(t))
        return refs

    def _record_op(self, func: Any, args: tuple, kwargs: dict, outs: list[Tensor], written: list[Tensor], caller: Any) -> None:
        tensors, template, kw_template = self._split_call(args, kwargs)
        refs = self._refs(tensors)
        target = _naming.operator_name(func, caller) or _naming.target_name(func)
        user = _source.user_frame(caller)
        index = len(self.nodes)
        self.nodes.append(
            NodeRecord(
                "op", self._stack[-1][0] if self._stack else 0, refs, target, None,
                [(t.shape, t.dtype, t.device) for t in outs], template, kw_template, bool(written),
                user.f_code if user else None, user.f_lineno if user else 0, id(user) if user else 0,
            )
        )
        self.produced(index, outs, written)
        if self._progress is not None and index >= self._next_progress:
            self._next_progress += 1024
            self._progress(index)

    def produced(self, index: int, outs: list[Tensor], written: list[Tensor]) -> None:
        """Record ``index`` as the producer of ``outs`` and the last writer of ``written``."""
        self.timeline.append(index)
        for slot, t in enumerate(outs):
            self._register(t, index, slot)
        for t in written:
            slot = next((i for i, o in enumerate(outs) if o is t), 0)
            key = _storage_key(t)
            if key is not None:
                self._writes[key] = (index, slot)
            self._register(t, index, slot)

    def _record_failure(self, func: Any, args: tuple, kwargs: dict, exc: BaseException, caller: Any) -> None:
        user = _source.user_frame(caller)
        target = _naming.operator_name(func, caller) or _naming.target_name(func)
        tensors, template, kw_template = self._split_call(args, kwargs)
        refs = [self.ref(t) for t in tensors]
        self.nodes.append(
            NodeRecord(
                "op", self.current_scope, refs, target=target, args=template, kwargs=kw_template,
                code=user.f_code if user else None, line=user.f_lineno if user else 0, frame=id(user) if user else 0,
                error=f"{type(exc).__name__}: {exc}".splitlines()[0][:300],
            )
        )
        self._failures.append(
            Failure(
                target, self.current_scope, user.f_code if user else None, user.f_lineno if user else 0,
                len(self.nodes) - 1, exc,
            )
        )


def _meta(t: Tensor) -> tuple[Any, Any, Any]:
    """Raw (torch.Size, dtype, device): no reference to the tensor, converted at build time."""
    return t.shape, t.dtype, t.device


def _storage_key(t: Tensor) -> int | None:
    try:
        return t.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError, AttributeError):
        return None
