"""What the model did at run time, recorded beside the graph: numbers of each op's outputs,
the outputs the user asked to keep, and time.

* ``_stats.OutputStats`` computes each output's ``min max mean std absmax`` and its NaN, Inf
  and zero counts as the op runs. Only numbers are kept, never an activation.
* :class:`Keeper` keeps (detached copies of) the outputs of the module calls and ops whose
  path matches, and nothing else.
* :class:`Timer` wraps each op and module call in a ``torch.profiler`` range named after its
  record, so times are matched to nodes by record order, never by op names.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.utils._python_dispatch import _disable_current_modes

from .._ops import op_name
from .._text import error_text
from ._records import Recording
from ._values import iter_tensors

Tensor = torch.Tensor


# -- keeping activations ---------------------------------------------------------------------------

Selector = str | Iterable[str] | Callable[[str], bool]


def matcher(select: Selector) -> Callable[[str, bool], bool]:
    """A path predicate from a glob, a list of globs, or a callable. A module call's path is its
    module path (``layers.0.mlp``, or ``experts:0`` for a ModuleDict key with a colon); an op's
    is ``<module path>:<op name>`` (``layers.0.mlp:relu``). Every glob may select module calls;
    only a glob with a ``:`` selects ops. The predicate takes the path and whether it is an op's."""
    if callable(select):
        return lambda path, is_op: bool(select(path))
    patterns = [select] if isinstance(select, str) else list(select)
    return lambda path, is_op: any(fnmatch.fnmatchcase(path, p) and (":" in p or not is_op) for p in patterns)


class Keeper:
    """Keeps detached copies of the outputs of matching module calls, under ``path`` (``path#k``
    for the k-th later call), and of matching ops, under their node id (``n12``).

    An expanded view (a stride of 0: ``x.expand(...)``) is kept as a copy of the elements it
    shows once, expanded again, so a view over a few numbers never becomes terabytes."""

    def __init__(self, select: Selector, device: str | torch.device | None, recording: Recording) -> None:
        self.matches = matcher(select)
        self.device = torch.device(device) if device is not None else None
        self.recording = recording
        self.kept: dict[str, Any] = {}
        self.refused: dict[str, str] = {}
        """Paths whose output could not be copied, with torch's reason (never the model's failure)."""

    def _keep(self, path: str, value: Any) -> None:
        try:
            with torch._C.DisableTorchFunction(), _disable_current_modes(), torch.no_grad():
                self.kept[path] = torch.utils._pytree.tree_map(self._copy_tensor, value)
        except Exception as exc:
            self.refused[path] = error_text(exc)

    def finish(self) -> None:
        if self.refused:
            listed = "; ".join(f"{path}: {reason}" for path, reason in list(self.refused.items())[:5])
            more = f" (and {len(self.refused) - 5} more)" if len(self.refused) > 5 else ""
            self.recording.meta["save_note"] = f"not kept, as they could not be copied: {listed}{more}"

    def _copy_tensor(self, value: Any) -> Any:
        if not isinstance(value, Tensor):
            return value
        kept = value.detach()
        expanded = kept.layout is torch.strided and not kept.is_nested and 0 in kept.stride() and kept.numel() > 1
        if expanded:
            kept = kept[tuple(slice(0, 1) if step == 0 else slice(None) for step in kept.stride())]
        kept = kept.to(self.device, copy=True) if self.device is not None else kept.clone()
        return kept.expand(value.shape) if expanded else kept

    def op_recorded(self, index: int, outs: list[Tensor]) -> None:
        record = self.recording.nodes[index]
        scope = self.recording.scopes[record.scope].path
        name = op_name(record.target)
        if self.matches(f"{scope}:{name}", True):
            self._keep(f"n{index}", outs[0] if len(outs) == 1 else tuple(outs))

    def scope_entered(self, index: int, module: Any, args: tuple, kwargs: dict) -> None:
        """Nothing: a call is kept when it returns."""

    def scope_exited(self, index: int, module: Any, output: Any) -> None:
        scope = self.recording.scopes[index]
        if scope.parent is not None and self.matches(scope.path, False) and any(True for _ in iter_tensors(output, "")):
            self._keep(scope.path + (f"#{scope.call}" if scope.call else ""), output)


# -- time ----------------------------------------------------------------------------------------------

_PREFIX = "torchatlas:"


class Timer:
    """``torch.profiler`` ranges around each torch call and module call, read back per record."""

    def __init__(self, recording: Recording) -> None:
        self.recording = recording
        self._calls = 0
        self._call_record: dict[int, int] = {}  # call number -> record index
        self._scope_ranges: dict[int, Any] = {}
        self._profiler: Any = None

    def __enter__(self) -> Timer:
        activities = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self._profiler = torch.profiler.profile(activities=activities)
        self._profiler.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._profiler.__exit__(*exc)

    def call_range(self) -> tuple[int, Any]:
        """A range for the next torch call; :meth:`assign` names the record it made."""
        self._calls += 1
        with torch._C.DisableTorchFunction(), _disable_current_modes():
            return self._calls, torch.autograd.profiler.record_function(f"{_PREFIX}c{self._calls}")

    def assign(self, call: int, record: int) -> None:
        self._call_record[call] = record

    def scope_entered(self, index: int, module: Any, args: tuple, kwargs: dict) -> None:
        with torch._C.DisableTorchFunction(), _disable_current_modes():
            handle = torch.autograd.profiler.record_function(f"{_PREFIX}s{index}")
            handle.__enter__()
        self._scope_ranges[index] = handle

    def scope_exited(self, index: int, module: Any, output: Any) -> None:
        handle = self._scope_ranges.pop(index, None)
        if handle is not None:
            with torch._C.DisableTorchFunction(), _disable_current_modes():
                handle.__exit__(None, None, None)

    def finish(self) -> None:
        """Write ``time_us`` (and ``cuda_time_us``) into op and scope records."""
        node_times: dict[int, list[float]] = {}
        scope_times: dict[int, list[float]] = {}
        for event in self._profiler.events():
            name = event.name
            if not name.startswith(_PREFIX):
                continue
            times = [event.cpu_time_total, getattr(event, "device_time_total", 0.0)]
            if name[len(_PREFIX)] == "c":
                record = self._call_record.get(int(name[len(_PREFIX) + 1:]))
                if record is not None:
                    node_times[record] = times
            else:
                scope_times[int(name[len(_PREFIX) + 1:])] = times
        cuda = torch.cuda.is_available()
        for record, (cpu, device) in node_times.items():
            node = self.recording.nodes[record]
            node.extra = {**(node.extra or {}), "time_us": round(cpu, 3), **({"cuda_time_us": round(device, 3)} if cuda else {})}
        for index, (cpu, device) in scope_times.items():
            scope = self.recording.scopes[index]
            scope.extra = {**(scope.extra or {}), "time_us": round(cpu, 3), **({"cuda_time_us": round(device, 3)} if cuda else {})}
        self.recording.meta["time_measure"] = (
            "CPU wall time of each op's dispatch (and, on CUDA, the kernel time it launched), measured by "
            "torch.profiler around the op in the one traced pass"
        )

