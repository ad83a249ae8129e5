"""How fast the command line starts and builds a model: ``python bench/bench_cli.py``.

Each line is the median wall time of ``--repeat`` fresh processes:

* ``torchatlas --help`` (target, issue 15: under 0.5 s; torch is not imported);
* building ``hf:llama`` with 2 layers (536M parameters) the way the CLI does (parameters
  on meta, then a cheap random fill), against ``AutoModel.from_config`` with its weight
  init (what the CLI did before), each with its peak RSS;
* the whole ``torchatlas hf:llama --set num_hidden_layers=2 --tokens 1,16 -f json``.

Writes ``bench/results/cli.md``. The timings are printed and written, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import _report

BENCH = Path(__file__).resolve().parent
LLAMA = {"num_hidden_layers": 2}
HELP_TARGET_S = 0.5


def _command() -> list[str]:
    script = Path(sys.executable).parent / "torchatlas"
    return [str(script)] if script.exists() else [sys.executable, "-m", "torchatlas"]


def _worker(kind: str) -> None:
    """One build in this process (torch and transformers imported first, not timed); prints its
    wall time and peak RSS as JSON."""
    import transformers

    from torchatlas._cli import _models

    start = time.perf_counter()
    if kind == "build-cli":
        _models.load_model("hf:llama", overrides=LLAMA, has_inputs=True)
    else:
        transformers.AutoModel.from_config(transformers.AutoConfig.for_model("llama", **LLAMA))
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"seconds": seconds, "peak_bytes": peak}))


def _time_process(argv: list[str], timeout: float) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {done.stderr[-500:]}")
    return elapsed


def _build(kind: str, timeout: float) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, __file__, "--worker", kind], capture_output=True, text=True, timeout=timeout, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="fresh processes per line (the median is shown)")
    parser.add_argument("--out", type=Path, default=BENCH / "results" / "cli.md")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per process")
    parser.add_argument("--worker", choices=["build-cli", "build-init"], help=argparse.SUPPRESS)
    opts = parser.parse_args(argv)
    if opts.worker:
        _worker(opts.worker)
        return 0

    rows = []
    help_s = statistics.median(_time_process([*_command(), "--help"], opts.timeout) for _ in range(opts.repeat))
    rows.append(["`torchatlas --help`", f"{help_s:.2f} s", "", f"target < {HELP_TARGET_S} s"])
    print(rows[-1], flush=True)
    for kind, label in (("build-cli", "hf:llama 2 layers, no init (now)"), ("build-init", "hf:llama 2 layers, from_config (before)")):
        runs = [_build(kind, opts.timeout) for _ in range(opts.repeat)]
        seconds = statistics.median(r["seconds"] for r in runs)
        peak = statistics.median(r["peak_bytes"] for r in runs)
        rows.append([label, f"{seconds:.2f} s", f"{peak / 2**30:.2f} GiB", "build only (imports not timed)"])
        print(rows[-1], flush=True)
    command = [*_command(), "hf:llama", "--set", "num_hidden_layers=2", "--tokens", "1,16", "-f", "json", "-o", os.devnull]
    whole = statistics.median(_time_process(command, opts.timeout) for _ in range(opts.repeat))
    rows.append(["`torchatlas hf:llama --set num_hidden_layers=2 --tokens 1,16 -f json`", f"{whole:.2f} s", "", "end to end"])
    print(rows[-1], flush=True)

    text = (
        "# The command line: start-up and model builds\n\n"
        + _report.generated_by("bench_cli.py")
        + f" Median of {opts.repeat} fresh processes per line.\n\n"
        + _report.table(["what", "wall time", "peak RSS", "note"], rows)
        + "\n"
    )
    _report.write_report(opts.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
