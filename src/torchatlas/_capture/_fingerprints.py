"""A numeric fingerprint of each op's outputs (``trace(fingerprint=True)``), for ``torchatlas.compare``.

A fingerprint answers "are these two outputs the same, and if not by how much" without
keeping the output: its statistics (min, max, mean, L2 norm, NaN and Inf counts), its values
at a fixed set of at most ``SAMPLE`` positions, and a hash of its bytes for exact equality.
The positions depend only on the element count (``positions``), so two runs of the same op
sample the same elements. They are spread by a multiplicative step coprime to the count, so
a sample of a ``rows × columns`` output reads many columns, not every ``k``-th one.

Outputs of the ops named in ``keep`` (by node id) are also copied whole to the CPU while
their bytes fit ``budget``: ``compare(keep="full")`` measures the ops on the path to a
divergence exactly. Measuring never raises into the model: an output that cannot be
measured gets no fingerprint.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils._python_dispatch import _disable_current_modes

from .._text import error_text
from . import _distributed
from ._records import Recording
from ._stats import _FLOATS, _float_numbers_now, skip_reason

Tensor = torch.Tensor

SAMPLE = 1024
"""Positions sampled per output (every element of a smaller one)."""
_ONE_THREAD = 1 << 20
"""Outputs of at most this many elements have their statistics read on one thread (``_threads_for``)."""
_HALF = (torch.float16, torch.bfloat16)
_STEPS = (1_000_003, 999_983, 1_000_033)
"""Primes stepping through the flat index; the first that does not divide the count is used."""


def positions(count: int) -> Tensor | None:
    """The flat indices a fingerprint samples of an output of ``count`` elements (None: all of them)."""
    if count <= SAMPLE:
        return None
    step = next(p for p in _STEPS if count % p)
    return (torch.arange(SAMPLE, dtype=torch.int64) * step) % count


class Fingerprints:
    """Per op output: its fingerprint in ``record.extra["fingerprint"][slot]``, as the op runs."""

    def __init__(self, recording: Recording, keep: frozenset[str] = frozenset(), budget: int = 0) -> None:
        self.recording = recording
        self.keep = keep
        self.budget = budget
        self.kept: dict[str, Tensor] = {}
        """Whole outputs of the ops in ``keep``, by node id (``n12``, ``n12.1`` for a second output)."""
        self.skipped = 0

    def op_recorded(self, index: int, outs: list[Tensor]) -> None:
        with torch._C.DisableTorchFunction(), _disable_current_modes(), torch.no_grad():
            for slot, t in enumerate(outs):
                try:
                    self._measure(index, slot, t)
                except Exception as exc:  # a watcher's failure is never the model's
                    self._note(index, slot, {"skipped": f"could not be measured: {error_text(exc)}"})

    def _measure(self, index: int, slot: int, t: Tensor) -> None:
        inner = _distributed.inner_tensor(t) if type(t) is not Tensor else None
        if inner is not None:
            t = inner
        reason = skip_reason(t)
        if reason is not None:
            self._note(index, slot, {"skipped": reason})
            return
        x = t.detach().contiguous()
        key = f"n{index}" + (f".{slot}" if slot else "")
        if f"n{index}" in self.keep and x.numel() * x.element_size() <= self.budget:
            self.kept[key] = x.to("cpu", copy=True)
            self.budget -= x.numel() * x.element_size()
        self._note(index, slot, fingerprint(x))

    def _note(self, index: int, slot: int, value: dict[str, Any]) -> None:
        record = self.recording.nodes[index]
        if record.extra is None or "fingerprint" not in record.extra:
            record.extra = {**(record.extra or {}), "fingerprint": [None] * len(record.outputs)}
        record.extra["fingerprint"][slot] = value

    def finish(self) -> None:
        """Nothing to collect: every fingerprint is read as its op runs."""


def fingerprint(x: Tensor) -> dict[str, Any]:
    """The fingerprint of a dense contiguous tensor (see the module's docstring)."""
    count = x.numel()
    flat = x.reshape(-1)
    where = positions(count)
    sample = flat if where is None else flat[where.to(x.device)]
    values = sample.to(device="cpu", dtype=torch.float64).tolist()
    cpu = x if x.device.type == "cpu" else x.cpu()
    digest = hashlib.blake2b(cpu.view(-1).view(torch.uint8).numpy().data, digest_size=8).hexdigest() if count else ""
    result: dict[str, Any] = {
        "count": count,
        "dtype": str(x.dtype).replace("torch.", ""),
        "hash": digest,
        "sample": [v if math.isfinite(v) else _nonfinite(v) for v in values],
    }
    if count and x.dtype in _FLOATS:
        with _threads_for(count):
            # one cast to float32, then float32 passes: a CPU reduction that widens half or
            # bfloat16 as it reads runs several times slower than the cast and the passes
            wide = cpu.float() if cpu.dtype in _HALF else cpu
            low, high, total, norm, _, nan, inf = _float_numbers_now(wide, nonzero=False)
        result.update(min=_finite(low), max=_finite(high), mean=_finite(total / count), norm=_finite(norm), nan=int(nan), inf=int(inf))
    elif count:
        result.update(min=float(cpu.min().item()), max=float(cpu.max().item()))
    return result


@contextmanager
def _threads_for(count: int) -> Iterator[None]:
    """One intra-op thread for the statistics of an output of at most ``_ONE_THREAD`` elements:
    waking the thread pool costs more than such a pass (on a busy CPU, a time slice: ~20 ms
    per reduction, where one thread takes 0.01 ms). ``set_num_threads`` is the calling
    thread's own setting under OpenMP, and is put back."""
    if count > _ONE_THREAD:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _finite(v: float) -> float | None:
    return v if math.isfinite(v) else None


def _nonfinite(v: float) -> str:
    """JSON has no NaN or Inf: a sampled one is kept as text."""
    return "nan" if v != v else ("inf" if v > 0 else "-inf")
