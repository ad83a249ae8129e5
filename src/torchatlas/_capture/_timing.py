"""Time of each op and module call (``profile=True``, ``torchatlas.profile``), measured in
passes of the model of their own, untraced, so the recorder's overhead never enters a time.

While the trace runs, :class:`Timer` only numbers the torch calls the Python level sees.
Once the graph's records are complete, it runs the model again, twice per timed round:

* module calls: global module hooks read a clock as each call starts and ends (nothing else
  runs), giving each module call's inclusive CPU time; matched to the trace's module calls by
  call order (and class).
* ops: a TorchFunctionMode that does nothing but read a clock around each torch call, matched
  to the recorded ops by call number. On CUDA the calls run under ``torch.profiler`` instead,
  each in a range named with a per-trace nonce, which gives each op the device time of the
  kernels it launched; a module call's device time is that of the ops inside it.

Each number is the median over the timed rounds. The buffers and inputs the trace's forward
changed in place, and the random number generators, are put back as the trace left them, so
the timing passes change no state.
"""

from __future__ import annotations

import secrets
import statistics
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch.autograd import DeviceType
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import _disable_current_modes

from .._text import error_text
from . import _patches
from ._records import Recording
from ._scopes import is_compiled_wrapper

_clock = time.perf_counter_ns


class _OpClock(TorchFunctionMode):
    """Reads a clock around each torch call, and does nothing else."""

    def __init__(self) -> None:
        super().__init__()
        self.times: list[int] = []

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        start = _clock()
        try:
            return func(*args, **(kwargs or {}))
        finally:
            self.times.append(_clock() - start)


class _OpRanges(TorchFunctionMode):
    """Wraps each torch call in a ``torch.profiler`` range named ``<prefix><call number>``."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix
        self.calls = 0

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        self.calls += 1
        with torch.autograd.profiler.record_function(f"{self.prefix}{self.calls}"):
            return func(*args, **(kwargs or {}))


class Timer:
    """Numbers the torch calls of the trace; :meth:`measure` times them in untraced passes."""

    def __init__(
        self, recording: Recording, run: Callable[[], Any], model: Any, repeat: int = 1, warmup: int = 0,
        compiled_calls: list[Any] | None = None, inputs: list[torch.Tensor] | None = None,
    ) -> None:
        self.recording = recording
        self.run = run
        self.model = model
        self.compiled_calls = compiled_calls or []
        """``torch.compile``d parts run as the eager code the trace recorded, here too."""
        # Every buffer (batch_norm writes running statistics without moving their version counter);
        # the inputs whose counter the trace's forward moves.
        buffers = list(model.buffers()) if isinstance(model, torch.nn.Module) else []
        self.versions = [(t, None) for t in buffers] + [(t, _version(t)) for t in inputs or []]
        self.repeat, self.warmup = repeat, warmup
        self.calls = 0
        self._call_record: dict[int, int] = {}  # call number -> record index

    def next_call(self) -> int:
        self.calls += 1
        return self.calls

    def assign(self, call: int, record: int) -> None:
        self._call_record[call] = record

    # -- the timing passes ------------------------------------------------------------------------

    def measure(self) -> None:
        """Run the timing passes and write ``time_us`` (and on CUDA ``cuda_time_us``) into the records."""
        recording = self.recording
        cuda = self.ran_on_cuda()
        profiler_busy = cuda and torch._C._autograd._profiler_enabled()
        device = cuda and not profiler_busy
        scope_rounds: list[list[float]] = []
        op_rounds: list[dict[int, tuple[float, float]]] = []
        with _state_kept(self.versions, cuda), _patches.compiled_code_runs_eagerly(self.compiled_calls):
            for round_ in range(self.warmup + self.repeat):
                try:
                    scopes = self._time_module_calls(cuda)
                    ops = self._time_ops_on_device() if device else self._time_ops()
                except Exception as exc:  # the trace's graph stands; only its times are missing
                    recording.meta["time_measure"] = f"no times: a timing pass of the model failed: {error_text(exc)}"
                    return
                if scopes is None or ops is None:
                    recording.meta["time_measure"] = (
                        "no times: the timing pass took a different path through the model than the trace"
                    )
                    return
                if round_ >= self.warmup:
                    scope_rounds.append(scopes)
                    op_rounds.append(ops)
        self._write(scope_rounds, op_rounds, device)
        recording.meta["profile_runs"] = self.repeat
        recording.meta["time_measure"] = (
            "median over untraced timing passes: each module call's inclusive CPU wall time, read by module "
            "hooks alone; "
            + (
                "each op's CPU and device time from a torch.profiler range around the torch call alone "
                "(a module call's device time: its ops')"
                if device
                else "each op's CPU wall time, read around the torch call alone"
            )
            + ("; no device times: a torch.profiler session of yours was running" if profiler_busy else "")
        )

    def ran_on_cuda(self) -> bool:
        return any(str(meta[2]).startswith("cuda") for n in self.recording.nodes for meta in n.outputs if len(meta) > 2)

    def _time_module_calls(self, cuda: bool) -> list[float] | None:
        """Each module call's time in µs, in call order, the root's first; None if the calls
        do not match the trace's."""
        thread = threading.get_ident()
        calls: list[list[Any]] = []  # [class, start, duration]
        open_calls: list[int] = []

        # torch.compile's wrapper module is no module call of the trace: the module it wraps is
        def started(module: Any, args: Any) -> None:
            if threading.get_ident() == thread and not is_compiled_wrapper(module):
                open_calls.append(len(calls))
                calls.append([type(module), _clock(), 0])

        def ended(module: Any, args: Any, output: Any) -> None:
            if threading.get_ident() == thread and open_calls and not is_compiled_wrapper(module):
                call = calls[open_calls.pop()]
                call[2] = _clock() - call[1]

        if cuda:
            torch.cuda.synchronize()
        hooks = [
            torch.nn.modules.module.register_module_forward_pre_hook(started),
            torch.nn.modules.module.register_module_forward_hook(ended, always_call=True),
        ]
        try:
            with warnings.catch_warnings():
                # torch warns that global hooks fire twice around torch.compile(module): not ours, skipped above
                warnings.filterwarnings("ignore", message=r"Using `torch.compile\(module\)` when there are global hooks")
                start = _clock()
                self.run()
                total = _clock() - start
        finally:
            for hook in hooks:
                hook.remove()
        scopes = self.recording.scopes
        module_scopes = scopes if isinstance(self.model, torch.nn.Module) else scopes[1:]
        if len(calls) != len(module_scopes) or any(
            f"{cls.__module__}.{cls.__qualname__}" != s.cls for (cls, _, _), s in zip(calls, module_scopes)
        ):
            return None
        times = [duration / 1000 for _, _, duration in calls]
        return times if isinstance(self.model, torch.nn.Module) else [total / 1000, *times]

    def _time_ops(self) -> dict[int, tuple[float, float]] | None:
        clock = _OpClock()
        with clock:
            self.run()
        if len(clock.times) != self.calls:
            return None
        return {call: (clock.times[call - 1] / 1000, 0.0) for call in self._call_record}

    def _time_ops_on_device(self, cuda: bool = True) -> dict[int, tuple[float, float]] | None:
        prefix = f"torchatlas.{secrets.token_hex(6)}:c"  # a user's own range can never take this name
        ranges = _OpRanges(prefix)
        activities = [torch.profiler.ProfilerActivity.CPU]
        if cuda:
            activities.append(torch.profiler.ProfilerActivity.CUDA)
            torch.cuda.synchronize()
        with torch.profiler.profile(activities=activities) as profiler:
            with ranges:
                self.run()
            if cuda:
                torch.cuda.synchronize()
        if ranges.calls != self.calls:
            return None
        times = range_times(profiler.events(), prefix)
        return {call: times.get(call, (0.0, 0.0)) for call in self._call_record}

    def _write(self, scope_rounds: list[list[float]], op_rounds: list[dict[int, tuple[float, float]]], device: bool) -> None:
        nodes, scopes = self.recording.nodes, self.recording.scopes
        device_own = [0.0] * len(scopes)
        for call, record in self._call_record.items():
            node = nodes[record]
            cpu = statistics.median(r[call][0] for r in op_rounds)
            times = {"time_us": round(cpu, 3)}
            if device:
                gpu = statistics.median(r[call][1] for r in op_rounds)
                times["cuda_time_us"] = round(gpu, 3)
                device_own[node.scope] += gpu
            node.extra = {**(node.extra or {}), **times}
        inclusive = list(device_own)
        for index in range(len(scopes) - 1, -1, -1):  # children come after their parent
            parent = scopes[index].parent
            if parent is not None:
                inclusive[parent] += inclusive[index]
        for index, scope in enumerate(scopes):
            times = {"time_us": round(statistics.median(r[index] for r in scope_rounds), 3)}
            if device:
                times["cuda_time_us"] = round(inclusive[index], 3)
            scope.extra = {**(scope.extra or {}), **times}


def range_times(events: Any, prefix: str) -> dict[int, tuple[float, float]]:
    """Call number -> (CPU µs, device µs) of the ranges named ``<prefix><call number>``.

    Only the CPU-side range counts: on CUDA the profiler lists each range a second time as a
    device-side "gpu_user_annotation" event of the same name, with no CPU time and the span
    from its first kernel's start to its last one's end, gaps included. The CPU-side one's
    device time is the sum of the kernels the ops inside it launched."""
    times: dict[int, tuple[float, float]] = {}
    for event in events:
        if event.device_type != DeviceType.CPU or event.is_async or not event.name.startswith(prefix):
            continue
        number = event.name[len(prefix):]
        if number.isdigit():
            times[int(number)] = (event.cpu_time_total, event.device_time_total)
    return times


def _version(t: torch.Tensor) -> int | None:
    try:
        return t._version
    except RuntimeError:  # an inference tensor keeps no version counter
        return None


class _state_kept:
    """Puts back, after the timing passes, what the traced forward wrote: the buffers and the
    input tensors it changed in place (BatchNorm's running statistics, a KV cache), and the
    random number generators. ``versions`` are the tensors' version counters before the trace:
    only a tensor whose counter moved, or that is given none, is copied."""

    def __init__(self, versions: list[tuple[torch.Tensor, int | None]], cuda: bool) -> None:
        self.versions, self.cuda = versions, cuda

    def __enter__(self) -> None:
        with torch._C.DisableTorchFunction(), _disable_current_modes(), torch.no_grad():
            self.saved = [
                (t, t.clone()) for t, version in self.versions
                if (version is None or _version(t) != version) and t.layout is torch.strided and not t.is_nested
                and not t.is_meta
            ]
        self.rng = torch.random.get_rng_state()
        self.cuda_rng = torch.cuda.get_rng_state_all() if self.cuda else None

    def __exit__(self, *exc: Any) -> None:
        with torch._C.DisableTorchFunction(), _disable_current_modes(), torch.no_grad():
            for tensor, saved in self.saved:
                with torch.inference_mode(tensor.is_inference()):  # an inference tensor is written only there
                    tensor.copy_(saved)
        torch.random.set_rng_state(self.rng)
        if self.cuda_rng is not None:
            torch.cuda.set_rng_state_all(self.cuda_rng)
