"""The Python level: every torch function, Tensor method, operator and factory call.

A ``TorchFunctionMode`` sees each call; the call runs, and a record of it (what it
read, made and wrote, where in user code it ran) goes into the ``Recording``.
Calls that make nothing (``x.shape``) or compute nothing (``x.contiguous()`` on a
contiguous tensor) are not recorded, so readers keep reading the original value;
but a *module call* that returns its input unchanged (eval Dropout, Identity) is:
it becomes one node in its own scope. Calls that torch runs in C++ where no op can
be seen (TorchScript) become one opaque node that reads their tensor arguments.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from .._ops import op_name
from .._text import error_text
from . import _distributed, _naming, _source
from ._boundaries import Boundaries
from ._calls import CallInfo, call_info
from ._dataflow import DataFlow, raw_meta
from ._reads import read_tensors, read_value
from ._records import Failure, NodeRecord, Recording
from ._scopes import ScopeTracker
from ._sizes import ValueSizes
from ._values import TENSOR_ARGS, ShapeArg, TensorArg, split_tensors, tensors_flat
from ._writes import written_by

Tensor = torch.Tensor
_UNSEEN = object()


class PythonLevel(TorchFunctionMode):
    """Records Python-level calls into a :class:`Recording` and listens to module calls."""

    def __init__(
        self,
        recording: Recording,
        tracker: ScopeTracker,
        inputs: list[tuple[str, Tensor]],
        progress: Callable[[int], None] | None = None,
    ) -> None:
        super().__init__()
        self.recording = recording
        self.nodes = recording.nodes
        self.tracker = tracker
        self.flow = DataFlow(recording, lambda: tracker.current, tracker.classify)
        self.boundaries = Boundaries(recording, self.flow, tracker, inputs, self._passed_by)
        self._progress = progress
        self._next_progress = 1024
        self._failures: list[Failure] = []
        # Calls that returned an argument unchanged, per scope: id(result) -> (func, args, kwargs).
        self._aliases: dict[int, dict[int, tuple[Any, tuple, dict]]] = {}
        self._opaque: dict[int, list[Tensor]] = {}  # scope index -> tensor arguments of a TorchScript call
        self._operators: dict[tuple[Any, int, Any], str | None] = {}  # (code, instruction, func) -> operator name
        self._value_sizes = ValueSizes(self.nodes)
        self.groups = _distributed.Groups()
        """The process groups this trace's collectives ran over."""
        self.dtensors = False
        """A process group exists: ops on DTensors are watched for the collectives they run."""
        self._redirects: dict[tuple[int, int], tuple[int, int]] | None = None
        """While an op on DTensors is recorded: value -> the collective that redistributed it."""
        self._operands: list[Tensor] = []
        """The tensors that op was given."""
        self.observer: Any = None
        """The ATen level, when it runs alongside: told where each Python call starts and ends."""
        self.watchers: list[Any] = []
        """Told of each op recorded, with its output tensors (run-time statistics, kept activations)."""
        self.timer: Any = None
        """Numbers each call, so that an untraced timing pass can time the op it made."""

    # -- module calls -------------------------------------------------------------------

    def scope_entered(self, index: int, module: Any, args: tuple, kwargs: dict) -> None:
        self.boundaries.scope_entered(index, module, args, kwargs)
        if isinstance(module, torch.jit.ScriptModule):
            found: list[Tensor] = []
            tensors_flat([*args, *kwargs.values()], found)
            self._opaque[index] = found

    def scope_exited(self, index: int, module: Any, output: Any) -> None:
        opaque = self._opaque.pop(index, None)
        if opaque is not None:
            scope = self.tracker.scopes[index]
            name = getattr(module, "original_name", type(module).__name__)
            self.record_opaque(f"{name}.forward", opaque, output, scope.code, scope.line, scope.frame, index)
        self.boundaries.scope_exited(index, module, output)
        self._aliases.pop(index, None)

    def _passed_by(self, index: int, t: Tensor) -> tuple[str, list[Any], dict[str, Any] | None] | None:
        """The op inside call ``index`` that returned ``t`` unchanged (F.dropout with training=False)."""
        call = self._aliases.get(index, {}).get(id(t))
        if call is None:
            return None
        func, args, kwargs = call
        tensors, template, kw_template = _split_call(args, kwargs)
        if len(tensors) != 1:
            return None
        return call_info(func).target, template, kw_template

    # -- ops ---------------------------------------------------------------------------------

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if kwargs is None:
            kwargs = {}
        if self.observer is not None or self.timer is not None:
            return self._observed_call(func, args, kwargs, sys._getframe(1))
        if self.dtensors and _distributed.has_dtensor(args, kwargs):
            return self._dtensor_call(func, args, kwargs, sys._getframe(1))
        try:
            result = func(*args, **kwargs)
        except BaseException as exc:
            self._failed(func, args, kwargs, exc, sys._getframe(1))
            raise
        self.record_call(func, args, kwargs, result, sys._getframe(1))
        return result

    def _dtensor_call(self, func: Any, args: tuple, kwargs: dict, caller: Any) -> Any:
        """An op on DTensors: the collectives its redistributions run inside it become nodes
        before it, and it reads their results instead of the values they redistributed."""
        self._redirects = {}
        self._operands = []
        tensors_flat([*args, *kwargs.values()], self._operands)
        try:
            try:
                result = func(*args, **kwargs)
            except BaseException as exc:
                self._failed(func, args, kwargs, exc, caller)
                raise
            self.record_call(func, args, kwargs, result, caller)
        finally:
            self._redirects, self._operands = None, []
        return result

    def run_inner_collective(self, packet: Any, args: tuple, kwargs: dict, caller: Any) -> Any:
        """A functional collective an op on DTensors runs inside itself (this mode is off the
        stack there): a node before the op, which then reads its result."""
        result = packet(*args, **kwargs)
        redirects = self._redirects
        if redirects is None:
            return result
        with torch._C.DisableTorchFunction():
            before = _distributed.inner_reads(self.flow, redirects, args, kwargs, caller, self._operands)
        if self._distributed_call(call_info(packet), args, kwargs, result, caller):
            _distributed.redirect(redirects, before, (len(self.nodes) - 1, 0))
        return result

    def _observed_call(self, func: Any, args: tuple, kwargs: dict, caller: Any) -> Any:
        """A call the ATen level watches (which Python op its ATen ops came from) or the timer numbers."""
        observer, timer = self.observer, self.timer
        start = observer.python_call_started(caller) if observer is not None else 0
        if observer is not None and call_info(func).role == "plumbing":
            # DTensor's x.view_as(x): the ATen ops it runs pass the value on too
            observer.folding = _distributed.is_plumbing(call_info(func).target, args)
        recorded = len(self.nodes)
        try:
            try:
                call = timer.next_call() if timer is not None else 0
                result = func(*args, **kwargs)
            except BaseException as exc:
                self._failed(func, args, kwargs, exc, caller)
                raise
            self.record_call(func, args, kwargs, result, caller)
            if timer is not None and len(self.nodes) > recorded:
                timer.assign(call, len(self.nodes) - 1)
            return result
        finally:
            if observer is not None:
                observer.folding = False
                made = len(self.nodes) > recorded and self.nodes[-1].kind == "op"
                target = self.nodes[-1].target if made else call_info(func).target
                observer.python_call_ended(start, target, len(self.nodes) - 1 if made else None)

    def _failed(self, func: Any, args: tuple, kwargs: dict, exc: BaseException, caller: Any) -> None:
        if not isinstance(exc, (KeyboardInterrupt, SystemExit)):
            self._quietly(self.record_failure, call_info(func).target, func, args, kwargs, exc, caller)

    def record_call(self, func: Any, args: tuple, kwargs: dict, result: Any, caller: Any) -> None:
        info = call_info(func)
        if info.role is not None and self._distributed_call(info, args, kwargs, result, caller):
            return
        if isinstance(result, Tensor):
            outs = [result]
        elif isinstance(result, (tuple, list)) and type(result) is not torch.Size:
            outs = []
            tensors_flat(result, outs)
        else:
            outs = []
        writes = written_by(info.writes, info.repoints, args, kwargs) if info.may_write or kwargs else None
        if not writes:
            # Nothing made (x.shape, x.item()) or nothing computed (x.to(x.dtype), x.contiguous()
            # when contiguous): not recorded, so readers keep reading the original value.
            if not outs:
                if info.python_read is not None:
                    self._quietly(self._note_read, info.python_read, args, result, caller)
                return
            if _naming.is_metadata_query(func):  # x._base (FSDP2 asks it): a tensor that exists already
                return
            if len(outs) == 1:
                for a in args:
                    if a is result:
                        self._aliases.setdefault(self.tracker.current, {})[id(result)] = (func, args, kwargs)
                        return
        else:
            # A written tensor the op does not return (x[i] = v, running stats) is an extra output.
            outs = outs + [t for t in writes if not any(t is o for o in outs)]
        with torch._C.DisableTorchFunction():  # our tensor queries reach no override (see _quietly)
            self._record_op(info, func, args, kwargs, outs, writes or (), caller)

    def _distributed_call(self, info: CallInfo, args: tuple, kwargs: dict, result: Any, caller: Any) -> bool:
        """Fold a wrapping call into the value it passes on; record a functional collective with
        its facts and wait for it. True when the call is dealt with."""
        with torch._C.DisableTorchFunction():
            if info.role == "plumbing":
                if not isinstance(result, Tensor) or not _distributed.is_plumbing(info.target, args):
                    return False
                if result is not args[0]:
                    self.flow.alias(result, args[0])
                return True
            outs: list[Tensor] = []
            tensors_flat(result, outs)
            reads: list[Tensor] = []
            tensors_flat([*args, *kwargs.values()], reads)
            group = _distributed.functional_group(args, kwargs)
            if not outs or group is None:
                return False
            self._record_op(info, None, args, kwargs, outs, (), caller)
            name = op_name(info.target)
            record = self.nodes[-1]
            details = _distributed.functional_details(self.groups, name, group, args, kwargs)
            facts = _distributed.collective_facts(self.groups, name, group, reads, outs, caller, details)
            record.extra = {**(record.extra or {}), "collective": facts}
            _distributed.wait_for(outs)
        return True

    def run_collective(self, call: _distributed.C10dCall, args: tuple, kwargs: dict, caller: Any) -> Any:
        """Run a ``torch.distributed`` collective (C++, unseen by the mode), recording it as one
        in-place op: it reads what it sends and writes what it receives."""
        start = self.observer.python_call_started(caller) if self.observer is not None else 0
        recorded = len(self.nodes)
        try:
            with torch._C.DisableTorchFunction():
                reads, writes, group = call.tensors(args, kwargs)
                refs = self.flow.refs(reads)
                # a buffer it receives into is read for its shape: what allocated it is needed
                buffers = self.flow.refs([t for t in writes if not any(t is r for r in reads)])
            try:
                with torch._C.DisableTorchFunction():
                    result = call.original(*args, **kwargs)
                    call.deliver(args, kwargs)
            except BaseException as exc:
                if not isinstance(exc, (KeyboardInterrupt, SystemExit)):
                    self._quietly(self.record_failure, call.target, None, tuple(reads), {}, exc, caller)
                raise
            self._quietly(self._record_collective, call, args, kwargs, refs, buffers, reads, writes, group, caller)
            return result
        finally:
            if self.observer is not None:
                made = len(self.nodes) > recorded
                self.observer.python_call_ended(start, call.target, len(self.nodes) - 1 if made else None)

    def _record_collective(
        self, call: _distributed.C10dCall, args: tuple, kwargs: dict, refs: list[Any], buffers: list[Any],
        reads: list[Tensor], writes: list[Tensor], group: Any, caller: Any,
    ) -> None:
        user, _ = _source.user_frame_and_entry(caller)
        index = len(self.nodes)
        self.nodes.append(
            NodeRecord(
                "op", self.tracker.current, refs, call.target, None, [raw_meta(t) for t in writes],
                [TENSOR_ARGS[i] for i in range(len(refs))], None, bool(writes),
                user.f_code if user else None, user.f_lineno if user else 0, self.tracker.frames(user), False,
                extra={"collective": _distributed.collective_facts(
                    self.groups, call.name, group, reads, writes, caller, call.details(args, kwargs)
                )},
                shape_inputs=buffers or None,
            )
        )
        self.flow.produced(index, writes, writes)
        for watcher in self.watchers:
            watcher.op_recorded(index, writes)

    @staticmethod
    def _quietly(record: Callable[..., Any], *args: Any) -> Any:
        """Run bookkeeping out of sight of torch-function overrides: a user's own mode, and
        tensor subclasses whose ``__torch_function__`` would see (or refuse) ``t.shape``."""
        with torch._C.DisableTorchFunction():
            return record(*args)

    def _record_op(
        self, info: CallInfo, func: Any, args: tuple, kwargs: dict, outs: list[Tensor], writes: Any, caller: Any
    ) -> None:
        target = info.target
        if info.operator:
            # One answer per instruction: a loop's ``x = x + 1`` reads its bytecode once.
            where = (caller.f_code, caller.f_lasti, func)
            written = self._operators.get(where, _UNSEEN)
            if written is _UNSEEN:
                written = self._operators[where] = _naming.operator_name(func, caller)
            target = written or target
        if info.repoints:  # x.data = y reads y only: x's old value flows nowhere
            args = args[1:]
        shape_tensors: list[Tensor] = []
        if info.shape_only:
            tensors, template, kw_template, shape_tensors = _separate_shape_reads(args, kwargs, info.shape_only)
        else:
            tensors, template, kw_template = _split_call(args, kwargs)
        if writes and "out" in kwargs:
            # The buffer an out= call writes into is read for its shape: what allocated it is needed.
            kw_template = {**(kw_template or {}), "out": _shape_reads(kwargs["out"], shape_tensors)}
        shape_refs = self.flow.refs(shape_tensors) if shape_tensors else None
        refs = self.flow.refs(tensors)
        if self._redirects:
            refs = [_distributed.redirected(self._redirects, r) for r in refs]
        user, entry = _source.user_frame_and_entry(caller)
        index = len(self.nodes)
        stack = self.tracker.stack
        try:
            metas = [(o.shape, o.dtype, o.device) if type(o) is Tensor else raw_meta(o) for o in outs]
        except RuntimeError:  # a nested tensor, whose ragged dims have no size
            metas = [raw_meta(o) for o in outs]
        self.nodes.append(
            NodeRecord(
                "op", stack[-1][0] if stack else 0, refs, target, None,
                metas, template, kw_template, bool(writes),
                user.f_code if user else None, user.f_lineno if user else 0, self.tracker.frames(user),
                # Called by the user's line itself (not by library code it called): only then
                # can the line's assignment have bound this op's result.
                entry is None or entry is info.code, None, None, shape_refs,
            )
        )
        self.flow.produced(index, outs, writes)
        for watcher in self.watchers:
            watcher.op_recorded(index, outs)
        if self._progress is not None and index >= self._next_progress:
            self._next_progress += 1024
            self._progress(index)

    def _note_read(self, how: str, args: tuple, result: Any, caller: Any) -> None:
        """Note on the node that made a tensor that Python read its value (or its size) here.
        A size is noted once per node: library code reads sizes often, and one says enough. A
        size its values decided (``len(torch.nonzero(m))``) is a ``count``, noted once per line."""
        for t in read_tensors(how, args):
            made = self.flow.lookup(t) if how == "size" else self.flow.known(t)
            if made is None:
                continue
            record = self.nodes[made[0]]
            reads = record.reads
            kind = how
            if how == "size":
                if self._value_sizes.decided_by_values(made[0]):
                    kind = "count"
                elif reads is not None and any(r[0] == "size" for r in reads):
                    continue
            user = _source.user_frame(caller)
            if kind == "count" and reads is not None:
                here = (user.f_code, user.f_lineno) if user else (None, 0)
                if any(r[0] == "count" and (r[2], r[3]) == here for r in reads):
                    continue
            value = read_value(kind, result)
            read = (kind, made[1], user.f_code, user.f_lineno, value, user.f_lasti) if user else (kind, made[1], None, 0, value, -1)
            if reads is None:
                record.reads = [read]
            else:
                reads.append(read)

    def run_opaque(self, target: str, call: Callable[..., Any], args: tuple, kwargs: dict, caller: Any) -> Any:
        """Run a call torch runs where no op can be seen (a TorchScript function), recording it as one node."""
        start = self.observer.python_call_started(caller) if self.observer is not None else 0
        recorded = len(self.nodes)
        try:
            try:
                result = call(*args, **kwargs)
            except BaseException as exc:
                if not isinstance(exc, (KeyboardInterrupt, SystemExit)):
                    self._quietly(self.record_failure, target, None, args[1:], kwargs, exc, caller)
                raise
            reads: list[Tensor] = []
            tensors_flat(list(args[1:]) + list(kwargs.values()), reads)
            user = _source.user_frame(caller)
            where = (user.f_code, user.f_lineno, self.tracker.frames(user)) if user is not None else (None, 0, 0)
            self._quietly(self.record_opaque, target, reads, result, *where)
            return result
        finally:
            if self.observer is not None:
                made = len(self.nodes) > recorded
                self.observer.python_call_ended(start, target, len(self.nodes) - 1 if made else None)

    def record_opaque(
        self, target: str, reads: list[Tensor], result: Any, code: Any, line: int, frame: int, scope: int | None = None
    ) -> None:
        """One node for a call we cannot see into: it reads ``reads`` and makes ``result``'s tensors."""
        outs: list[Tensor] = []
        tensors_flat(result if isinstance(result, (tuple, list, dict)) else [result], outs)
        refs = self.flow.refs(reads)
        index = len(self.nodes)
        self.nodes.append(
            NodeRecord(
                "op", self.tracker.current if scope is None else scope, refs, target, None,
                [raw_meta(t) for t in outs], [TensorArg(i) for i in range(len(refs))], None, False,
                code, line, frame, extra={"opaque": "torchscript"},
            )
        )
        self.flow.produced(index, outs, [])
        for watcher in self.watchers:
            watcher.op_recorded(index, outs)

    # -- failures ------------------------------------------------------------------------------

    def record_failure(self, target: str, func: Any, args: tuple, kwargs: dict, exc: BaseException, caller: Any) -> None:
        user = _source.user_frame(caller)
        if func is not None:
            target = _naming.operator_name(func, caller) or target
        tensors, template, kw_template = _split_call(args, kwargs)
        refs = [self.flow.ref(t) for t in tensors]
        self.nodes.append(
            NodeRecord(
                "op", self.tracker.current, refs, target=target, args=template, kwargs=kw_template,
                code=user.f_code if user else None, line=user.f_lineno if user else 0, frame=self.tracker.frames(user),
                error=error_text(exc),
            )
        )
        self._failures.append(
            Failure(target, self.tracker.current, user.f_code if user else None, user.f_lineno if user else 0,
                    len(self.nodes) - 1, exc)
        )

    def settle_failures(self, escaped: BaseException | None) -> None:
        """Keep as *the* failure the op whose error escaped forward; errors the model caught
        itself only mark their op (``caught_error``)."""
        chain = set()
        while escaped is not None and id(escaped) not in chain:
            chain.add(id(escaped))
            escaped = escaped.__cause__ or escaped.__context__
        for failure in self._failures:
            if failure.exc is not None and id(failure.exc) in chain:
                self.recording.failure = failure
            else:
                record = self.nodes[failure.record]
                record.extra = {**(record.extra or {}), "caught_error": record.error}
                record.error = None
            failure.exc = None  # drop the traceback and the frames it holds
        self._failures = []

    def release(self) -> None:
        """Forget every tensor seen, so nothing of the forward pass outlives it."""
        self.flow.clear()
        self._aliases.clear()
        self._opaque.clear()
        self._operators.clear()
        self.boundaries.release()


def _split_call(args: tuple, kwargs: dict) -> tuple[list[Tensor], list[Any], dict[str, Any] | None]:
    """Tensor inputs in argument order, and the call's templates (``out=`` is a write, not a read)."""
    tensors: list[Tensor] = []
    template = []
    for a in args:  # the common case inline: a tensor or a plain value
        if isinstance(a, Tensor):
            template.append(TENSOR_ARGS[len(tensors)] if len(tensors) < 64 else TensorArg(len(tensors)))
            tensors.append(a)
        elif type(a) in _CONTAINERS:
            template.append(split_tensors(a, tensors))
        else:
            template.append(a)
    kw_template = {k: split_tensors(v, tensors) for k, v in kwargs.items() if k != "out"} if kwargs else None
    return tensors, template, kw_template


_CONTAINERS = (list, tuple, dict)


def _shape_reads(value: Any, shapes: list[Tensor]) -> Any:
    """The template of an argument read for its shape only, each tensor a ``ShapeArg``."""
    if isinstance(value, Tensor):
        shapes.append(value)
        return ShapeArg(len(shapes) - 1)
    if isinstance(value, (list, tuple)):
        return [_shape_reads(v, shapes) for v in value]
    return value


def _separate_shape_reads(
    args: tuple, kwargs: dict, shape_only: tuple[tuple[int, str], ...]
) -> tuple[list[Tensor], list[Any], dict[str, Any] | None, list[Tensor]]:
    """Like ``_split_call``, with the shape-only arguments as ``{"shape_of": i}`` in their own list."""
    positions = {p for p, _ in shape_only}
    names = {n for _, n in shape_only}
    tensors: list[Tensor] = []
    shapes: list[Tensor] = []

    def split(value: Any, shape: bool) -> Any:
        if shape and isinstance(value, Tensor):
            shapes.append(value)
            return ShapeArg(len(shapes) - 1)
        return split_tensors(value, tensors)

    template = [split(a, i in positions) for i, a in enumerate(args)]
    kw_template = {k: split(v, k in names) for k, v in kwargs.items() if k != "out"} if kwargs else None
    return tensors, template, kw_template, shapes
