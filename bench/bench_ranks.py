"""What tracing every rank of a job costs: ``python bench/bench_ranks.py``.

Each case runs ``torchatlas.trace_ranks`` in a fresh process (torch and transformers
imported first, not timed) and reports the wall time of every rank's trace and the
hang check, the CPU time it took (wall time on a shared machine runs far above it), and the
process's peak RSS:

* ``llama-2l-tp4-fsdp2``: hf:llama with 2 layers (the default config otherwise, 536M
  parameters) on a 2-D ``(dp 2, tp 4)`` mesh: 8 ranks, tokens 1×16, on the CPU;
* ``llama-70b-meta-tp8``: a Llama 3 70B config (80 layers, hidden 8192) with 8-way tensor
  parallelism on ``meta``, tokens 1×4096: 8 ranks;
* ``llama-70b-meta-tp8-pp4``: the same 70B cut into 4 pipeline stages of 20 layers (the
  GPipe schedule of ``--pp``), each tensor-parallel over 8 ranks, on ``meta``: 32 ranks,
  tokens 4×1024 (4 microbatches of one row: as many tokens as above).

Writes ``bench/results/ranks.md``; timings are printed and written, never asserted.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import _report

BENCH = Path(__file__).resolve().parent
LLAMA_70B = {
    "hidden_size": 8192, "intermediate_size": 28672, "num_hidden_layers": 80, "num_attention_heads": 64,
    "num_key_value_heads": 8, "vocab_size": 128256,
}
CASES = {
    # name: (config overrides, device, tokens, tp, fsdp, pp)
    "llama-2l-tp4-fsdp2": ({"num_hidden_layers": 2}, None, (1, 16), 4, 2, None),
    "llama-70b-meta-tp8": (LLAMA_70B, "meta", (1, 4096), 8, None, None),
    "llama-70b-meta-tp8-pp4": (LLAMA_70B, "meta", (4, 1024), 8, None, 4),
}


def _worker(name: str) -> None:
    """One case in this process; prints its numbers as JSON."""
    import torch
    import transformers  # noqa: F401  (imported before the clock starts)

    import torchatlas
    from torchatlas._cli import _models, _parallel, _pipeline

    overrides, device, tokens, tp, fsdp, pp = CASES[name]
    dims = {**({"pp": pp} if pp else {}), **_parallel.mesh_dims(tp, fsdp)}
    world = 1
    for size in dims.values():
        world *= size
    ids = torch.randint(0, 100, tokens, device=device)

    def build(mesh):
        loaded = _models.load_model(
            "hf:llama", overrides=overrides, device=None if device is None else torch.device(device), has_inputs=True
        )
        model = loaded.model.eval()
        if pp:  # this rank's stage, tensor-parallel within it, and its GPipe schedule
            stage = _pipeline.stage_of(model, mesh, pp, loaded.spec)
            _parallel.shard(stage, tp, None, loaded.spec, mesh["tp"])
            return _pipeline.schedule(stage, mesh, ids)
        _parallel.shard(model, tp, fsdp, loaded.spec, mesh)
        return model

    first_stage = world // pp if pp else world
    args = (lambda rank: (ids,) if rank < first_stage else ()) if pp else ()
    kwargs = None if pp else {"input_ids": ids}

    before = resource.getrusage(resource.RUSAGE_SELF)
    cpu_before = before.ru_utime + before.ru_stime
    start = time.perf_counter()
    with torch.no_grad():
        ranks = torchatlas.trace_ranks(build, world, mesh=dims, args=args, kwargs=kwargs)
    traced = time.perf_counter() - start
    problems = ranks.problems
    checked = time.perf_counter() - start
    ops = sum(len(list(g.ir.ops())) for g in ranks.graphs)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu = usage.ru_utime + usage.ru_stime - cpu_before
    print(json.dumps({
        "ranks": world, "ops": ops, "trace_s": traced, "total_s": checked, "cpu_s": cpu, "problems": len(problems),
        "peak_bytes": usage.ru_maxrss * 1024,
    }))


def _run(name: str, timeout: float) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, __file__, "--worker", name], capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{name} failed: {done.stderr[-800:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=sorted(CASES), action="append", help="only these cases")
    parser.add_argument("--out", type=Path, default=BENCH / "results" / "ranks.md")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per case")
    parser.add_argument("--worker", choices=sorted(CASES), help=argparse.SUPPRESS)
    opts = parser.parse_args(argv)
    if opts.worker:
        _worker(opts.worker)
        return 0
    names = opts.case or list(CASES)
    rows = []
    for name in names:
        r = _run(name, opts.timeout)
        rows.append([
            f"`{name}`", str(r["ranks"]), f"{r['ops']:,}", f"{r['trace_s']:.1f} s", f"{r['total_s'] - r['trace_s']:.1f} s",
            f"{r['cpu_s']:.1f} s", f"{r['total_s'] / r['ranks']:.2f} s", f"{r['peak_bytes'] / 2**30:.2f} GiB",
            str(r["problems"]),
        ])
        print(rows[-1], flush=True)
    text = (
        "# Every rank of a job: trace_ranks\n\n"
        + _report.generated_by("bench_ranks.py")
        + " One fresh process per case; imports not timed.\n\n"
        + _report.table(
            ["case", "ranks", "ops (all ranks)", "wall: trace every rank", "wall: hang check", "CPU time", "wall per rank",
             "peak RSS", "problems"], rows
        )
        + "\n"
    )
    _report.write_report(opts.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
