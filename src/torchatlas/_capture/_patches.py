"""Calls no mode sees, made visible while a trace runs in some thread.

* ``nn.Module._call_impl`` is replaced so each module call opens and closes its scope
  (``ScopeTracker.call_started``/``call_ended``): cheaper than global module hooks, which
  put every module call of the process on torch's slow path. Not ``__call__``: assigning a
  special method re-slots every ``nn.Module`` subclass (~70 µs a trace, more with
  transformers imported), while a plain attribute only invalidates their method caches.
* A TorchScript function runs in C++: ``torch.jit.ScriptFunction.__call__`` is wrapped so
  the call becomes one opaque node that reads its tensor arguments.
* ``Tensor.set_`` never reaches ``__torch_function__``: it is wrapped so the tensor it
  re-points reads from the call.
* ``torch.distributed``'s collectives (``dist.all_reduce``...) run in C++: while a process group
  exists they are wrapped so each call becomes an op node (``_distributed.stand_ins``).
* ``torch.overrides.has_torch_function``, asked by ``MultiheadAttention`` and the
  ``TransformerEncoder`` layers whether they may take their fused fast path, answers as if
  no trace ran: any mode on the stack says yes, so traced they would compute another way
  (and, with a padding mask, return other numbers) than untraced.

Cyclic garbage collection is paused while a trace runs (``collection_paused``).

Traces share dynamo's process-wide state (its stance, ``_call_impl``); ``compile_report``
changes it (the stance, dynamo's caches). So traces hold ``dynamo_shared`` and
``compile_report`` holds ``dynamo_exclusive``: any number of traces run at once, or one
``compile_report`` alone, which new traces then wait for.

The wrappers are installed when the first trace starts and removed when the last one
ends (a count, under a lock, so threads tracing at once share them); outside a trace,
in any thread, they call straight through. Dynamo, compiling in another thread meanwhile,
must never trace into them and guard on their closures (once they are gone the guard
cannot even be built: ``InternalTorchDynamoError``). So each is marked as dynamo's
``disable`` marks a function (a graph break at the call) and its frames are skipped, and
they come and go under dynamo's compile lock, never in the middle of a compile.
"""

from __future__ import annotations

import contextlib
import gc
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.nn.modules import module as _module_py

from . import _distributed, _pipeline
from ._scopes import is_compiled_wrapper

_lock = threading.Lock()
_dynamo_state = threading.Condition()
_sharing = 0
_exclusive = False
_waiting_for_exclusive = 0
_holding = threading.local()
_users = 0
_collecting_users = 0
_we_paused_collection = False
_eager_users = 0
_eager_stance = contextlib.ExitStack()
_CALL_IMPL = torch.nn.Module._call_impl
_GLOBAL_HOOKS = (
    _module_py._global_forward_pre_hooks,
    _module_py._global_forward_hooks,
    _module_py._global_backward_pre_hooks,
    _module_py._global_backward_hooks,
)
_SCRIPT_CALL = torch.jit.ScriptFunction.__call__
_HAS_TORCH_FUNCTION = torch.overrides.has_torch_function
_FAST_PATH_CHECKS = frozenset(
    forward.__code__
    for forward in (torch.nn.MultiheadAttention.forward, torch.nn.TransformerEncoderLayer.forward, torch.nn.TransformerEncoder.forward)
)
_SET = torch._C.TensorBase.set_
_replaced: list[tuple[Any, str, Any]] = []  # (namespace, name, original) of the c10d stand-ins installed

ActiveLevel = Callable[[], Any]
"""This thread's Python level when it records: its mode is on the stack (a call it is itself
running, or torch's own code inside one, has it popped), else None."""
RecordingModes = Callable[[], Any]
"""This thread's trace's own torch-function modes while it traces, else an empty tuple."""
ActiveTracker = Callable[[], Any]
"""This thread's scope tracker while a trace runs in it, else None."""


def _opaque_to_dynamo(stand_in: Callable[..., Any]) -> Callable[..., Any]:
    """``stand_in``, which dynamo calls as it is (a graph break) and never inlines; its frames
    are skipped (``_skip_frames``), what it calls is compiled as usual."""
    stand_in._torchdynamo_disable = True  # type: ignore[attr-defined]  # as torch._dynamo.skip marks one
    return stand_in


def _skip_frames(*codes: Any) -> None:
    """Dynamo never compiles a frame of ``codes`` (set once: the stand-ins' code never changes)."""
    frames = getattr(getattr(torch._C, "_dynamo", None), "eval_frame", None)
    if frames is not None and hasattr(frames, "set_code_exec_strategy"):
        for code in codes:
            frames.set_code_exec_strategy(code, frames._FrameExecStrategy(frames._FrameAction.SKIP, frames._FrameAction.DEFAULT))


def _compiles_paused() -> Any:
    """Dynamo's compile lock where dynamo is loaded: no compile in any thread sees a stand-in
    come or go half-way through."""
    convert_frame = sys.modules.get("torch._dynamo.convert_frame")
    return convert_frame.compile_lock if convert_frame is not None else contextlib.nullcontext()


def _module_call(tracker_of: ActiveTracker) -> Callable[..., Any]:
    forward_pre, forward, backward_pre, backward = _GLOBAL_HOOKS

    def _call_impl(module: Any, *args: Any, **kwargs: Any) -> Any:
        tracker = tracker_of()
        if tracker is None or is_compiled_wrapper(module):  # a compile wrapper is transparent
            return _CALL_IMPL(module, *args, **kwargs)
        tracker.call_started(module, args, kwargs, sys._getframe(1))
        try:
            # A module without hooks runs its forward from here, as _call_impl's own fast path
            # does: a traced call is no deeper than an untraced one, so deep models keep their
            # recursion headroom.
            if (
                module._forward_pre_hooks or module._forward_hooks or module._backward_pre_hooks
                or module._backward_hooks or forward_pre or forward or backward_pre or backward
                or torch._C._get_tracing_state()
            ):
                output = _CALL_IMPL(module, *args, **kwargs)
            else:
                output = module.forward(*args, **kwargs)
        except BaseException:
            tracker.call_ended(module, None)
            raise
        tracker.call_ended(module, output)
        return output

    return _call_impl


_MODULE_CALL_CODES = (_CALL_IMPL.__code__, _module_call(lambda: None).__code__)


def called_module(frame: Any) -> Any:
    """The module whose call ``frame`` runs (torch's ``_call_impl`` or ours), else None."""
    code = frame.f_code
    if code is _MODULE_CALL_CODES[0]:
        return frame.f_locals.get("self")
    if code is _MODULE_CALL_CODES[1]:
        return frame.f_locals.get("module")
    return None


def _script_call(active: ActiveLevel) -> Callable[..., Any]:
    def __call__(fn: Any, *args: Any, **kwargs: Any) -> Any:
        level = active()
        if level is None:
            return _SCRIPT_CALL(fn, *args, **kwargs)
        return level.run_opaque(getattr(fn, "qualified_name", "script"), _SCRIPT_CALL, (fn, *args), kwargs, sys._getframe(1))

    return __call__


def _set(active: ActiveLevel) -> Callable[..., Any]:
    def set_(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        level = active()
        if level is None:
            return _SET(self, *args, **kwargs)
        return level.__torch_function__(torch._C.TensorBase.set_, (), (self, *args), kwargs)

    return set_


def _fast_path_check(ours_of: RecordingModes) -> Callable[[Any], bool]:
    def has_torch_function(relevant_args: Any) -> bool:
        ours = ours_of()
        if not ours or sys._getframe(1).f_code not in _FAST_PATH_CHECKS:
            return _HAS_TORCH_FUNCTION(relevant_args)
        # Decide as the forward would untraced: our modes off the stack, while a user's mode or
        # a tensor subclass still counts. The fused op it then calls is recorded as it runs.
        popped = []
        try:
            while (depth := torch._C._len_torch_function_stack()) and any(
                torch._C._get_function_stack_at(depth - 1) is mode for mode in ours
            ):
                popped.append(torch._C._pop_torch_function_stack())
            return _HAS_TORCH_FUNCTION(relevant_args)
        finally:
            for mode in reversed(popped):
                torch._C._push_on_torch_function_stack(mode)

    return has_torch_function


_skip_frames(*(make(lambda: None).__code__ for make in (_module_call, _script_call, _set, _fast_path_check)))


@contextlib.contextmanager
def installed(
    active: ActiveLevel, tracker_of: ActiveTracker, ours_of: RecordingModes, inside_dtensor_op: ActiveLevel
) -> Iterator[None]:
    """Wrap the calls while the block runs, in every thread that traces at once. An exception
    (Ctrl-C) at any line of installing takes back what was installed."""
    global _users
    counted = False
    try:
        with _lock:
            if _users == 0:
                try:
                    _install(active, tracker_of, ours_of, inside_dtensor_op)
                except BaseException:
                    _uninstall()
                    raise
            _users += 1
            counted = True
        yield
    finally:
        with _lock:
            if counted:
                _users -= 1
                if _users == 0:
                    _uninstall()


def _install(active: ActiveLevel, tracker_of: ActiveTracker, ours_of: RecordingModes, inside_dtensor_op: ActiveLevel) -> None:
    with _compiles_paused():
        torch.nn.Module._call_impl = _opaque_to_dynamo(_module_call(tracker_of))
        torch.jit.ScriptFunction.__call__ = _opaque_to_dynamo(_script_call(active))
        torch.Tensor.set_ = _opaque_to_dynamo(_set(active))  # shadows the TensorBase method it inherits
        torch.overrides.has_torch_function = _opaque_to_dynamo(_fast_path_check(ours_of))
        if _distributed.initialized():
            stand_ins = [
                *_distributed.stand_ins(active), *_distributed.functional_stand_ins(active, inside_dtensor_op),
                *_pipeline.vote_stand_ins(),
            ]
            for namespace, name, stand_in in stand_ins:
                _replaced.append((namespace, name, getattr(namespace, name)))
                setattr(namespace, name, stand_in)


def _uninstall() -> None:
    """Every original back, whatever part of :func:`_install` ran."""
    with _compiles_paused():
        torch.nn.Module._call_impl = _CALL_IMPL
        torch.jit.ScriptFunction.__call__ = _SCRIPT_CALL
        if "set_" in vars(torch.Tensor):
            del torch.Tensor.set_
        torch.overrides.has_torch_function = _HAS_TORCH_FUNCTION
        while _replaced:
            namespace, name, original = _replaced.pop()
            setattr(namespace, name, original)


@contextlib.contextmanager
def dynamo_shared(refusal: Callable[[], BaseException]) -> Iterator[None]:
    """Hold dynamo's process-wide state with other traces (and no ``compile_report``) meanwhile.

    A ``compile_report`` waiting for the traces running now goes first: a thread that traces in
    a loop must not keep it out for ever. ``refusal()`` is raised when this thread holds it
    exclusively, which waiting would deadlock.
    """
    global _sharing
    if getattr(_holding, "exclusive", False):
        raise refusal()
    with _dynamo_state:
        if _exclusive or _waiting_for_exclusive:
            _dynamo_state.wait_for(lambda: not _exclusive and not _waiting_for_exclusive)
        _sharing += 1
    _holding.shared = getattr(_holding, "shared", 0) + 1
    try:
        yield
    finally:
        _holding.shared -= 1
        with _dynamo_state:
            _sharing -= 1
            _dynamo_state.notify_all()


@contextlib.contextmanager
def dynamo_exclusive(refusal: Callable[[], BaseException]) -> Iterator[None]:
    """Hold dynamo's process-wide state alone: no trace runs meanwhile, in any thread.

    ``refusal()`` is raised when this thread traces or holds it already, which waiting would
    deadlock."""
    global _exclusive, _waiting_for_exclusive
    if getattr(_holding, "exclusive", False) or getattr(_holding, "shared", 0):
        raise refusal()
    with _dynamo_state:
        _waiting_for_exclusive += 1
        try:
            _dynamo_state.wait_for(lambda: not _exclusive and _sharing == 0)
        finally:
            _waiting_for_exclusive -= 1
        _exclusive = True
    _holding.exclusive = True
    try:
        yield
    finally:
        _holding.exclusive = False
        with _dynamo_state:
            _exclusive = False
            _dynamo_state.notify_all()


@contextlib.contextmanager
def collection_paused() -> Iterator[None]:
    """No cyclic garbage collection while traces run, in any thread (Python has one switch).

    A trace allocates a few small records per op, and full collections triggered by them
    walk the whole heap: on a 10k-op chain they take 60% of the trace. Only the on/off
    switch is touched, and only when collection was on: thresholds and frozen objects
    stay as the user set them, and a user who turned collection off finds it off.
    """
    global _collecting_users, _we_paused_collection
    with _lock:
        if _collecting_users == 0 and gc.isenabled():
            gc.disable()
            _we_paused_collection = True
        _collecting_users += 1
    try:
        yield
    finally:
        with _lock:
            _collecting_users -= 1
            if _collecting_users == 0 and _we_paused_collection:
                _we_paused_collection = False
                gc.enable()


@contextlib.contextmanager
def compiled_code_runs_eagerly(compiled_calls: list[Any]) -> Iterator[None]:
    """``torch.compile``d submodules and functions run as the eager code they wrap, so their ops are
    recorded and dynamo never traces into the recording mode. Without dynamo loaded nothing is compiled.

    Dynamo's stance is one for the whole process: the first trace to start sets it to
    ``force_eager`` and the last one to end restores it (two threads each restoring what they
    found would leave it eager). ``compiled_calls`` are the model's modules compiled in place
    (``module.compile()``): their calls go to the compiled ``_call_impl`` they were given, past
    our stand-in, so they get none meanwhile.
    """
    global _eager_users
    if "torch._dynamo" not in sys.modules:
        yield
        return
    saved = [(module, module._compiled_call_impl) for module in compiled_calls]
    with _lock:
        if _eager_users == 0:
            _eager_stance.enter_context(torch.compiler.set_stance("force_eager"))
        _eager_users += 1
    try:
        for module, _ in saved:
            module._compiled_call_impl = None
        yield
    finally:
        for module, compiled in saved:
            module._compiled_call_impl = compiled
        with _lock:
            _eager_users -= 1
            if _eager_users == 0:
                _eager_stance.close()
