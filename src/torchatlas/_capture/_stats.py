"""Numbers of each op's outputs (``trace(stats=True)``), computed as the op runs.

Only a dense strided tensor of a float or integer dtype is measured; every other output
(sparse, quantized, nested, float8, wide unsigned, complex, meta, a subclass) gets no numbers
and a reason in ``node.meta["stats_skipped"]``. Measuring never raises into the model: an
output that cannot be measured is skipped with torch's own message as the reason.

A float output costs a few reductions in its own dtype with float32 accumulation (min and
max together, the sum, the sum of squares, the non-zero count) and no float copy of it. On
a CPU the numbers are read at once (reading costs nothing there), and NaN and Inf are
counted only when min, max or sum say there are any. On an accelerator nothing waits for the
device per op: the reductions write each output's numbers straight into one row of a
preallocated buffer on its device (one per accumulation dtype), read once when the forward
pass is over; an output of at most ``_stats_staging.STAGE_MOST`` elements is copied there
with one kernel and measured with the others at a flush (``_stats_staging``). NaN and Inf
of a bigger output are counted in slices of at most ``_CHUNK`` elements, so a mask is never
larger than that. No step copies the output itself: ``torch.aminmax`` reads a
contiguous copy of a non-contiguous tensor and ``torch.isinf`` computes ``x.abs()``, so
neither is called that way (tests/test_stats_buffered.py checks the allocations).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.utils._python_dispatch import _disable_current_modes

from .._ops import op_name
from .._text import error_text
from . import _distributed, _stats_fused, _stats_staging
from ._records import Recording
from ._stats_staging import Staging, isinf_without_copy

Tensor = torch.Tensor

_FLOATS = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64})
_INTEGERS = frozenset({torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64})
_ACCUMULATE = {torch.float16: torch.float32, torch.bfloat16: torch.float32}
_CHUNK = 1 << 22
"""Elements per NaN/Inf mask on an accelerator (a bool mask and its float16 copy: 12 MB at most);
a float32 count of that many is exact."""
SAMPLE = 1 << 16
"""``stats="sample"``: outputs over this many elements are measured on a strided sample of about as many."""
_COLUMNS = 7  # min, max, sum, L2 norm, non-zero count, NaN count, Inf count
_READ_AT_ONCE = frozenset({"cpu"})
"""Devices whose numbers are read as each op runs (reading waits for nothing there)."""
_STAGED = frozenset({"cuda", "cpu"})
"""Devices whose small float outputs are staged and measured together (``_stats_staging``):
where ``torch.segment_reduce`` runs (the CPU: where the device path is tested on CPU tensors)."""


def skip_reason(t: Tensor) -> str | None:
    """Why ``t`` holds no numbers to measure, or None when it does."""
    if type(t) not in (torch.Tensor, torch.nn.Parameter):
        return f"a {type(t).__name__} (a tensor subclass) is not measured"
    if t.device.type == "meta":
        return "on the meta device: it holds no numbers"
    if t.is_nested:
        return "a nested tensor is not measured"
    if t.layout is not torch.strided:
        return f"{str(t.layout).replace('torch.', '')} layout: only dense tensors are measured"
    if t.is_quantized:
        return "a quantized tensor is not measured"
    if t.dtype not in _FLOATS and t.dtype not in _INTEGERS:
        return f"{str(t.dtype).replace('torch.', '')} is not measured (only float16/32/64, bfloat16, integers, bool)"
    return None


def sample_of(x: Tensor, limit: int) -> Tensor:
    """A strided view of ``x`` with about ``limit`` elements (no copy): every k-th element of a
    contiguous tensor, else every k-th index along its longest dimension."""
    n = x.numel()
    if n <= limit:
        return x
    step = -(-n // limit)
    if x.is_contiguous():
        return x.view(-1)[::step]
    dim = max(range(x.dim()), key=lambda d: x.shape[d])
    index = [slice(None)] * x.dim()
    index[dim] = slice(None, None, min(step, x.shape[dim]))
    return x[tuple(index)]


def _row_dtype(dtype: torch.dtype) -> torch.dtype:
    """The buffer an output's numbers go to: its accumulation dtype, so that each reduction
    writes its row in place (``out=``); integers' min and max as int64."""
    return _ACCUMULATE.get(dtype, dtype) if dtype in _FLOATS else torch.int64


class _DeviceRows:
    """One accelerator's numbers of one dtype: a row per output in one buffer, grown by doubling."""

    def __init__(self, device: torch.device, dtype: torch.dtype) -> None:
        self.device, self.dtype = device, dtype
        self.buffer = self._fresh(256)
        self.used = 0

    def _fresh(self, count: int) -> Tensor:
        """Rows holding ``_stats_fused.INITIAL_ROW`` (what the fused kernel adds into), made on the
        device without a copy from the host (which would wait for it). Never an inference tensor
        (made inside a model's torch.inference_mode block), which could not be written into
        once the model leaves the block."""
        with torch.inference_mode(False):
            fresh = torch.zeros((count, _COLUMNS), dtype=self.dtype, device=self.device)
            if self.dtype.is_floating_point:
                fresh[:, 0], fresh[:, 1] = _stats_fused.INITIAL_ROW[:2]
        return fresh

    def reserve(self) -> int:
        """The number of a new row (written later, by a flush of staged outputs)."""
        if self.used == len(self.buffer):
            with torch.inference_mode(False):
                self.buffer = torch.cat([self.buffer, self._fresh(len(self.buffer))])
        self.used += 1
        return self.used - 1

    def next_row(self) -> Tensor:
        return self.buffer[self.reserve()]


ALLOCATES_ONLY = frozenset({"empty", "empty_like", "new_empty", "empty_strided", "new_empty_strided", "empty_permuted"})
"""Ops whose output is memory not yet written (FSDP's all-gather buffers are ``empty`` too): a NaN
there is whatever the allocator handed out, read by nothing before the model overwrites it."""
UNINITIALISED = "uninitialised memory (torch.empty and kin): its values are not the model's until it writes them"


class OutputStats:
    """Per op output: a few numbers on the tensor's device now, a dict at :meth:`finish`."""

    def __init__(self, recording: Recording, sample: bool = False) -> None:
        self.recording = recording
        self.limit = SAMPLE if sample else None
        # (record, slot, numbers, floating, elements read): numbers read already (CPU) or a
        # (device rows, row number) still on the device
        self._pending: list[tuple[int, int, Any, bool, int]] = []
        self._devices: dict[tuple[torch.device, torch.dtype], _DeviceRows] = {}
        self._staged: dict[tuple[torch.device, torch.dtype], Staging] = {}
        self._failed: dict[tuple[int, int], str] = {}  # (id of device rows, row): why a flush failed
        self._skipped: list[tuple[int, int, str]] = []
        self._sampled = 0
        self._fused_rows: set[tuple[int, int]] = set()  # (id of device rows, row): the kernel's meaning
        self._fused_works = True

    def op_recorded(self, index: int, outs: list[Tensor]) -> None:
        if op_name(self.recording.nodes[index].target or "") in ALLOCATES_ONLY:
            self._skipped.extend((index, slot, UNINITIALISED) for slot in range(len(outs)))
            return
        with torch._C.DisableTorchFunction(), _disable_current_modes(), torch.no_grad():
            for slot, t in enumerate(outs):
                try:
                    self._measure(index, slot, t)
                except Exception as exc:  # a watcher's failure is never the model's
                    self._skipped.append((index, slot, f"could not be measured: {error_text(exc)}"))

    def _measure(self, index: int, slot: int, t: Tensor) -> None:
        inner = _distributed.inner_tensor(t) if type(t) is not Tensor else None
        if inner is not None:  # a DTensor: the numbers of this rank's part
            t = inner
        reason = skip_reason(t)
        if reason is not None:
            self._skipped.append((index, slot, reason))
            return
        if t.numel() == 0:
            return  # nothing to measure, nothing missing
        x = t.detach()
        if self.limit is not None and x.numel() > self.limit:
            x = sample_of(x, self.limit)
            self._sampled += 1
        floating = x.dtype in _FLOATS
        if x.device.type in _READ_AT_ONCE:
            numbers: Any = _float_numbers_now(x) if floating else _int_numbers_now(x)
        else:
            key = (x.device, _row_dtype(x.dtype))
            rows = self._devices.get(key)
            if rows is None:
                rows = self._devices[key] = _DeviceRows(*key)
            if floating and x.numel() <= _stats_staging.STAGE_MOST and x.device.type in _STAGED:
                # one copy now, measured with the others at a flush
                staging = self._staged.get((x.device, x.dtype))
                if staging is None:
                    staging = self._staged[(x.device, x.dtype)] = Staging(x.device, x.dtype, rows)
                if staging.full_for(x):
                    self._flush(staging)
                numbers = (rows, staging.stage(x))
            else:
                row = rows.next_row()
                numbers = (rows, rows.used - 1)
                if floating and self._fused_into(x, row):
                    self._fused_rows.add((id(rows), rows.used - 1))
                else:
                    (_float_numbers_into if floating else _int_numbers_into)(x, row)
        self._pending.append((index, slot, numbers, floating, x.numel()))

    def _fused_into(self, x: Tensor, row: Tensor) -> bool:
        """Measure ``x`` into ``row`` with the one-read kernel (``_stats_fused``) where it can; False
        where the ATen reductions must. A kernel that fails to build or launch is not tried again."""
        block = _stats_fused.dense_block(x) if self._fused_works and _stats_fused.usable(x, row) else None
        if block is None:
            return False
        try:
            _stats_fused.measure_into(block, row)
        except Exception:  # noqa: BLE001 - Triton that cannot build here: the ATen path measures
            self._fused_works = False
            return False
        return True

    def _flush(self, staging: Staging) -> None:
        """Measure the staged outputs; where that fails, they are skipped with the reason."""
        rows = staging.row_numbers
        try:
            staging.flush()
        except Exception as exc:  # a watcher's failure is never the model's
            reason = f"could not be measured: {error_text(exc)}"
            self._failed.update({(id(staging.rows), row): reason for row in rows})

    def finish(self) -> None:
        """Read each device's buffer once and write the numbers into the records."""
        with torch._C.DisableTorchFunction(), _disable_current_modes():
            for staging in self._staged.values():
                self._flush(staging)
            read = {id(rows): rows.buffer[: rows.used].tolist() for rows in self._devices.values()}
        nodes = self.recording.nodes
        for index, slot, numbers, floating, count in self._pending:
            if isinstance(numbers, tuple):
                rows, row = numbers
                if (id(rows), row) in self._failed:
                    self._skipped.append((index, slot, self._failed[(id(rows), row)]))
                    continue
                numbers = read[id(rows)][row]
                if (id(rows), row) in self._fused_rows:
                    numbers = _stats_fused.fix_row(numbers)
            record = _with_list(nodes[index], "stats")
            stats = _float_stats(numbers, count) if floating else _int_stats(numbers)
            if count != _numel(nodes[index].outputs[slot][0]):
                stats["sampled"] = count
            record.extra["stats"][slot] = stats
        for index, slot, reason in self._skipped:
            _with_list(nodes[index], "stats_skipped").extra["stats_skipped"][slot] = reason
        notes = []
        if self._skipped:
            reasons = sorted({reason for _, _, reason in self._skipped})
            notes.append(f"{len(self._skipped)} outputs have no statistics: " + "; ".join(reasons))
        if self._sampled:
            notes.append(
                f"{self._sampled} outputs over {SAMPLE} elements were measured on a strided sample of about "
                f"{SAMPLE} elements (stats='sample'): their counts are the sample's"
            )
        if notes:
            self.recording.meta["stats_note"] = ". ".join(notes)
        self._pending, self._devices, self._staged, self._skipped, self._failed = [], {}, {}, [], {}
        self._fused_rows = set()


def _with_list(record: Any, key: str) -> Any:
    if record.extra is None or key not in record.extra:
        record.extra = {**(record.extra or {}), key: [None] * len(record.outputs)}
    return record


def _numel(shape: Any) -> int:
    n = 1
    for size in shape:
        n *= int(size)
    return n


def _float_numbers_now(x: Tensor, nonzero: bool = True) -> list[float]:
    """``[min, max, sum, L2 norm, nonzero, nan, inf]`` of a float tensor on a CPU, read at once.

    Mean and std come from the sum and the sum of squares (the L2 norm): one pass each,
    where ``std_mean`` takes fifty times longer on a CPU. A NaN or Inf shows in min, max
    or sum, so they are counted only then. ``nonzero=False`` leaves that count 0: a pass
    over ``x`` a caller without a use for it (a fingerprint) is spared.
    """
    wide = _ACCUMULATE.get(x.dtype)
    low, high = _min_max(x)
    row = [
        low.item(), high.item(), x.sum(dtype=wide).item(), torch.linalg.vector_norm(x, dtype=wide).item(),
        torch.count_nonzero(x).item() if nonzero else 0, 0, 0,
    ]
    if not all(math.isfinite(v) for v in row[:3]):
        row[5], row[6] = torch.count_nonzero(torch.isnan(x)).item(), torch.count_nonzero(isinf_without_copy(x)).item()
    return row


def _float_numbers_into(x: Tensor, row: Tensor) -> None:
    """The same numbers, written on the device straight into ``row`` (of ``x``'s accumulation
    dtype) by the reductions themselves: each reads ``x`` in its own dtype, CUDA accumulating
    half and bfloat16 in float32 without a copy; no sync. Twelve kernel launches per slice
    (two more in half precision, whose min and max are stacked and cast): min/max, sum, two
    norms, then NaN (mask, float16 copy, sum) and Inf (two masks, their union, float16 copy,
    sum). NaN and Inf masks are made a slice at a time and counted in float32 (exact within
    a slice; the total of several slices is a float32 number, exact up to 2**24)."""
    cells = row.unbind()  # one call for the seven views (each is a dispatch on the host)
    _min_max_into(x, row, cells)
    torch.sum(x, dim=None, dtype=row.dtype, out=cells[2])
    torch.linalg.vector_norm(x, 2, dtype=row.dtype, out=cells[3])
    torch.linalg.vector_norm(x, 0, dtype=row.dtype, out=cells[4])  # counts x != 0, as count_nonzero does
    _count_into(torch.isnan, x, cells[5])
    _count_into(isinf_without_copy, x, cells[6])


def _min_max(x: Tensor) -> tuple[Tensor, Tensor]:
    """Smallest and largest element, without a copy of ``x``: ``torch.aminmax`` over every
    element reads ``x.contiguous()``, so it is given ``x`` permuted into memory order (a view)
    where that is dense, and else ``amin`` and ``amax`` read ``x`` apiece."""
    view = _aminmax_view(x)
    return torch.aminmax(view) if view is not None else (torch.amin(x), torch.amax(x))


def _aminmax_view(x: Tensor) -> Tensor | None:
    """``x`` or a view of it that ``torch.aminmax`` reads without a copy; None if there is none.
    An expanded view (a stride of 0) is given as it is: its copy fails at once where it would
    be too big, where ``amin`` over every repeat would run for hours."""
    return x if 0 in x.stride() and not x.is_contiguous() else _stats_fused.dense_block(x)


def _min_max_into(x: Tensor, row: Tensor, cells: tuple[Tensor, ...]) -> None:
    view = _aminmax_view(x)
    if view is None:
        row[:2].copy_(torch.stack((torch.amin(x), torch.amax(x))))
    elif x.dtype == row.dtype:
        torch.aminmax(view, out=cells[:2])  # written in place: one kernel
    else:
        row[:2].copy_(torch.stack(torch.aminmax(view)))


def _count_into(mask_of: Any, x: Tensor, out: Tensor) -> None:
    parts = _slices(x)
    if len(parts) == 1 and out.dtype == torch.float32:
        torch.sum(mask_of(x).to(torch.float16), dim=None, dtype=torch.float32, out=out)
        return
    counts = [mask_of(part).to(torch.float16).sum(dtype=torch.float32) for part in parts]
    out.copy_(counts[0] if len(counts) == 1 else torch.stack(counts).sum(dtype=torch.float64))


def _slices(x: Tensor) -> list[Tensor]:
    """Views of ``x`` of at most about ``_CHUNK`` elements each, along its longest dimension."""
    if x.numel() <= _CHUNK:
        return [x]
    if x.is_contiguous():
        return list(x.view(-1).split(_CHUNK))
    dim = max(range(x.dim()), key=lambda d: x.shape[d])
    per = max(1, _CHUNK * x.shape[dim] // x.numel())
    return list(x.split(per, dim))


def _float_stats(row: list[float], numel: int) -> dict[str, Any]:
    low, high, total, norm, nonzero, nan, inf = row
    squares = norm * norm

    def finite(v: float) -> float | None:
        return v if v == v and abs(v) != float("inf") else None  # JSON has no NaN: not a number is null

    low, high = finite(low), finite(high)
    mean = finite(total / numel) if numel else None
    # torch.std's: with Bessel's correction, as a user checking it against torch reads it
    variance = (squares - numel * mean * mean) / (numel - 1) if mean is not None and numel > 1 else None
    std = finite(max(variance, 0.0) ** 0.5) if variance is not None and variance == variance else None
    absmax = max(abs(low), abs(high)) if low is not None and high is not None else None
    return {
        "min": low, "max": high, "mean": mean, "std": std, "absmax": absmax,
        "nan": int(nan), "inf": int(inf), "zeros": (numel - round(nonzero)) / numel if numel else None,
    }


def _int_numbers_now(x: Tensor) -> list[float]:
    if x.dtype == torch.bool:
        return [int(x.all().item()), int(x.any().item())]
    low, high = _min_max(x)
    return [low.item(), high.item()]


def _int_numbers_into(x: Tensor, row: Tensor) -> None:
    if x.dtype == torch.bool:
        row[:2].copy_(torch.stack((x.all(), x.any())))
    else:
        _min_max_into(x, row, row.unbind())


def _int_stats(row: list[float]) -> dict[str, Any]:
    return {"min": int(row[0]), "max": int(row[1])}
