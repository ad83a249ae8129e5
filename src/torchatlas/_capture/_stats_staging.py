"""Small float outputs on an accelerator, measured many at a time (``trace(stats=True)``).

On a launch-bound forward (GPT-2, BERT, T5 at batch 1-8) every kernel launch is host time,
and measuring an output alone costs a dozen of them. An output of at most ``STAGE_MOST``
elements is instead copied with one kernel into a flat staging buffer of its dtype; when the
buffer is full, or the forward is over, one flush computes every staged output's numbers
with a fixed number of segmented reductions (``torch.segment_reduce``, one segment per
output), however many outputs there are, and writes them into the outputs' rows of the
same device buffers the big outputs' numbers go to. Nothing is read back here: the rows are
read once, at ``OutputStats.finish``. The copy is also what the numbers are of: an op that
later changes its output in place does not change them.
"""

from __future__ import annotations

import itertools
from typing import Any

import torch

Tensor = torch.Tensor

STAGE_MOST = 1 << 18
"""Outputs of at most this many elements are staged: up to here a dozen reductions of one
output take a launch's time each (1 MiB of float32 is read in well under a microsecond on a
GPU), so one copy now and a share of a flush cost less."""
_STAGE_CAPACITY = 1 << 22
"""Elements staged per dtype before a flush (16 or more outputs of up to ``STAGE_MOST``, so a
flush's calls are shared by that many at least): the flush's float64 temporaries (two copies
of the staged elements at a time) then stay at about 64 MiB."""
_FIRST_CAPACITY = 1 << 16


class Staging:
    """One accelerator's staged outputs of one dtype: their elements end to end in one buffer,
    and for each its row in the device rows (``_stats._DeviceRows``) its numbers go to."""

    def __init__(self, device: torch.device, dtype: torch.dtype, rows: Any) -> None:
        self.device, self.dtype, self.rows = device, dtype, rows
        with torch.inference_mode(False):  # written into after a model's inference_mode block too
            self.buffer = torch.empty(_FIRST_CAPACITY, dtype=dtype, device=device)
        self.used = 0
        self.lengths: list[int] = []
        self.row_numbers: list[int] = []

    def full_for(self, x: Tensor) -> bool:
        """Whether staging ``x`` would pass the capacity: flush first."""
        return self.used > 0 and self.used + x.numel() > _STAGE_CAPACITY

    def stage(self, x: Tensor) -> int:
        """Copy ``x`` in (one kernel) and return the row number its numbers will be written to."""
        n = x.numel()
        if self.used + n > len(self.buffer):
            self._grow(self.used + n)
        strides = _contiguous_strides(x.shape)
        torch.as_strided(self.buffer, x.shape, strides, self.used).copy_(x)
        self.used += n
        self.lengths.append(n)
        row = self.rows.reserve()
        self.row_numbers.append(row)
        return row

    def _grow(self, needed: int) -> None:
        size = len(self.buffer)
        while size < needed:
            size *= 2
        with torch.inference_mode(False):
            bigger = torch.empty(size, dtype=self.dtype, device=self.device)
        bigger[: self.used].copy_(self.buffer[: self.used])
        self.buffer = bigger

    def flush(self) -> None:
        """Every staged output's ``[min, max, sum, L2 norm, nonzero, nan, inf]``, computed on
        the device and written into its row: a fixed number of kernels, no read back."""
        if not self.lengths:
            return
        count = len(self.lengths)
        try:
            self._compute(count)
        finally:  # computed or failed, the staged outputs are done with
            self.used = 0
            self.lengths, self.row_numbers = [], []

    def _compute(self, count: int) -> None:
        with torch.no_grad():
            # offsets (where torch would otherwise sum the lengths up at every reduction) and
            # rows go to the device in one copy, from pinned memory on CUDA (a copy from
            # pageable memory would wait for the device)
            offsets = list(itertools.accumulate(self.lengths, initial=0))
            host = torch.tensor(offsets + self.row_numbers, dtype=torch.int64)
            if self.device.type == "cuda":
                host = host.pin_memory()
            offsets_on_device, row_numbers = host.to(self.device, non_blocking=True).split([count + 1, count])
            table = _segment_numbers(self.buffer[: self.used], offsets_on_device)
            self.rows.buffer.index_copy_(0, row_numbers, table.to(self.rows.buffer.dtype))


def isinf_without_copy(x: Tensor) -> Tensor:
    """``torch.isinf(x)`` without its copy: torch computes it as ``x.abs() == inf``."""
    return torch.isposinf(x).logical_or_(torch.isneginf(x))


def _contiguous_strides(shape: torch.Size) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(int(size), 1)
    return tuple(reversed(strides))


def _segment_numbers(flat: Tensor, offsets: Tensor) -> Tensor:
    """One row of seven numbers per segment of ``flat`` (between ``offsets``), accumulated in
    float64: the numbers ``_stats._float_numbers_into`` writes for one output, summed in
    another order, so float64 keeps the std (from the sum of squares, which cancels where
    the mean dwarfs the spread) as close to torch's as one output's own reductions are. A NaN or Inf
    weighs only on its own segment's numbers; min and max are NaN where a segment holds a NaN
    (as ``torch.aminmax`` gives them) whatever the device's segmented min does with one.
    Counts are float sums of 0/1, exact since a segment has at most ``STAGE_MOST`` elements."""
    dtype = torch.float64
    wide = flat.to(dtype)

    def per_segment(values: Tensor, reduce: str) -> Tensor:
        return torch.segment_reduce(values, reduce, offsets=offsets, unsafe=True)  # unsafe: no check that syncs

    nan = per_segment(torch.isnan(wide).to(dtype), "sum")
    inf = per_segment(isinf_without_copy(wide).to(dtype), "sum")
    holds_nan = nan > 0
    not_a_number = torch.full((), float("nan"), dtype=dtype, device=flat.device)
    low = torch.where(holds_nan, not_a_number, per_segment(wide, "min"))
    high = torch.where(holds_nan, not_a_number, per_segment(wide, "max"))
    total = per_segment(wide, "sum")
    norm = per_segment(wide * wide, "sum").sqrt_()
    nonzero = per_segment((wide != 0).to(dtype), "sum")
    return torch.stack((low, high, total, norm, nonzero, nan, inf), dim=1)
