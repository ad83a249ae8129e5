"""Where a trace's time goes, per model: ``python bench/trace_breakdown.py``.

Each model runs in a fresh process, one intra-op thread, with alternating rounds of
a plain ``torch.no_grad()`` forward, the same forward under a do-nothing
``TorchFunctionMode`` (the floor any op-level recorder pays), a plain
``torchatlas.trace``, and a trace with timers around its parts:

* **set-up**: the session (the model walk, the recorders);
* **module calls**: opening and closing each call's scope, per call;
* **op records**: what the recorder does after each op returns, per op seen
  (ops that make nothing, like ``x.size()``, are seen but not recorded);
* **slower forward**: the rest of the recorded forward's extra time: the mode's
  dispatch (the *mode floor* column measures it alone) and the model's own code and
  kernels running slower beside the recorder (a colder cache);
* **build**: turning the records into the graph, per node;
* **finish**: the model's outputs and the parameter tables;
* **scaffolding**: everything else: installing and removing the patches and modes,
  pausing collection, the API around the capture.

The parts add up to the timed trace (timers included). Medians of the rounds; times
in ms and as a share of the plain forward. Writes ``bench/results/breakdown.md``. Timings are printed and written, never asserted.
The timers reach into ``torchatlas._capture``: this is a profiling tool, and its
smoke test fails when those internals move.
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _report
import models
import torch
from _measure import rounds_for, timed
from compare import BENCH, checkout_env, run_worker

import torchatlas

MODELS = ["coolcnn", "tiny-gpt2", "resnet50", "vit-base", "bert-base", "gpt2", "t5-small", "llama-70b"]
TIMED = [
    ("set-up", "_session", "Session", "__init__"),
    ("module calls", "_scopes", "ScopeTracker", "call_started"),
    ("module calls", "_scopes", "ScopeTracker", "call_ended"),
    ("op records", "_python", "PythonLevel", "record_call"),
    ("finish", "_session", "Session", "_finish"),
    ("build", "_session", None, "build_graph"),
    ("recorded forward", "_session", "Session", "_forward_recorded"),
]
"""(part, module in torchatlas._capture, class or None, function): the calls timed, summed by part."""


class _Timers:
    """Wraps the parts' functions with timers; ``restore`` puts them back."""

    def __init__(self) -> None:
        self.seconds: Counter[str] = Counter()
        self.calls: Counter[str] = Counter()
        self._undo: list[Callable[[], None]] = []
        for part, module_name, cls_name, attr in TIMED:
            module = importlib.import_module(f"torchatlas._capture.{module_name}")
            self._wrap(part, getattr(module, cls_name) if cls_name else module, attr)

    def _wrap(self, part: str, owner: Any, attr: str) -> None:
        original = getattr(owner, attr)
        seconds, calls, clock = self.seconds, self.calls, time.perf_counter

        def timed_call(*args: Any, **kwargs: Any) -> Any:
            start = clock()
            try:
                return original(*args, **kwargs)
            finally:
                seconds[part] += clock() - start
                calls[part] += 1

        setattr(owner, attr, timed_call)
        self._undo.append(lambda: setattr(owner, attr, original))

    def restore(self) -> None:
        for undo in self._undo:
            undo()


class _NullMode(torch.overrides.TorchFunctionMode):
    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        return func(*args, **(kwargs or {}))


def measure(model_name: str, budget_s: float) -> dict[str, Any]:
    torch.set_num_threads(1)
    device = "meta" if models.MODELS[model_name].meta_only else "cpu"
    model, args, kwargs = models.build(model_name, device)

    def forward() -> None:
        with torch.no_grad():
            model(*args, **kwargs)

    def null_mode() -> None:
        with torch.no_grad(), _NullMode():
            model(*args, **kwargs)

    def trace() -> Any:
        with torch.no_grad():
            return torchatlas.trace(model, args, kwargs)

    nodes = len(trace().ir.nodes)
    forward()
    per_round, _ = timed(lambda: (forward(), null_mode(), trace(), trace()))
    rounds = rounds_for(per_round, budget_s)
    times: dict[str, list[float]] = {"forward": [], "null mode": [], "trace": [], "timed trace": []}
    parts: dict[str, list[float]] = {}
    counts: Counter[str] = Counter()
    for i in range(rounds):
        order = [("forward", forward), ("null mode", null_mode), ("trace", trace)]
        for name, fn in order if i % 2 == 0 else reversed(order):
            times[name].append(timed(fn)[0])
        timers = _Timers()
        try:
            times["timed trace"].append(timed(trace)[0])
        finally:
            timers.restore()
        for part, seconds in timers.seconds.items():
            parts.setdefault(part, []).append(seconds)
        counts = timers.calls
    doc: dict[str, Any] = {"model": model_name, "device": device, "nodes": nodes, "rounds": rounds}
    doc.update({f"{k}_s": statistics.median(v) for k, v in times.items()})
    doc["parts_s"] = {k: statistics.median(v) for k, v in parts.items()}
    doc["counts"] = {"module calls": counts["module calls"] // 2, "op records": counts["op records"]}
    return doc


def _share(forward: float, seconds: float, per: int | None = None, unit: str = "") -> str:
    """``1.20 ms (10.0%), 3.1 µs an op``: the time, its share of the forward, and per item."""
    text = f"{seconds * 1e3:,.2f} ms ({seconds / forward:.1%})"
    return text + (f", {seconds / per * 1e6:.1f} µs {unit}" if per else "")


def markdown(docs: dict[str, dict[str, Any]]) -> str:
    header = [
        "model", "forward", "trace", "mode floor", "set-up", "module calls", "op records", "slower forward",
        "build", "finish", "scaffolding",
    ]
    rows = []
    for model, d in docs.items():
        if "error" in d:
            rows.append([model, d["error"]] + [""] * (len(header) - 2))
            continue
        fwd, parts, counts = d["forward_s"], d["parts_s"], d["counts"]
        calls, ops = parts.get("module calls", 0.0), parts.get("op records", 0.0)
        recorded = parts.get("recorded forward", 0.0)
        timed_parts = ("set-up", "recorded forward", "build", "finish")
        scaffolding = d["timed trace_s"] - sum(parts.get(p, 0.0) for p in timed_parts)
        rows.append([
            model + (" (meta)" if d["device"] == "meta" else ""),
            f"{fwd * 1e3:,.1f} ms",
            f"{d['trace_s'] * 1e3:,.1f} ms ({d['trace_s'] / fwd:.2f}×)",
            _share(fwd, d["null mode_s"] - fwd),
            _share(fwd, parts.get("set-up", 0.0)),
            _share(fwd, calls, counts["module calls"], "a call"),
            _share(fwd, ops, counts["op records"], "an op"),
            _share(fwd, recorded - fwd - calls - ops),
            _share(fwd, parts.get("build", 0.0), d["nodes"], "a node"),
            _share(fwd, parts.get("finish", 0.0)),
            _share(fwd, scaffolding),
        ])
    return (
        "# Where a trace's time goes\n\n"
        + _report.generated_by("trace_breakdown.py", 1, torch.__version__)
        + "\nMedians of alternating rounds in one fresh process per model; `python bench/trace_breakdown.py --help` "
        "and its docstring say what each part holds. *trace* is the plain trace; the parts, from *set-up* on, "
        "add up to a trace with timers around them, less its forward. Shares are of the plain forward.\n\n"
        + _report.table(header, rows) + "\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated names from bench/models.py")
    parser.add_argument("--out", type=Path, default=BENCH / "results" / "breakdown.md")
    parser.add_argument("--budget", type=float, default=30, help="seconds of rounds per model")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per model process")
    parser.add_argument("--worker", nargs=2, metavar=("MODEL", "OUT"), help=argparse.SUPPRESS)
    opts = parser.parse_args(argv)
    if opts.worker:
        model, out = opts.worker
        Path(out).write_text(json.dumps(measure(model, opts.budget)))
        return 0
    docs = {}
    raw = opts.out.parent / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for model in opts.models.split(","):
        args = ["--budget", str(opts.budget), "--worker", model]
        doc = run_worker(sys.executable, args, raw / f"breakdown-{model}.json", opts.timeout, checkout_env(), Path(__file__).resolve())
        docs[model] = doc
        print(model, doc.get("error", "done"), flush=True)
    _report.write_report(opts.out, markdown(docs))
    print(opts.out.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
