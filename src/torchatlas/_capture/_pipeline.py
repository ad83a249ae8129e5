"""Pipeline parallelism as a trace sees it, and the point-to-point messages of a fake job.

* A ``torch.distributed.pipelining`` schedule is traced as :class:`PipelineRun`: its ``step``
  as a module whose children are this rank's stage modules (``stage1``...), so each stage's
  calls nest under it; the schedule's actions (``1RECV_F0``, ``1F0``, ``1SEND_F0``: stage,
  action, microbatch, torch's own notation) are kept in the order this rank ran them.
* A fake process group moves no data: a receive leaves its buffer as it was. In a fake job
  (:func:`fake_job`, ``trace_ranks``) every rank is traced in this process, one after
  another, so a receive gets what its peer sent when the peer was traced earlier
  (:class:`Mailbox`): later stages compute on their real inputs, and a stage that infers its
  shapes (no ``input_args``) reads them from the stage before it.
* A schedule's warm-up vote (are the shapes given on every stage?) goes both ways along the
  pipeline, which no rank traced alone can answer; in a fake job each stage takes its own
  vote (:func:`vote_alone`) and the job keeps every stage's (``trace_ranks`` refuses a job
  whose stages disagree).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import sys
from collections.abc import Callable, Iterator
from typing import Any

import torch

_SCHEDULES = "torch.distributed.pipelining.schedules"
_STAGE_ACTIONS = {  # stage method -> torch's action name; the ``get_*_ops`` count only when they return ops
    "get_fwd_recv_ops": "RECV_F", "forward_one_chunk": "F", "get_fwd_send_ops": "SEND_F",
    "get_bwd_recv_ops": "RECV_B", "backward_one_chunk": "B", "get_bwd_send_ops": "SEND_B",
}


def is_schedule(model: Any) -> bool:
    """``model`` is a ``torch.distributed.pipelining`` schedule (ScheduleGPipe, Schedule1F1B...)."""
    schedules = sys.modules.get(_SCHEDULES)
    return schedules is not None and isinstance(model, schedules._PipelineSchedule)


def _stages(schedule: Any) -> list[Any]:
    return list(schedule._stages) if hasattr(schedule, "_stages") else [schedule._stage]


class PipelineRun(torch.nn.Module):
    """One rank's part of a pipeline: ``schedule.step(*args, **kwargs)`` as a module whose
    children are the rank's stage modules, ``stage{index}``."""

    def __init__(self, schedule: Any) -> None:
        super().__init__()
        self.stages = _stages(schedule)
        for stage in self.stages:
            self.add_module(f"stage{stage.stage_index}", stage.submod)
        self._schedule = schedule
        self.actions: list[str] = []

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        global _running
        self.actions.clear()
        outer, _running = _running, self
        try:
            with self._watched():
                return self._schedule.step(*args, **kwargs)
        finally:
            _running = outer

    def facts(self) -> dict[str, Any]:
        """``graph.ir.meta["pipeline"]``: the schedule, this rank's stages and their actions in order."""
        schedule = self._schedule
        return {
            "schedule": type(schedule).__name__,
            "stages": [int(s.stage_index) for s in self.stages],
            "num_stages": int(self.stages[0].num_stages),
            "microbatches": int(schedule._n_microbatches),
            "actions": list(self.actions),
        }

    @contextlib.contextmanager
    def _watched(self) -> Iterator[None]:
        """Each stage's schedule actions recorded as they run (instance attributes, removed after)."""
        try:
            for stage in self.stages:
                for method, action in _STAGE_ACTIONS.items():
                    setattr(stage, method, self._recording(stage, getattr(stage, method), action))
            yield
        finally:
            for stage in self.stages:
                for method in _STAGE_ACTIONS:
                    vars(stage).pop(method, None)

    def _recording(self, stage: Any, method: Callable[..., Any], action: str) -> Callable[..., Any]:
        @functools.wraps(method)
        def run(chunk: int, *args: Any, **kwargs: Any) -> Any:
            result = method(chunk, *args, **kwargs)
            if action == "B" and not self._schedule._has_backward:
                return result  # forward-only schedules still call it; it does nothing
            if not action.startswith(("RECV", "SEND")) or result:
                self.actions.append(f"{stage.stage_index}{action}{chunk}")
            return result

        return run


_running: PipelineRun | None = None


def current_action() -> str | None:
    """The schedule action a pipeline being traced is in (``1SEND_F0``): what a send or receive serves."""
    return _running.actions[-1] if _running is not None and _running.actions else None


# -- a fake job ------------------------------------------------------------------------------


class Mailbox:
    """The point-to-point messages of one fake job: what each rank sent each other rank, in
    order (a copy; on ``meta`` only the shape). A receive takes the next message from its peer;
    one the peer has not sent yet (a rank traced later) leaves the buffer as it was."""

    def __init__(self) -> None:
        self.queues: dict[tuple[int, int], collections.deque[torch.Tensor]] = {}
        self.votes: dict[int, bool] = {}  # pipeline stage index -> its shapes were given

    def sent(self, src: int, dst: int, tensor: torch.Tensor) -> None:
        with _unseen():
            self.queues.setdefault((src, dst), collections.deque()).append(tensor.detach().clone())

    def receive(self, src: int, dst: int, buffer: torch.Tensor) -> None:
        queue = self.queues.get((src, dst))
        if not queue:
            return
        message = queue.popleft()  # a message of the wrong shape is still the one matched (the check says so)
        same = message.numel() == buffer.numel() and message.dtype == buffer.dtype  # as a backend matches them
        if same and "meta" not in (message.device.type, buffer.device.type):
            with _unseen():
                buffer.copy_(message.reshape(buffer.shape))


@contextlib.contextmanager
def _unseen() -> Iterator[None]:
    """The mailbox's copies are no op of the model: out of sight of the recording modes."""
    from torch.utils._python_dispatch import _disable_current_modes

    with torch.no_grad(), torch._C.DisableTorchFunction(), _disable_current_modes():
        yield


_job: Mailbox | None = None


@contextlib.contextmanager
def fake_job() -> Iterator[Mailbox]:
    """Ranks traced inside this block, each on its own fake process group, are one job."""
    global _job
    if _job is not None:
        raise RuntimeError("torchatlas: a fake job is already being traced in this process")
    _job = Mailbox()
    try:
        yield _job
    finally:
        _job = None


def deliver(name: str, tensors: list[torch.Tensor], rank: int, peer: Any) -> None:
    """Complete a send or receive of the fake job being traced (nothing outside one)."""
    if _job is None or not isinstance(peer, int):
        return
    for t in tensors:
        if "send" in name:
            _job.sent(rank, peer, t)
        else:
            _job.receive(peer, rank, t)


def vote_stand_ins() -> Iterator[tuple[Any, str, Any]]:
    """(namespace, name, stand-in) for the schedules' warm-up vote, in a fake job."""
    schedules = sys.modules.get(_SCHEDULES)
    if _job is None or schedules is None:
        return
    base = schedules._PipelineSchedule
    yield base, "_warmup_p2p", functools.partialmethod(vote_alone, base._warmup_p2p)


def vote_alone(schedule: Any, original: Callable[..., Any], stages: list[Any], has_backward: bool, p2p_done: bool) -> None:
    """The warm-up vote of one rank of a fake job: each ``PipelineStage`` infers its shapes
    (DYNAMIC) unless they were given (STATIC), as the vote decides where every stage agrees.
    Other stages (``pipeline()``'s) greet their neighbours, as in a real job."""
    from torch.distributed.pipelining._utils import InferenceMode
    from torch.distributed.pipelining.stage import PipelineStage

    if _job is None or not all(isinstance(s, PipelineStage) for s in stages):
        return original(schedule, stages, has_backward, p2p_done)
    for stage in stages:
        static = not InferenceMode.needs_dynamic(stage._user_meta, has_backward)
        stage._inference_mode = InferenceMode.STATIC if static else InferenceMode.DYNAMIC
        _job.votes[int(stage.stage_index)] = static
    return None
