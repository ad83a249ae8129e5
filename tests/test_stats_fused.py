"""The one-read stats kernel (``_capture._stats_fused``) gives the ATen path's numbers: run in
Triton's interpreter on the CPU where Triton is installed (a GPU machine's image has it; the
dev venv does not, so there this is skipped and tests/test_gpu.py checks it on the device)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).parent.parent / "src"
CHECK = r'''
import math, torch
from torchatlas._capture import _stats, _stats_fused
_stats_fused._programs = lambda index: 3  # a few programs, so atomics combine partial rows
cases = []
for dtype in (torch.float32, torch.bfloat16, torch.float16):
    for n in (1, 5, 2048, 5000, 20011):
        x = torch.randn(n).to(dtype)
        cases.append(x)
        if n > 10:
            y = x.clone(); y[3] = 0; y[7] = float("nan"); y[9] = float("inf"); y[11] = float("-inf")
            cases.append(y)
            z = x.clone(); z[5] = float("-inf")
            cases.append(z)
cases.append(torch.randn(300, 70).t())  # a dense block in another order
for x in cases:
    row = torch.zeros(7); row[0], row[1] = _stats_fused.INITIAL_ROW[:2]
    _stats_fused.measure_into(_stats_fused.dense_block(x), row)
    got, want = _stats_fused.fix_row(row.tolist()), _stats._float_numbers_now(x)
    for g, w in zip(got, want):
        assert (math.isnan(g) and math.isnan(w)) or math.isclose(g, w, rel_tol=1e-4, abs_tol=1e-3), (x.dtype, x.shape, got, want)
print("ok", len(cases))
'''


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="Triton is not installed here")
def test_the_fused_kernel_gives_the_aten_paths_numbers_in_tritons_interpreter() -> None:
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(SRC))
    done = subprocess.run([sys.executable, "-c", CHECK], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.startswith("ok"), done.stderr[-3000:]


def test_a_row_the_kernel_wrote_reads_as_the_aten_path_writes_it() -> None:
    from torchatlas._capture import _stats_fused

    assert _stats_fused.fix_row([-1.0, 2.0, 3.0, 16.0, 5.0, 0.0, 0.0]) == [-1.0, 2.0, 3.0, 4.0, 5.0, 0.0, 0.0]
    nan_row = _stats_fused.fix_row([-1.0, 2.0, float("nan"), 16.0, 5.0, 1.0, 0.0])
    assert all(v != v for v in nan_row[:3]) and nan_row[3:] == [4.0, 5.0, 1.0, 0.0]
