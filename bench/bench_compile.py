"""What ``compile_report`` costs against what it replaces: ``python bench/bench_compile.py``.

For each model (default: GPT-2 small, random weights), alternating rounds of

* **baseline**: ``torch._dynamo.reset()``, then a plain ``torch.compile(model, backend="eager")``
  warm-up call (dynamo traces and compiles every frame), then one ``torchatlas.trace``;
* **compile_report**: ``torchatlas.compile_report(model, args, kwargs)`` (it resets dynamo itself).

One untimed round of each first (imports, dynamo's one-time set-up), then ``--rounds``
timed pairs; the figure is the median per-round ratio. Writes ``bench/results/compile.md``.
Target (issue 18): ``compile_report`` within the baseline's time (ratio ≤ 1). The timings
are printed and written, never asserted.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from pathlib import Path

import _report
import torch
from models import build

import torchatlas

BENCH = Path(__file__).resolve().parent
TARGET = 1.0


def _baseline(model: torch.nn.Module, args: tuple, kwargs: dict) -> float:
    import torch._dynamo as dynamo

    start = time.perf_counter()
    dynamo.reset()
    torch.compile(model, backend="eager")(*args, **kwargs)
    torchatlas.trace(model, args, kwargs)
    elapsed = time.perf_counter() - start
    dynamo.reset()
    return elapsed


def _report_time(model: torch.nn.Module, args: tuple, kwargs: dict) -> tuple[float, torchatlas.Graph]:
    start = time.perf_counter()
    graph = torchatlas.compile_report(model, args, kwargs)
    return time.perf_counter() - start, graph


def measure(name: str, rounds: int) -> list[str]:
    model, args, kwargs = build(name)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _baseline(model, args, kwargs)
        _report_time(model, args, kwargs)
        base, rep, ratios = [], [], []
        for _ in range(rounds):
            b = _baseline(model, args, kwargs)
            r, graph = _report_time(model, args, kwargs)
            base.append(b)
            rep.append(r)
            ratios.append(r / b)
    ops = sum(1 for _ in graph.ir.ops())
    graphs, breaks = graph.ir.meta["compile_graphs"], len(graph.graph_breaks)
    ratio = statistics.median(ratios)
    print(f"{name}: baseline {statistics.median(base):.2f} s, compile_report {statistics.median(rep):.2f} s, "
          f"ratio {ratio:.2f}× ({ops} ops, {graphs} graphs, {breaks} breaks)", flush=True)
    return [name, str(ops), str(graphs), str(breaks), f"{statistics.median(base):.2f} s",
            f"{statistics.median(rep):.2f} s", f"{ratio:.2f}×"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="gpt2", help="comma-separated names from bench/models.py")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds per model")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (0: torch's default)")
    parser.add_argument("--out", type=Path, default=BENCH / "results" / "compile.md")
    opts = parser.parse_args(argv)
    if opts.threads:
        torch.set_num_threads(opts.threads)
    rows = [measure(name, opts.rounds) for name in opts.models.split(",")]
    text = (
        "# compile_report against a torch.compile warm-up plus one trace\n\n"
        + _report.generated_by("bench_compile.py", opts.threads, torch.__version__)
        + f" {opts.rounds} rounds. Baseline: "
        '`torch._dynamo.reset()`, a `torch.compile(model, backend="eager")` warm-up call and one '
        "`torchatlas.trace`. Ratio: the median of per-round ratios.\n\n"
        f"Target: `compile_report` ≤ {TARGET}× the baseline.\n\n"
        + _report.table(["model", "ops", "graphs", "breaks", "baseline", "compile_report", "ratio"], rows)
        + "\n"
    )
    _report.write_report(opts.out, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
