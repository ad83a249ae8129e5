"""Draw the pictures the README and the docs show, from the code as it is now.

    python docs/pictures.py            # diagrams and page screenshots
    python docs/pictures.py diagrams   # only the Graphviz diagrams (no browser needed)

Diagrams are drawn by ``Graph.render`` (Graphviz ``dot``). Page screenshots are the ones the
browser tests take into ``test-artifacts/`` (Chromium and the built viewer bundle needed), copied
here, so a picture shows exactly what a test checked.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import torch

import torchatlas
from torchatlas import _example

ROOT = Path(__file__).resolve().parent.parent
IMG = ROOT / "docs" / "img"
ARTIFACTS = ROOT / "test-artifacts"

SCREENSHOTS = {
    "viewer.png": ("viewer-llama-search.png", "tests/test_browser.py::test_transformer_folds_repeats_and_expands_layers"),
    "viewer-backward.png": (
        "viewer-backward.png",
        "tests/test_browser_view.py::test_the_backward_part_is_drawn_apart_and_dashed",
    ),
    "viewer-tensor-parallel.png": (
        "viewer-tensor-parallel.png",
        "tests/test_distributed_truth.py::test_the_page_shows_the_all_reduces_closed_and_open",
    ),
}
"""docs/img name -> (the screenshot a browser test writes into test-artifacts/, that test)."""


def diagrams() -> None:
    """The README's CoolCNN diagram and bf16 comparison, docs/levels.md's backward MLP."""
    torch.manual_seed(0)
    cool = torchatlas.trace(_example.CoolCNN(), _example.example_input())
    cool.render(IMG / "coolcnn.svg")
    cool.render(IMG / "coolcnn.png")
    mlp = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    torchatlas.trace(mlp, torch.randn(3, 4), backward=True).render(IMG / "backward.png")
    bf16_comparison().graph.render(IMG / "compare-bf16.png", depth=3, fold_repeats=False)


def bf16_comparison() -> torchatlas.Comparison:
    """A 2-layer Llama (random weights) in float32 against itself under bfloat16 autocast."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    ids = torch.randint(0, 128, (1, 16))
    with torch.no_grad():
        fp32 = torchatlas.trace(model, ids, fingerprint=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            bf16 = torchatlas.trace(model, ids, fingerprint=True)
    return torchatlas.compare(fp32, bf16, rtol=1e-2, atol=1e-4, labels=["fp32", "bf16"])


def screenshots() -> None:
    tests = [test for _, test in SCREENSHOTS.values()]
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", *tests], cwd=ROOT, check=True)
    for name, (taken, _) in SCREENSHOTS.items():
        shutil.copyfile(ARTIFACTS / taken, IMG / name)


if __name__ == "__main__":
    which = sys.argv[1:] or ["diagrams", "screenshots"]
    for step in which:
        {"diagrams": diagrams, "screenshots": screenshots}[step]()
        print(f"docs/pictures.py: {step} written to {IMG.relative_to(ROOT)}")
