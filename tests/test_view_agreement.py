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


def test_a_number_that_would_read_1000_goes_up_a_unit() -> None:
    from torchatlas._text import format_bytes, format_compact, format_duration, format_si

    assert format_bytes(1000 * 2**20) == "0.98 GiB" and format_bytes((2**30) - 1) == "1.00 GiB"
    assert format_bytes(1536) == "1.50 KiB" and format_bytes(1000) == "0.98 KiB" and format_bytes(999) == "999 B"
    assert format_si(999_996) == "1.00M" and format_si(999.6) == "1.00K" and format_si(7.1e9) == "7.10G"
    assert format_compact(999_950) == "1.0M" and format_compact(7_100_000_000) == "7.1B"
    assert format_duration(999.7) == "1.00 ms" and format_duration(999_999) == "1.00 s"


def test_a_box_lists_every_tensor_it_makes() -> None:
    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm = torch.nn.LSTM(32, 48, num_layers=2, bidirectional=True, batch_first=True)
            self.head = torch.nn.Linear(96, 4)

        def forward(self, x):
            out, (h, c) = self.lstm(x)
            return self.head(out) + h.sum() + c.sum()

    graph = torchatlas.trace(Net(), torch.randn(2, 10, 32))
    [box] = [line for line in graph.to_dot().splitlines() if "(LSTM)" in line and "label=" in line]
    assert "2×10×32 → 2×10×96, 4×2×48, 4×2×48 ·" in box  # out, h and c
    assert "(LSTM)  2×10×32 → (2×10×96, 4×2×48, 4×2×48)" in graph.tree()  # spelled as in the tree
