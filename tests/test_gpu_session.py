"""``bench/gpu_session.sh`` (one GPU session's checks as one command) and ``./dev test-gpu`` on
a machine without CUDA: every step skipped with a message, a summary written, exit status 0."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "bench" / "gpu_session.sh"

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="with CUDA the script runs the real steps")


def _run(*args: str, out: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OUT": str(out), "PYTHON": sys.executable}
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=120)


def test_without_cuda_every_step_is_skipped_and_summed_up(tmp_path) -> None:
    done = _run(out=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = (tmp_path / "session.md").read_text()
    assert f"torch {torch.__version__}" in summary and "card: none" in summary
    for step in ("tests", "profile", "runtime", "compare"):
        assert f"| {step} | skipped: no CUDA device | 0 |" in summary
        assert f"{step}: skipped, torch sees no CUDA device here" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["session.log", "session.md"]


def test_an_unknown_step_is_one_usage_line(tmp_path) -> None:
    done = _run("tests", "benchmark", out=tmp_path)
    assert done.returncode == 2 and done.stderr.strip() == (
        "gpu_session.sh: unknown step 'benchmark' (steps: tests profile runtime compare)"
    )


def test_dev_test_gpu_with_an_interpreter_of_ones_own_says_there_is_no_cuda() -> None:
    env = {**os.environ, "PYTHON": sys.executable}
    done = subprocess.run([str(REPO / "dev"), "test-gpu"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "torch sees no CUDA device here" in done.stderr
