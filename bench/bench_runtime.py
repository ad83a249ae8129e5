"""What the run-time options of ``trace`` cost over a plain forward pass: ``python bench/bench_runtime.py``.

For each model of ``bench/compare.py`` (or ``--models``), in a fresh process per option:
alternating rounds of a plain ``torch.no_grad()`` forward and ``torchatlas.trace`` with
``stats=True``, ``save="*"`` (every module call's output kept) or ``profile=True``, and
plain ``trace`` for reference. The figure is the median per-round ratio. Writes
``bench/results/runtime.md``. Target (issue 17): ``stats=True`` at most 2x a forward.
``--device cuda`` adds the row of issue 32's GPU target, Llama-8B in bfloat16 on a 4x2048
batch (``bench/models.py``): ``stats=True`` at most 1.5x the forward's time and 1.25x its
peak memory (what each allocates over the weights, ``torch.cuda.max_memory_allocated``);
without CUDA that row is skipped, said so in the report. The timings are printed and written, never asserted. ``--device cuda`` runs the models on the
GPU (each time ends in ``torch.cuda.synchronize()``), adds the GPU peak memory of each option
against the forward's (``torch.cuda.max_memory_allocated``), and writes ``runtime-cuda.md``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import _report
import torch
from compare import BENCH, add_device_option, check_device, run_worker, worker_env

MODELS = ["coolcnn", "resnet50", "vit-base", "bert-base", "gpt2", "t5-small"]
OPTIONS = ["torchatlas", "torchatlas-stats", "torchatlas-save", "torchatlas-profile"]
STATS_LIMIT = 2.0
GPU_TARGET = "llama-8b"
GPU_TIME_LIMIT, GPU_PEAK_LIMIT = 1.5, 1.25
"""Issue 32: ``stats=True`` on ``GPU_TARGET`` against its forward, time and peak GPU memory."""


def _peak_ratio(doc: dict[str, Any]) -> float | None:
    """The capture's GPU memory over what was held before it, against the forward's."""
    forward, capture = doc.get("forward_extra_gpu_mb"), doc.get("capture_extra_gpu_mb")
    return capture / forward if forward and capture is not None else None


def _target_line(doc: dict[str, Any]) -> str:
    """Whether ``stats=True`` on the GPU target met issue 32's limits."""
    ratio, peak = doc.get("ratio"), _peak_ratio(doc)
    if ratio is None or peak is None:
        return f"GPU target ({GPU_TARGET}, stats=True): no result ({doc.get('error', 'no GPU figures')})."
    met = ratio <= GPU_TIME_LIMIT and peak <= GPU_PEAK_LIMIT
    return (
        f"GPU target ({GPU_TARGET}, stats=True): {ratio:.2f}× the forward's time (limit {GPU_TIME_LIMIT}×), "
        f"{peak:.2f}× its peak memory over the weights (limit {GPU_PEAK_LIMIT}×): {'met' if met else 'missed'}."
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--models", help=f"comma-separated names from bench/models.py (default: {','.join(MODELS)}; with cuda also {GPU_TARGET})"
    )
    parser.add_argument("--out", type=Path, help="default: bench/results/runtime.md (runtime-cuda.md on cuda)")
    parser.add_argument("--budget", type=float, default=20, help="seconds of alternating rounds per cell")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (0: torch's default)")
    parser.add_argument("--timeout", type=float, default=1200, help="seconds per process")
    add_device_option(parser)
    opts = parser.parse_args(argv)
    card = check_device(parser, opts.device)
    if opts.out is None:
        opts.out = BENCH / "results" / ("runtime-cuda.md" if card else "runtime.md")

    env = worker_env(opts.threads, opts.budget, opts.device)
    raw = opts.out.parent / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    names = opts.models.split(",") if opts.models else MODELS + ([GPU_TARGET] if card else [])
    notes = []
    if not card:
        skipped = f"The GPU target row ({GPU_TARGET}, bfloat16, 4×2048) is skipped: it needs `--device cuda` on a CUDA machine."
        notes.append(skipped)
        if GPU_TARGET in names:
            print(skipped, flush=True)
            names.remove(GPU_TARGET)
    rows = []
    for model in names:
        row = [model]
        for tool in OPTIONS:
            doc = run_worker(sys.executable, ["capture", tool, model], raw / f"runtime-{tool}-{model}.json", opts.timeout, env)
            cell = f"{doc['ratio']:.2f}×" if "ratio" in doc else doc.get("error", "no result")
            peak = _peak_ratio(doc) if card else None
            if peak is not None:
                cell += f", peak {peak:.2f}×"
            print(f"{model:>10} {tool:>20}: {cell}", flush=True)
            row.append(cell)
            if card and model == GPU_TARGET and tool == "torchatlas-stats":
                notes.append(_target_line(doc))
        rows.append(row)
    text = (
        "# Run-time options of torchatlas.trace against a plain forward pass\n\n"
        + _report.generated_by("bench_runtime.py", opts.threads, torch.__version__, card)
        + " Each cell is the median ratio of "
        "alternating rounds (trace with the option / plain `no_grad` forward), in a fresh process.\n\n"
        f"Target: `stats=True` ≤ {STATS_LIMIT}× a forward"
        + (
            f" (on the GPU: ≤ {GPU_TIME_LIMIT}× its time and ≤ {GPU_PEAK_LIMIT}× its peak memory on {GPU_TARGET}; "
            "'peak' is the GPU memory a call allocates over what was held before it, against the forward's)"
            if card else ""
        )
        + ".\n\n"
        + _report.table(["model", "trace", "stats=True", 'save="*"', "profile=True"], rows)
        + "\n"
        + "".join(f"\n{note}\n" for note in notes)
    )
    _report.write_report(opts.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
