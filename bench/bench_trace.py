"""What ``torchatlas.trace`` costs over a plain forward pass: ``python bench/bench_trace.py``.

For ResNet-50, BERT-base, GPT-2 and a 1.1B Llama (random weights, float32),
each in a fresh process: one warm-up, then alternating rounds of a plain
``torch.no_grad()`` forward and ``torchatlas.trace`` in that process; the
figure is the median per-round ratio. Llama-70B is built on the meta device
(no memory for weights) and traced against a meta forward, with the peak
resident memory of the trace. Writes ``bench/results/trace.md``.

Targets (issue 19): trace within 1.1x of the forward pass on real models (T5-small
1.15x), 1.5x where the fixed per-trace cost shows (CoolCNN, a 2-layer GPT-2), and
Llama-70B on meta within 1.2x of the meta forward at no more than 360 MB peak. The
timings are printed and written, never asserted: they depend on the machine.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import _report
import torch
from compare import BENCH, run_worker, worker_env

TARGETS = {
    "coolcnn": 1.5, "tiny-gpt2": 1.5, "resnet50": 1.1, "vit-base": 1.1, "bert-base": 1.1,
    "gpt2": 1.1, "t5-small": 1.15, "llama-1b": 1.1, "llama-70b": 1.2,
}
MODELS = list(TARGETS)
META_PEAK_MB = 360


def verdict(model: str, doc: dict) -> str:
    if "ratio" not in doc:
        return doc.get("error", "no result")
    target = TARGETS.get(model)
    if target is None:
        return "no target"
    if model == "llama-70b":
        ok = doc["ratio"] <= target and doc["capture_peak_rss_mb"] <= META_PEAK_MB
        return "meets target" if ok else f"misses target (≤ {target}x and ≤ {META_PEAK_MB} MB)"
    return f"meets ≤ {target}x" if doc["ratio"] <= target else f"misses ≤ {target}x"


def markdown(docs: dict[str, dict], threads: object) -> str:
    rows = []
    for model, doc in docs.items():
        if "ratio" not in doc:
            rows.append([model, "—", "—", "—", "—", "—", verdict(model, doc)])
            continue
        rows.append(
            [
                model + (" (meta)" if doc.get("device") == "meta" else ""),
                f"{doc['params'] / 1e6:,.1f}M",
                f"{doc['nodes']:,}",
                f"{doc['forward_median_s'] * 1000:,.1f} ms",
                f"{doc['capture_s'] * 1000:,.1f} ms",
                f"**{doc['ratio']:.2f}×** ({doc['rounds']} rounds)",
                f"{doc['capture_peak_rss_mb']:,.0f} MB ({doc['capture_peak_rss_mb'] - doc['forward_peak_rss_mb']:+,.0f})",
            ]
            + [verdict(model, doc)]
        )
    header = [
        "model",
        "params",
        "graph nodes",
        "forward",
        "trace",
        "trace / forward",
        "peak RSS (vs forward)",
        "target",
    ]
    for row in rows:
        row += [""] * (len(header) - len(row))
    return (
        "# torchatlas.trace against a plain forward pass\n\n"
        + _report.generated_by("bench_trace.py", threads, torch.__version__)
        + " Float32, batch 1, images 224×224, 128 tokens.\n"
        "Each model runs in a fresh process: a warm-up, then alternating rounds of `torch.no_grad()` forward and "
        "`torchatlas.trace`; times are medians, the ratio is the median of per-round ratios. Llama-70B is built "
        "and run on the meta device; its peak RSS includes the interpreter and torch (~250 MB).\n\n"
        "Targets (issue 19): ≤ 1.1× forward on real models, T5-small ≤ 1.15×, CoolCNN and a 2-layer GPT-2 "
        f"≤ 1.5×, Llama-70B on meta ≤ 1.2× at ≤ {META_PEAK_MB} MB peak.\n\n" + _report.table(header, rows) + "\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated names from bench/models.py")
    parser.add_argument("--out", type=Path, default=BENCH / "results" / "trace.md")
    parser.add_argument("--budget", type=float, default=60, help="seconds of alternating rounds per model")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch intra-op threads (0: torch's default; see _worker.THREADS)"
    )
    parser.add_argument("--timeout", type=float, default=1200, help="seconds per model process")
    opts = parser.parse_args(argv)

    env = worker_env(opts.threads, opts.budget)
    raw = opts.out.parent / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    docs = {}
    for model in opts.models.split(","):
        docs[model] = run_worker(
            sys.executable, ["capture", "torchatlas", model], raw / f"trace-{model}.json", opts.timeout, env
        )
        doc = docs[model]
        if "ratio" in doc:
            print(
                f"{model:>10}: forward {doc['forward_median_s'] * 1000:9.1f} ms  trace {doc['capture_s'] * 1000:9.1f} ms  "
                f"ratio {doc['ratio']:.2f}x  peak {doc['capture_peak_rss_mb']:.0f} MB  [{verdict(model, doc)}]",
                flush=True,
            )
        else:
            print(f"{model:>10}: {doc.get('error', 'no result')}", flush=True)
    threads = opts.threads or next((d["threads"] for d in docs.values() if "threads" in d), "torch's default")
    _report.write_report(opts.out, markdown(docs, threads))
    return 0


if __name__ == "__main__":
    sys.exit(main())
