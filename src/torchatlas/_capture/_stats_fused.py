"""A big float output's numbers in one read on a CUDA device (``trace(stats=True)``).

Measured with ATen reductions, an output costs a dozen kernels and as many reads of it, and
counting NaN and Inf writes masks and their half-precision copies besides: on Llama-8B
(4×2048 tokens) that made ``stats=True`` 5.9× a forward on an H100, where each of the
model's elementwise ops reads its input once. One Triton kernel instead reads the output
once, in its own dtype, and adds into its row of the device buffer (``_stats._DeviceRows``)
with atomics: smallest and largest finite-or-infinite value (NaN left out), sum, sum of
squares, non-zero, NaN and Inf counts. ``fix_row`` turns the row into the ATen path's
meaning when it is read (the square root of the sum of squares; min and max NaN where a NaN
was counted), so both paths give one set of numbers.

Used only where Triton imports and runs the tensor's device (CUDA); everywhere else, and for
a tensor whose elements are not one dense block of memory, the ATen path measures.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch

Tensor = torch.Tensor

_DTYPES = frozenset({torch.float16, torch.bfloat16, torch.float32})
_BLOCK = 2048
_MOST = (1 << 31) - (1 << 24)
"""Offsets are 32-bit in the kernel: a bigger output is measured by the ATen path."""
INITIAL_ROW = (math.inf, -math.inf, 0.0, 0.0, 0.0, 0.0, 0.0)
"""What a row holds before the kernel adds into it (min, max, sum, squares, non-zero, NaN, Inf)."""


def dense_block(x: Tensor) -> Tensor | None:
    """``x``, or a view of it, whose elements are one dense block of memory in memory order;
    None when there is none (an expanded or sliced view)."""
    if x.is_contiguous():
        return x
    if 0 in x.stride():
        return None
    dense = x.permute(sorted(range(x.dim()), key=lambda d: x.stride(d), reverse=True))
    return dense if dense.is_contiguous() else None


def usable(x: Tensor, row: Tensor) -> bool:
    """Whether the kernel measures ``x`` into ``row`` (float32 rows of half, bfloat16 or float32
    tensors on a CUDA device where Triton runs)."""
    return (
        x.device.type == "cuda" and x.dtype in _DTYPES and row.dtype == torch.float32
        and 0 < x.numel() <= _MOST and _kernel() is not None
    )


def measure_into(block: Tensor, row: Tensor) -> None:
    """Add ``block``'s numbers into ``row`` (holding ``INITIAL_ROW``): one launch, no sync."""
    kernel = _kernel()
    n = block.numel()
    programs = min(-(-n // _BLOCK), _programs(block.device.index or 0))
    kernel[(programs,)](block, row, n, BLOCK=_BLOCK, num_warps=8)


def fix_row(numbers: list[float]) -> list[float]:
    """A row the kernel wrote, read as the ATen path writes it: column 3 the L2 norm, and min and
    max NaN where there was a NaN (as ``torch.aminmax`` gives them)."""
    low, high, total, squares, nonzero, nan, inf = numbers
    if nan:
        low = high = math.nan
    return [low, high, total, math.sqrt(squares) if squares >= 0 else math.nan, nonzero, nan, inf]


@functools.cache
def _programs(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count * 4


@functools.cache
def _kernel() -> Any:
    """The compiled kernel's launcher, or None where Triton is not installed."""
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None

    @triton.jit
    def row_numbers(x_ptr, row_ptr, n, BLOCK: tl.constexpr):  # noqa: N803 - Triton's constexpr style
        lanes = tl.arange(0, BLOCK)
        low = tl.full([BLOCK], float("inf"), tl.float32)
        high = tl.full([BLOCK], float("-inf"), tl.float32)
        total = tl.zeros([BLOCK], tl.float32)
        squares = tl.zeros([BLOCK], tl.float32)
        nonzero = tl.zeros([BLOCK], tl.int32)
        nans = tl.zeros([BLOCK], tl.int32)
        infs = tl.zeros([BLOCK], tl.int32)
        for start in range(tl.program_id(0) * BLOCK, n, tl.num_programs(0) * BLOCK):
            offsets = start + lanes
            inside = offsets < n
            v = tl.load(x_ptr + offsets, mask=inside, other=0.0).to(tl.float32)
            nan = v != v
            skip = nan | ~inside
            low = tl.where(skip, low, tl.minimum(low, v))
            high = tl.where(skip, high, tl.maximum(high, v))
            total += v
            squares += v * v
            nonzero += (v != 0.0).to(tl.int32)
            nans += nan.to(tl.int32)
            infs += (tl.abs(v) == float("inf")).to(tl.int32)
        tl.atomic_min(row_ptr + 0, tl.min(low, axis=0))
        tl.atomic_max(row_ptr + 1, tl.max(high, axis=0))
        tl.atomic_add(row_ptr + 2, tl.sum(total, axis=0))
        tl.atomic_add(row_ptr + 3, tl.sum(squares, axis=0))
        tl.atomic_add(row_ptr + 4, tl.sum(nonzero, axis=0).to(tl.float32))
        tl.atomic_add(row_ptr + 5, tl.sum(nans, axis=0).to(tl.float32))
        tl.atomic_add(row_ptr + 6, tl.sum(infs, axis=0).to(tl.float32))

    return row_numbers
