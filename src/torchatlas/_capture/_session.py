"""One capture: the skeleton every level runs in.

A :class:`Session` holds the model index, the scope tracker and the Python level;
a level (``LEVELS`` in ``__init__.py``) adds its recorders, the modes to enter
around forward, and what to do once forward returns. :meth:`Session.run` does the
rest the same way for every level: refuse a nested trace, install and always
remove the hooks, modes and wrappers, name where a failing forward failed, resolve
what the model returned, and build the graph from plain records.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import traceback
from collections.abc import Callable
from typing import Any

import torch

from .._ir import GraphIR
from .._text import error_text
from . import _distributed, _patches, _pipeline, _source
from ._build import build_graph
from ._dataflow import DataFlow, raw_meta
from ._fingerprints import Fingerprints
from ._python import PythonLevel
from ._records import Failure, NodeRecord, Recording
from ._runtime import Keeper
from ._scopes import ModelIndex, ScopeTracker, is_compiled_wrapper
from ._stats import OutputStats
from ._timing import Timer
from ._values import iter_tensors, tensor_table

_tls = threading.local()
_ACTIVE_TRACKER = functools.partial(getattr, _tls, "tracker", None)
"""This thread's scope tracker while it traces, else None: looked up on every module call, in C."""


PYTHON_ERROR = "torchatlas.raise"
"""Target of the node that marks where a forward pass raised outside any op."""


class TraceError(RuntimeError):
    """The model could not be traced; the message says why in one line."""


class LossError(TraceError):
    """``loss_fn`` failed on what forward returned (``backward=True``)."""


def _inside_compile_report() -> TraceError:
    return TraceError("torchatlas.trace cannot run inside torchatlas.compile_report's compiled run in the same thread")


def active_session() -> Session | None:
    return getattr(_tls, "session", None)


def _recording_python_level() -> PythonLevel | None:
    session = active_session()
    if session is None:
        return None
    stack = torch._C._len_torch_function_stack()
    on_stack = any(torch._C._get_function_stack_at(i) is session.python for i in range(stack))
    return session.python if on_stack and torch._C._is_torch_function_mode_enabled() else None


def _inside_dtensor_op() -> Any:
    """This thread's recording level while it runs an op on DTensors (its mode off the stack)."""
    session = active_session()
    if session is None:
        return None
    for level in (session.python, session.recorder):
        if getattr(level, "_redirects", None) is not None:
            return level
    return None


def _recording_modes() -> Any:
    session = active_session()
    return session.modes if session is not None else ()


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
    if is_compiled_wrapper(model):
        return model._orig_mod  # torch.compile wraps the eager module; its forward computes the same thing
    if _pipeline.is_schedule(model):
        return _pipeline.PipelineRun(model)  # its step, with the stages' modules as children
    if not callable(model):
        raise TraceError(f"torchatlas: cannot trace a {type(model).__name__}; pass an nn.Module or a callable")
    return getattr(model, "_torchdynamo_orig_callable", model)  # torch.compile(function)


class Session:
    """The parts of one capture that every level shares."""

    def __init__(self, model: Any, args: tuple, kwargs: dict, progress: Callable[[int], None] | None = None) -> None:
        self.model = unwrap_model(model)
        self.args, self.kwargs = args, kwargs
        self.index = ModelIndex(self.model)
        self.tracker = ScopeTracker(self.index)
        self.inputs = list(iter_tensors(args, "args", attributes=True)) + list(iter_tensors(kwargs, "kwargs", attributes=True))
        self.python = PythonLevel(Recording("python", self.tracker.scopes), self.tracker, list(self.inputs), progress)
        self.tracker.listeners.append(self.python)
        if _distributed.initialized():
            self.python.flow.watch_views()
            self.python.dtensors = True
            self.python.groups.saw_meshes_of([t for _, t in self.index.parameters])
        self.modes: list[Any] = [self.python]
        """Entered around forward, in order."""
        self.result: tuple[Recording, DataFlow] = (self.python.recording, self.python.flow)
        """The recording that becomes the graph, and its data flow (which resolves the outputs)."""
        self.recorder: Any = self.python
        """The level whose recording becomes the graph: run-time watchers attach to it."""
        self.finishers: list[Callable[[], None]] = []
        """Run once forward is over, before the graph is built (collect run-time numbers)."""
        self.after_forward: Callable[[Any], None] | None = None
        """Runs on what forward returned, still inside the modes (backward computes its loss here)."""
        self.after_recording: Callable[[], None] | None = None
        """Runs once the modes and hooks are gone (backward runs autograd here, under its own mode)."""
        self._returned = False
        self.after_release: Callable[[], None] | None = None
        """Runs once the trace is over and nothing of it is installed, before the graph is built
        (the timing passes of ``profile=True`` run the model again here, untraced)."""
        self.releases: list[Callable[[], None]] = [self.python.release]
        self.recordings: list[Recording] = [self.python.recording]
        """Every level's recording, cleared once the graph is built."""

    def watch_run_time(
        self, stats: bool | str, keep: Keeper | None, profile: bool, profile_rounds: tuple[int, int] = (1, 0)
    ) -> None:
        """Statistics of every op output (``"sample"``: of a strided sample of big ones), kept
        activations, profiler times."""
        recording = self.result[0]
        if stats:
            numbers = OutputStats(recording, sample=stats == "sample")
            self.recorder.watchers.append(numbers)
            self.finishers.append(numbers.finish)
        if keep is not None:
            self.recorder.watchers.append(keep)
            self.tracker.listeners.append(keep)
            self.finishers.append(keep.finish)
        if profile:
            if self.recorder is not self.python:
                raise ValueError("torchatlas: profile=True times Python-level ops; use level='python'")
            # The pass closes over the model and its arguments, not over this session: a cycle
            # through the session would hold the traced output, and every activation its
            # autograd graph saved (on a GPU too), until Python's next cyclic collection.
            model, args, kwargs = self.model, self.args, self.kwargs
            timer = Timer(
                recording, lambda: _distributed.settled(model(*args, **kwargs)), self.model,
                *profile_rounds,
                compiled_calls=self.index.compiled_calls, inputs=[t for _, t in self.inputs],
            )
            self.python.timer = timer
            self.after_release = timer.measure

    def watch_fingerprints(self, fingerprints: Fingerprints) -> None:
        """A numeric fingerprint of every op output (``torchatlas.compare``)."""
        self.recorder.watchers.append(fingerprints)
        self.finishers.append(fingerprints.finish)

    def run(self, partial: bool) -> tuple[GraphIR, Any, BaseException | None]:
        """Run forward once, recording it: the graph, the model's output, and (``partial``) the failure."""
        if active_session() is not None:
            raise TraceError("torchatlas.trace cannot run inside another torchatlas.trace in the same thread")
        with _patches.dynamo_shared(_inside_compile_report), _patches.collection_paused():
            return self._run(partial)

    def _run(self, partial: bool) -> tuple[GraphIR, Any, BaseException | None]:
        output: Any = None
        error: BaseException | None = None
        _tls.session, _tls.tracker = self, self.tracker
        try:
            try:
                # The stance first, the stand-ins after (and off first): dynamo, compiling in
                # another thread, must never see our _call_impl and guard on it.
                with _patches.compiled_code_runs_eagerly(self.index.compiled_calls), _patches.installed(
                    _recording_python_level, _ACTIVE_TRACKER, _recording_modes, _inside_dtensor_op
                ):
                    self._forward_recorded()
                    output = self._output
                self.python.settle_failures(None)
            except (KeyboardInterrupt, SystemExit):
                raise
            except Exception as exc:
                self.python.settle_failures(exc)
                note = self._describe_failure(exc)
                if not partial:
                    if not self._returned:  # forward ran (a loss failed after it): no note says it failed
                        _add_note(exc, note)
                    raise
                if self.python.recording.failure is None:
                    self._mark_python_failure(exc)
                error = _without_frames(exc)
            if not self.tracker.scopes:
                raise TraceError("torchatlas: the model recorded no module call; is it an nn.Module or a callable?")
            if self.after_recording is not None and error is None:
                self.after_recording()
            # A user's own TorchFunctionMode must not see our bookkeeping; no user code runs here.
            with torch._C.DisableTorchFunction():
                recording = self._finish(output if error is None else None)
                for finish in self.finishers:
                    finish()
        finally:
            del _tls.session, _tls.tracker
            for release in self.releases:
                release()
        if self.after_release is not None and error is None:
            self.after_release()
        graph = build_graph(recording)
        # Free the records now, while cyclic collection is still paused: the collection that
        # resumes after the trace then walks only the graph.
        for level in self.recordings:
            level.clear()
        self.tracker.scopes.clear()
        return graph, output, error

    def _forward_recorded(self) -> None:
        try:
            with contextlib.ExitStack() as modes:
                for mode in self.modes:
                    modes.enter_context(mode)
                if not isinstance(self.model, torch.nn.Module):
                    cls = type(self.model)
                    where = getattr(self.model, "__module__", None) or cls.__module__  # a function's own module, not builtins
                    name = f"{where}.{getattr(self.model, '__qualname__', cls.__qualname__)}"
                    self.tracker.open_root(name, self.model, self.args, self.kwargs)
                self._output = self.model(*self.args, **self.kwargs)
                if not isinstance(self.model, torch.nn.Module):  # the root opened by hand returns what it returned
                    self.tracker.exit(None, self._output)
                self._returned = True  # what follows (the loss of backward=True) is not forward failing
                if self.after_forward is not None:
                    self.after_forward(self._output)
        finally:
            self.tracker.close()

    def _finish(self, output: Any) -> Recording:
        """Resolve what the model returned and the parameter tables, while the tensors live."""
        recording, flow = self.result
        if output is not None:
            for path, t in iter_tensors(output, "output"):
                recording.outputs.append((path, flow.ref(t), raw_meta(t), {}))
        recording.failure = self.python.recording.failure
        if self.python.dtensors:  # a process group: the graph is what this rank runs
            recording.meta["distributed"] = _distributed.world()
        if isinstance(self.model, _pipeline.PipelineRun):
            recording.meta["pipeline"] = self.model.facts()
        recording.outer_frame = self.tracker.scopes[0].frame if self.tracker.scopes else None
        recording.frame_callers = self.tracker.frames.callers
        if isinstance(self.model, torch.nn.Module):
            cls = type(self.model)
            recording.model = f"{cls.__module__}.{cls.__qualname__}"
            recording.parameters = tensor_table(self.index.parameters)
            recording.buffers = tensor_table(self.index.buffers)
        return recording

    # -- failures ------------------------------------------------------------------------------

    def _mark_python_failure(self, exc: BaseException) -> None:
        """Forward failed in Python code, not in an op (a KeyError, an assert): one node where it
        raised, in the innermost module call it passed through, marks it as a failing op would."""
        module, scopes = _raising_module(exc), self.tracker.scopes
        path = self.tracker.path_of(module) if module is not None else None
        scope = next((i for i in range(len(scopes) - 1, -1, -1) if scopes[i].path == path), 0)
        code, line = _source.user_traceback_code(exc)
        nodes = self.result[0].nodes
        nodes.append(NodeRecord("op", scope, [], PYTHON_ERROR, code=code, line=line, error=error_text(exc)))
        self.python.recording.failure = Failure(PYTHON_ERROR, scope, code, line, len(nodes) - 1, None)

    def _describe_failure(self, exc: BaseException) -> str:
        """One line naming the op, the module call and the source line where forward failed."""
        failure, scopes = self.python.recording.failure, self.tracker.scopes
        if failure is not None:
            where = f"{failure.code.co_filename}:{failure.line}" if failure.code is not None else "unknown source"
            scope = scopes[failure.scope] if failure.scope is not None and failure.scope < len(scopes) else None
            module = f" in module '{scope.path or '<root>'}' ({scope.cls.rsplit('.', 1)[-1]})" if scope else ""
            return f"torchatlas: forward failed at {failure.target}{module}, {where}"
        frame = _source.user_traceback_frame(exc)
        where = f", {frame.filename}:{frame.lineno}" if frame else ""
        module = _raising_module(exc)
        if module is not None:
            path = self.tracker.path_of(module)
            return f"torchatlas: forward failed in module '{path or '<root>'}' ({type(module).__name__}){where}"
        return f"torchatlas: forward failed{where}"


def _raising_module(exc: BaseException) -> Any:
    """The innermost module whose call the exception passed through (read from the
    traceback, so an error the model caught earlier cannot mislead it)."""
    module, tb = None, exc.__traceback__
    while tb is not None:
        called = _patches.called_module(tb.tb_frame)
        if called is not None:
            module = called
        tb = tb.tb_next
    return module


def _add_note(exc: BaseException, note: str) -> None:
    """Add the note where Python can (3.11+, ``__notes__`` a list); the exception stays the model's own."""
    notes = getattr(exc, "__notes__", None)
    if hasattr(exc, "add_note") and (notes is None or isinstance(notes, list)):
        exc.add_note(note)


def _without_frames(exc: BaseException) -> BaseException:
    """The exception, its chain's tracebacks kept as lines but their frames' locals dropped,
    so a partial graph does not keep the forward pass's tensors alive."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        traceback.clear_frames(current.__traceback__)
        current = current.__cause__ or current.__context__
    return exc
