"""What the run-time options of ``trace`` cost over a plain forward pass: ``python bench/bench_runtime.py``.

For each model of ``bench/compare.py`` (or ``--models``), in a fresh process per option:
alternating rounds of a plain ``torch.no_grad()`` forward and ``torchatlas.trace`` with
``stats=True``, ``save="*"`` (every module call's output kept) or ``profile=True``, and
plain ``trace`` for reference. The figure is the median per-round ratio. Writes
``bench/results/runtime.md``. Target (issue 17): ``stats=True`` at most 2x a forward.
The timings are printed and written, never asserted.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import _report
import torch
from compare import BENCH, run_worker, worker_env

MODELS = ["coolcnn", "resnet50", "vit-base", "bert-base", "gpt2", "t5-small"]
OPTIONS = ["torchatlas", "torchatlas-stats", "torchatlas-save", "torchatlas-profile"]
STATS_LIMIT = 2.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated names from bench/models.py")
    parser.add_argument("--out", type=Path, default=BENCH / "results" / "runtime.md")
    parser.add_argument("--budget", type=float, default=20, help="seconds of alternating rounds per cell")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (0: torch's default)")
    parser.add_argument("--timeout", type=float, default=1200, help="seconds per process")
    opts = parser.parse_args(argv)

    env = worker_env(opts.threads, opts.budget)
    raw = opts.out.parent / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    rows = []
    for model in opts.models.split(","):
        row = [model]
        for tool in OPTIONS:
            doc = run_worker(sys.executable, ["capture", tool, model], raw / f"runtime-{tool}-{model}.json", opts.timeout, env)
            cell = f"{doc['ratio']:.2f}×" if "ratio" in doc else doc.get("error", "no result")
            print(f"{model:>10} {tool:>20}: {cell}", flush=True)
            row.append(cell)
        rows.append(row)
    text = (
        "# Run-time options of torchatlas.trace against a plain forward pass\n\n"
        + _report.generated_by("bench_runtime.py", opts.threads, torch.__version__)
        + " Each cell is the median ratio of "
        "alternating rounds (trace with the option / plain `no_grad` forward), in a fresh process.\n\n"
        f"Target: `stats=True` ≤ {STATS_LIMIT}× a forward.\n\n"
        + _report.table(["model", "trace", "stats=True", 'save="*"', "profile=True"], rows)
        + "\n"
    )
    _report.write_report(opts.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
