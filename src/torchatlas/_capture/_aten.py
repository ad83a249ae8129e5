"""The ATen level: every op that reaches the dispatcher (``F.linear`` -> ``aten.t`` + ``aten.addmm``).

A ``TorchDispatchMode`` records the ops into their own ``Recording`` with their own
data-flow table. The Python level runs alongside, as at level "python": it keeps the
module scopes, and tells this level which Python call is running, so each ATen
record names the user line and the Python op it came from (``meta["python_op"]``).
"""

from __future__ import annotations

import sys
from functools import lru_cache
from typing import Any, Protocol

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .._ops import collective_kind, op_name
from .._text import error_text
from . import _distributed, _source
from ._boundaries import Boundaries
from ._dataflow import DataFlow, raw_meta
from ._reads import read_value
from ._records import NodeRecord, Recording
from ._scopes import ScopeTracker
from ._values import encode, split_tensors, tensors_flat

Tensor = torch.Tensor

# Metadata queries that reach the Python key only for tensor subclasses (FakeTensor):
# they compute nothing, and make_fx leaves them out too.
_METADATA_OPS = {
    torch.ops.prim.device, torch.ops.prim.layout, torch.ops.aten.sym_size, torch.ops.aten.sym_stride,
    torch.ops.aten.sym_numel, torch.ops.aten.sym_storage_offset, torch.ops.aten.is_contiguous,
    torch.ops.aten.size, torch.ops.aten.stride, torch.ops.aten.dim, torch.ops.aten.numel,
}

# Profiler ranges (FSDP's record_function markers): bookkeeping, not ops.
_MARKERS = {"profiler._record_function_enter", "profiler._record_function_enter_new", "profiler._record_function_exit"}

# Batch norm updates its running stats (arguments 3 and 4) in training, though its
# schema does not mark them written.
_BATCH_NORMS = {
    torch.ops.aten.native_batch_norm.default, torch.ops.aten.cudnn_batch_norm.default,
    torch.ops.aten.miopen_batch_norm.default,
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


def _unmarked_writes(func: Any, args: tuple) -> list[Tensor]:
    if func in _BATCH_NORMS and len(args) > 5 and args[5] is True:
        return [a for a in args[3:5] if isinstance(a, Tensor)]
    return []


class Phase(Protocol):
    """What changes once forward is over (the backward level): whose scope an op takes,
    and what each record learns about autograd."""

    def scope_now(self) -> int | None: ...

    def recorded(self, index: int, result: Any) -> None: ...


class AtenLevel:
    """Records ATen ops into ``recording``; a scope listener like the Python level."""

    def __init__(self, recording: Recording, tracker: ScopeTracker, inputs: list[tuple[str, Tensor]]) -> None:
        self.recording = recording
        self.nodes = recording.nodes
        self.tracker = tracker
        self.flow = DataFlow(recording, self.current_scope, tracker.classify, lambda: {"phase": self.phase})
        self.boundaries = Boundaries(recording, self.flow, tracker, inputs)
        self.phase = "forward"
        self.backward: Phase | None = None
        self.watchers: list[Any] = []
        """Told of each op recorded, with its output tensors (run-time statistics, kept activations)."""
        self.mode = AtenMode(self)
        self._calling: Any = None  # the user frame of the Python call now running
        self.folding = False
        self.dtensors = False
        """A process group exists: ops on DTensors are watched for the collectives they run."""
        self._pending: dict[tuple[int, int], tuple[int, int]] | None = None
        """A Python call that passes its argument on runs (DTensor's ``x.view_as(x)``): its ops do too."""
        self._redirects: dict[tuple[int, int], tuple[int, int]] | None = None
        """While an op on DTensors runs: value -> the collective that redistributed it inside the op."""
        self._operands: list[Tensor] = []
        """The tensors that op was given."""
        self.groups: _distributed.Groups | None = None
        """The process groups this trace's collectives ran over (under a process group)."""

    def current_scope(self) -> int:
        if self.backward is not None:
            scope = self.backward.scope_now()
            if scope is not None:
                return scope
        return self.tracker.current

    # -- the Python level tells which call is running ---------------------------------------

    def python_call_started(self, caller: Any) -> int:
        self._calling = _source.user_frame(caller)
        return len(self.nodes)

    def python_call_ended(self, start: int, target: str | None, python_index: int | None) -> None:
        self._calling = None
        # The mode is off while a call runs, so only this call can have made these records.
        link = {"target": target, "index": python_index}
        for record in self.nodes[start:]:
            if record.kind == "op":
                record.extra["python_op"] = link

    # -- scopes --------------------------------------------------------------------------------

    def scope_entered(self, index: int, module: Any, args: tuple, kwargs: dict) -> None:
        self.boundaries.scope_entered(index, module, args, kwargs)

    def scope_exited(self, index: int, module: Any, output: Any) -> None:
        self.boundaries.scope_exited(index, module, output)

    # -- recording -----------------------------------------------------------------------------

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

    def _where(self) -> tuple[Any, int, int, int]:
        """(code, line, the run of its function, offset of its instruction) of the user line
        running; none in backward."""
        if self.phase == "backward":
            return None, 0, 0, -1
        user = self._calling if self._calling is not None else _source.user_frame(sys._getframe(3))
        return (user.f_code, user.f_lineno, self.tracker.frames(user), user.f_lasti) if user is not None else (None, 0, 0, -1)

    def passed_on(self, func: Any, args: tuple, result: Any) -> bool:
        """A wrapping op (a wait, an autograd wrap of a collective's result) folded into its value."""
        if not isinstance(result, Tensor) or not args or not isinstance(args[0], Tensor):
            return False
        if result is not args[0]:
            self.flow.alias(result, args[0])
        return True

    def run_dtensor_op(self, func: Any, args: tuple, kwargs: dict) -> Any:
        """An op on DTensors: the collectives its redistributions run inside it (this mode off the
        stack there) become nodes before it, and it reads their results."""
        self._redirects = {}
        self._operands = []
        tensors_flat([*args, *kwargs.values()], self._operands)
        try:
            return func(*args, **kwargs)
        finally:
            self._pending, self._redirects, self._operands = self._redirects, None, []

    def run_inner_collective(self, packet: Any, args: tuple, kwargs: dict, caller: Any) -> Any:
        result = packet(*args, **kwargs)
        redirects = self._redirects
        if redirects is not None:
            before = _distributed.inner_reads(self.flow, redirects, args, kwargs, caller, self._operands)
            overload = getattr(packet, "default", packet)
            _distributed.redirect(redirects, before, (self.record(overload, args, kwargs, result), 0))
        return result

    def record(self, func: Any, args: tuple, kwargs: dict, result: Any) -> int:
        ins, template, kw_template, written = self._split_call(func, args, kwargs)
        refs = self.flow.refs(ins)
        pending, self._pending = self._pending, None
        if pending:  # the op on DTensors reads what its redistributions made
            refs = [_distributed.redirected(pending, r) for r in refs]
        # a buffer written without being read (out=) is read for its shape: what allocated it is needed
        buffers = self.flow.refs([t for t in written if not any(t is i for i in ins)]) if written else None
        extra: dict[str, Any] = {"phase": self.phase}
        outs: list[Tensor] = []
        tensors_flat(result if isinstance(result, (tuple, list)) else [result], outs)
        if not outs and result is not None:  # aten._local_scalar_dense (x.item()), aten.equal...
            extra["returns"] = encode(result)
        # A written argument that is not returned (batch norm's running stats) is one more output.
        outs += [t for t in written if not any(t is o for o in outs)]
        code, line, frame, lasti = self._where()
        reads = None
        if "returns" in extra and type(result) in (bool, int, float) and code is not None:
            # The scalar went into Python (``if t:``, ``t.item()``): the op itself is the read.
            how = "bool" if type(result) is bool else "item"
            reads = [(how, 0, code, line, read_value(how, result), lasti)]
        index = len(self.nodes)
        target = str(func)
        if self.groups is not None and collective_kind(target) is not None:
            group = _distributed.aten_group(args, kwargs)
            extra["collective"] = _distributed.collective_facts(
                self.groups, op_name(target), group, [t for t in ins if not any(t is o for o in outs)], outs,
                sys._getframe(2), _distributed.functional_details(self.groups, op_name(target), group, args, kwargs),
            )
            if target.startswith(_distributed.FUNCTIONAL_PREFIX):
                _distributed.wait_for(outs)
        self.nodes.append(
            NodeRecord(
                "op", self.current_scope(), refs, target=target, outputs=[raw_meta(t) for t in outs],
                args=template, kwargs=kw_template, inplace=bool(written), code=code, line=line, frame=frame,
                extra=extra, reads=reads, shape_inputs=buffers or None,
            )
        )
        self.flow.produced(index, outs, written)
        for watcher in self.watchers:
            watcher.op_recorded(index, outs)
        if self.backward is not None:
            self.backward.recorded(index, result)
        return index

    def record_failure(self, func: Any, args: tuple, kwargs: dict, exc: BaseException) -> None:
        ins, template, kw_template, _ = self._split_call(func, args, kwargs)
        refs = [self.flow.ref(t) for t in ins]
        code, line, frame, _ = self._where()
        self.nodes.append(
            NodeRecord(
                "op", self.current_scope(), refs, target=str(func), args=template, kwargs=kw_template,
                code=code, line=line, frame=frame, error=error_text(exc), extra={"phase": self.phase},
            )
        )

    def release(self) -> None:
        self.flow.clear()
        self.boundaries.release()


class AtenMode(TorchDispatchMode):
    """Sends every op that reaches the dispatcher's Python key to an ``AtenLevel``."""

    def __init__(self, level: AtenLevel) -> None:
        super().__init__()
        self.level = level

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        try:
            if self.level.dtensors and _distributed.has_dtensor(args, kwargs):
                result = self.level.run_dtensor_op(func, args, kwargs)
            else:
                result = func(*args, **kwargs)
        except Exception as exc:
            self.level._pending = None
            self.level.record_failure(func, args, kwargs, exc)
            raise
        packet = getattr(func, "overloadpacket", None)
        name = str(packet)
        if packet in _METADATA_OPS or name in _MARKERS or (
            (self.level.folding or name in _distributed.PLUMBING) and self.level.passed_on(func, args, result)
        ):
            self.level._pending = None  # no node: nothing reads what a redistribution inside it made
            return result
        self.level.record(func, args, kwargs, result)
        return result

