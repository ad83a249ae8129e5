"""What the run-time options of ``trace`` cost over a plain forward pass: ``python bench/bench_runtime.py``.

For each model of ``bench/compare.py`` (or ``--models``), in a fresh process per option:
alternating rounds of a plain ``torch.no_grad()`` forward and ``torchatlas.trace`` with
``stats=True``, ``save="*"`` (every module call's output kept) or ``profile=True``, and
plain ``trace`` for reference. The figure is the median per-round ratio. Writes
``bench/results/runtime.md``. Target (issue 17): ``stats=True`` at most 2x a forward.
The timings are printed and written, never asserted. ``--device cuda`` runs the models on the
GPU (each time ends in ``torch.cuda.synchronize()``), adds the GPU peak memory of each option
against the forward's (``torch.cuda.max_memory_allocated``), and writes ``runtime-cuda.md``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import _report
import torch
from compare import BENCH, add_device_option, check_device, run_worker, worker_env

MODELS = ["coolcnn", "resnet50", "vit-base", "bert-base", "gpt2", "t5-small"]
OPTIONS = ["torchatlas", "torchatlas-stats", "torchatlas-save", "torchatlas-profile"]
STATS_LIMIT = 2.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated names from bench/models.py")
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
    rows = []
    for model in opts.models.split(","):
        row = [model]
        for tool in OPTIONS:
            doc = run_worker(sys.executable, ["capture", tool, model], raw / f"runtime-{tool}-{model}.json", opts.timeout, env)
            cell = f"{doc['ratio']:.2f}×" if "ratio" in doc else doc.get("error", "no result")
            if card and "capture_peak_gpu_mb" in doc and doc.get("forward_peak_gpu_mb"):
                cell += f", peak {doc['capture_peak_gpu_mb'] / doc['forward_peak_gpu_mb']:.2f}×"
            print(f"{model:>10} {tool:>20}: {cell}", flush=True)
            row.append(cell)
        rows.append(row)
    text = (
        "# Run-time options of torchatlas.trace against a plain forward pass\n\n"
        + _report.generated_by("bench_runtime.py", opts.threads, torch.__version__, card)
        + " Each cell is the median ratio of "
        "alternating rounds (trace with the option / plain `no_grad` forward), in a fresh process.\n\n"
        f"Target: `stats=True` ≤ {STATS_LIMIT}× a forward"
        + (" (on the GPU: ≤ 1.5× its time and ≤ 1.25× its peak memory on Llama 8B; 'peak' is GPU memory)" if card else "")
        + ".\n\n"
        + _report.table(["model", "trace", "stats=True", 'save="*"', "profile=True"], rows)
        + "\n"
    )
    _report.write_report(opts.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
