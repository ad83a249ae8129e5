"""What ``torchatlas.compare`` of two Llama runs costs against two plain forwards: ``python bench/bench_compare_runs.py``.

Issue 41's target: a Llama of 1B parameters, float32 against bfloat16 autocast on 128 tokens
on a CPU, compared in at most 3x the time and 1.5x the peak memory of the two forwards alone.

Each measurement runs in a fresh process (``--measure forwards|compare``): it builds the model
from its config (random weights, seeded), then resets the kernel's peak-RSS mark
(``/proc/self/clear_refs``) and measures

* ``forwards``: ``model(ids)`` under ``torch.no_grad()``, then again under ``torch.autocast``
  (bfloat16);
* ``compare``: ``trace(model, ids, fingerprint=True)`` the same two ways, then
  ``torchatlas.compare(fp32, bf16, rtol=1e-2, atol=1e-4)`` (the analyses, the matching and
  the errors included);

the wall time, and the peak resident memory above what the process held once the model was
built (``VmHWM`` - ``VmRSS`` before), so the weights count in neither. ``--rounds`` alternates
the two that many times and keeps each one's fastest round. ``--size`` picks the model:
``1b`` (Llama 3.2 1B's shape: 16 layers, hidden 2048, 1.24B parameters), ``small`` (4 layers,
hidden 512) or ``tiny`` (2 layers, hidden 64). Writes ``bench/results/compare-runs-<size>.md``;
the numbers are printed and written, never asserted.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
TIME_LIMIT, PEAK_LIMIT = 3.0, 1.5
SIZES = {
    "1b": {"hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32,
           "num_key_value_heads": 8, "vocab_size": 128256, "tie_word_embeddings": True},
    "small": {"hidden_size": 512, "intermediate_size": 1536, "num_hidden_layers": 4, "num_attention_heads": 8,
              "num_key_value_heads": 4, "vocab_size": 32000},
    "tiny": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "vocab_size": 128},
}


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def measure(what: str, size: str, tokens: int) -> dict[str, float]:
    """One measurement in this process (see the module's docstring)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    import torchatlas

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(max_position_embeddings=max(256, tokens), **SIZES[size])).eval()
    ids = torch.randint(0, SIZES[size]["vocab_size"], (1, tokens))
    params = sum(p.numel() for p in model.parameters())
    Path("/proc/self/clear_refs").write_text("5")  # the peak RSS starts again from here
    before = _status_kb("VmRSS")
    start = time.perf_counter()
    with torch.no_grad():
        if what == "forwards":
            model(ids)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                model(ids)
            note = ""
        else:
            fp32 = torchatlas.trace(model, ids, fingerprint=True)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                bf16 = torchatlas.trace(model, ids, fingerprint=True)
            result = torchatlas.compare(fp32, bf16, rtol=1e-2, atol=1e-4, labels=["fp32", "bf16"])
            first = result.first_divergence
            note = result.label(first.id) if first is not None else "no divergence"
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "peak_mb": (_status_kb("VmHWM") - before) / 1024, "params": params, "note": note}


def run(what: str, size: str, tokens: int) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, __file__, "--measure", what, "--size", size, "--tokens", str(tokens)],
        capture_output=True, text=True, check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"bench_compare_runs: {what} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=list(SIZES), default="1b")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--measure", choices=["forwards", "compare"], help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=None)
    opts = parser.parse_args()
    if opts.measure:
        print(json.dumps(measure(opts.measure, opts.size, opts.tokens)))
        return
    best: dict[str, dict[str, float]] = {}
    for _ in range(opts.rounds):
        for what in ("forwards", "compare"):
            got = run(what, opts.size, opts.tokens)
            if what not in best or got["seconds"] < best[what]["seconds"]:
                best[what] = got
    forwards, compared = best["forwards"], best["compare"]
    time_ratio = compared["seconds"] / forwards["seconds"]
    peak_ratio = compared["peak_mb"] / forwards["peak_mb"] if forwards["peak_mb"] > 0 else float("nan")
    met = time_ratio <= TIME_LIMIT and peak_ratio <= PEAK_LIMIT
    lines = [
        f"# torchatlas.compare: Llama ({opts.size}, {compared['params'] / 1e9:.2f}B parameters), float32 against "
        f"bfloat16 autocast, {opts.tokens} tokens, CPU",
        "",
        "| | time | peak memory over the weights |",
        "|---|---:|---:|",
        f"| two plain forwards | {forwards['seconds']:.2f} s | {forwards['peak_mb']:.0f} MB |",
        f"| trace both with fingerprints + compare | {compared['seconds']:.2f} s | {compared['peak_mb']:.0f} MB |",
        f"| ratio (target ≤ {TIME_LIMIT}×, ≤ {PEAK_LIMIT}×) | {time_ratio:.2f}× | {peak_ratio:.2f}× |",
        "",
        f"First divergence: {compared['note']}. Targets {'met' if met else 'missed'}; fastest of {opts.rounds} round(s), "
        "each measurement in a fresh process.",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    out = opts.out or BENCH / "results" / f"compare-runs-{opts.size}.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
