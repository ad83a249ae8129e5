"""The outputs show one graph alike: every writer draws from the presentation layer (``_view``)."""

from __future__ import annotations

import re

import pytest
import torch

import torchatlas
from torchatlas._render import DotOptions, SummaryOptions, TreeOptions
from torchatlas._view import ViewOptions

transformers = pytest.importorskip("transformers")


def gpt2(layers: int = 3) -> torchatlas.Graph:
    cfg = transformers.AutoConfig.for_model("gpt2", n_layer=layers, n_embd=32, n_head=2, vocab_size=100)
    torch.manual_seed(0)
    model = transformers.GPT2Model(cfg).eval()
    return torchatlas.trace(model, kwargs={"input_ids": torch.randint(0, 100, (1, 8))})


def test_every_writer_takes_the_view_options_with_one_default_each() -> None:
    for options in (TreeOptions, SummaryOptions, DotOptions):
        assert issubclass(options, ViewOptions)
        assert (options().depth, options().fold_repeats) == (ViewOptions().depth, ViewOptions().fold_repeats)
        with pytest.raises(ValueError, match="depth must be None or an integer"):
            options(depth=-1)


def test_tree_summary_and_diagram_fold_repeats_alike_by_default() -> None:
    graph = gpt2()
    fold = "h.0–2 (GPT2Block) ×3"
    assert fold in graph.tree()
    assert fold in graph.summary(wide=True)
    for dot in (graph.to_dot(depth=2), graph.to_dot()):
        titles = [re.sub(r"<[^>]+>", "", line) for line in dot.splitlines() if "×3" in line and "graph [label=" in line]
        assert titles and all(t.split("label=", 1)[1].startswith("h.0–2 (GPT2Block) ×3") for t in titles)
        assert "h.1" not in dot and "h.2" not in dot  # the other members are not drawn
    # unfolded, every writer lists every member
    assert "h.2 (GPT2Block)" in graph.tree(fold_repeats=False)
    assert "h.2 (GPT2Block)" in graph.summary(wide=True, fold_repeats=False)
    assert "h.2" in graph.to_dot(depth=2, fold_repeats=False)
