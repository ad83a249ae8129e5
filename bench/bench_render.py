"""How long Graphviz takes to lay out real models' diagrams, and how big they are.

    python bench/bench_render.py [--timeout 120] [--format svg]

Builds GPT-2 (12 layers) and a 32-layer Llama with a small hidden size on the
meta device (no weights), traces one forward pass and times ``dot`` at depth
2, at full depth and at full depth with folded repeats. The "elements"
column (nodes + edges) is what ``torchatlas._render._dot.MAX_DOT_ELEMENTS``
is calibrated against.
"""

from __future__ import annotations

import argparse
import subprocess
import time

import torch
import transformers

import torchatlas
from torchatlas._render._dot import DotOptions, diagram_size, to_dot


def _models():
    gpt2 = transformers.AutoConfig.for_model("gpt2")
    llama = transformers.AutoConfig.for_model(
        "llama",
        num_hidden_layers=32,
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=4,
        vocab_size=1000,
    )
    for name, cfg in (("gpt2-12L", gpt2), ("llama-32L", llama)):
        with torch.device("meta"):
            model = transformers.AutoModel.from_config(cfg).eval()
            ids = torch.zeros(1, 16, dtype=torch.long)
        yield name, model, ids


def _time_dot(source: str, fmt: str, timeout: float) -> str:
    start = time.perf_counter()
    try:
        subprocess.run(["dot", f"-T{fmt}", "-o", "/dev/null"], input=source.encode(), check=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f">{timeout:.0f}"
    return f"{time.perf_counter() - start:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds before a dot run is abandoned")
    parser.add_argument("--format", default="svg", choices=("svg", "png", "pdf"))
    args = parser.parse_args()
    cases = (
        ("depth=2", DotOptions(depth=2)),
        ("full", DotOptions()),
        ("full, fold_repeats", DotOptions(fold_repeats=True)),
    )
    print(f"{'model':<11} {'options':<20} {'nodes+edges':>11} {'to_dot s':>9} {'dot s':>8}")
    for name, model, ids in _models():
        with torch.no_grad():
            graph = torchatlas.trace(model, (ids,))
        for label, options in cases:
            start = time.perf_counter()
            source = to_dot(graph.ir, options)
            to_dot_s = time.perf_counter() - start
            size = diagram_size(graph.ir, options)
            dot_s = _time_dot(source, args.format, args.timeout)
            print(f"{name:<11} {label:<20} {size:>11} {to_dot_s:>9.3f} {dot_s:>8}", flush=True)


if __name__ == "__main__":
    main()
