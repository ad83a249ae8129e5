"""Capture: the only layer that touches torch internals. It emits a ``GraphIR``.

:data:`LEVELS` is the registry of capture levels: a level is one module with a
function that adds its recorders to a :class:`Session`, and one line here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from .._ir import GraphIR
from .._text import error_text
from . import _source
from ._aten import AtenLevel
from ._backward import BackwardFacts, default_loss, gradient_targets
from ._compile import compile_facts
from ._distributed import check_rank, fake_rank
from ._export_import import from_export
from ._fingerprints import Fingerprints
from ._fx_import import from_fx
from ._patches import collection_paused
from ._pipeline import fake_job
from ._pt2 import UnsafeArchiveError, load_exported, read_exported
from ._records import Recording
from ._regions import annotate as annotate_compile
from ._runtime import Keeper, Selector
from ._session import LossError, Session, TraceError, unwrap_model

__all__ = [
    "LEVELS",
    "Capture",
    "Session",
    "TraceError",
    "UnsafeArchiveError",
    "annotate_compile",
    "capture",
    "check_rank",
    "fake_rank",
    "fake_job",
    "collection_paused",
    "compile_facts",
    "from_export",
    "from_fx",
    "load_exported",
    "read_exported",
    "unwrap_model",
    "user_location",
]


def _python(session: Session) -> None:
    """Torch functions, Tensor methods and operators as written: the Python level alone."""


def _aten(session: Session) -> AtenLevel:
    """The ops that reach the ATen dispatcher, each linked to the Python op it came from."""
    aten = AtenLevel(Recording("aten", session.tracker.scopes), session.tracker, list(session.inputs))
    session.python.observer = aten
    session.tracker.listeners.append(aten)
    session.modes.append(aten.mode)
    session.result = (aten.recording, aten.flow)
    session.recordings.append(aten.recording)
    session.recorder = aten
    session.releases.append(aten.release)
    if session.python.dtensors:  # a process group: collectives and FSDP2's unsharded parameters
        aten.flow.watch_views()
        aten.groups = session.python.groups
        aten.dtensors = True
    return aten


def _backward(session: Session, loss_fn: Callable[[Any], torch.Tensor] | None = None) -> None:
    """Forward and backward ATen ops, tied together through autograd, and the saved activations."""
    if not torch.is_grad_enabled():
        raise TraceError(
            "torchatlas: backward=True needs gradients, which are off here (torch.no_grad() or "
            "torch.inference_mode()); trace outside them"
        )
    aten = _aten(session)
    facts = BackwardFacts(aten, session.model)
    session.releases.append(facts.release)
    losses: list[torch.Tensor] = []

    def take_loss(output: Any) -> None:
        if loss_fn is None:
            losses.append(default_loss(output))
            return
        try:
            losses.append(loss_fn(output))
        except Exception as exc:
            raise LossError(f"torchatlas: loss_fn failed on the model's output: {error_text(exc)}") from exc

    def run_backward() -> None:
        loss = losses.pop()
        if not isinstance(loss, torch.Tensor) or not loss.requires_grad:
            raise TraceError("torchatlas: the loss does not require grad, so there is no backward pass to record")
        targets = gradient_targets(session.model, session.args, session.kwargs)
        if not targets:
            raise TraceError("torchatlas: no parameter or input requires grad, so there is no backward pass to record")
        facts.start_backward()
        try:
            with aten.mode:  # autograd's ops only: no Python call of the user's runs here
                grads = torch.autograd.grad(loss, [t for _, t in targets], allow_unused=True)
        except RuntimeError as exc:
            if "use_reentrant" not in str(exc):
                raise
            raise TraceError(
                "torchatlas: backward=True cannot run through torch.utils.checkpoint(use_reentrant=True), "
                "which only .backward() can differentiate; use use_reentrant=False"
            ) from exc
        facts.gradient_outputs(targets, grads)

    session.after_forward = take_loss
    session.after_recording = run_backward


LEVELS: dict[str, Callable[..., Any]] = {"python": _python, "aten": _aten, "backward": _backward}
"""Capture level name -> the function that sets a session up for it."""


def capture(
    model: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    level: str = "python",
    partial: bool = False,
    progress: Callable[[int], None] | None = None,
    stats: bool = False,
    save: Selector | None = None,
    save_device: str | torch.device | None = None,
    profile: bool = False,
    profile_rounds: tuple[int, int] = (1, 0),
    fingerprint: bool = False,
    keep_full: frozenset[str] = frozenset(),
    keep_budget: int = 0,
    **options: Any,
) -> Capture:
    """Run ``model(*args, **kwargs)`` once, recording it at ``level``.

    Without ``partial`` an exception propagates unchanged, with a note naming where it
    happened. ``stats``, ``save`` and ``profile`` record what the model did at run time.
    ``profile_rounds``: (timed, untimed first) passes of the timing that ``profile`` adds.
    ``fingerprint``: a numeric fingerprint of every op output (``_fingerprints``); the whole
    outputs of the node ids in ``keep_full`` are kept too (in ``activations``, by node id)
    while they fit ``keep_budget`` bytes.
    ``options`` go to the level (``loss_fn`` for "backward").
    """
    session = Session(model, args, kwargs, progress)
    LEVELS[level](session, **options)
    keep = Keeper(save, save_device, session.result[0]) if save is not None else None
    session.watch_run_time(stats, keep, profile, profile_rounds)
    prints = Fingerprints(session.result[0], keep_full, keep_budget) if fingerprint else None
    if prints is not None:
        session.watch_fingerprints(prints)
    try:
        ir, output, error = session.run(partial)
    except BaseException:
        if keep is not None:  # the traceback's frames still reach the keeper: free the copies now
            keep.kept.clear()
        if prints is not None:
            prints.kept.clear()
        raise
    kept: dict[str, Any] = {}
    if keep is not None:  # the graph alone holds the copies: the keeper may sit in a cycle of the recorder's
        kept, keep.kept = keep.kept, {}
    if prints is not None:
        kept, prints.kept = {**kept, **prints.kept}, {}
    return Capture(ir, output, error, kept)


@dataclass
class Capture:
    """What one capture gives."""

    ir: GraphIR
    output: Any
    """What the model returned (None after a failed forward pass)."""
    error: BaseException | None
    """With ``partial=True``: the exception that stopped the forward pass."""
    activations: dict[str, Any]
    """The outputs ``save`` asked to keep, by module path (``path#k`` for later calls) and node id."""


def user_location(exc: BaseException) -> str:
    """`` (file.py:12)``: the innermost frame of ``exc`` outside torch and torchatlas, if any."""
    frame = _source.user_traceback_frame(exc)
    return f" ({frame.filename}:{frame.lineno})" if frame else ""
