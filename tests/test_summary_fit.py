"""The summary fits the terminal: columns chosen by priority, names cut, nothing wrapped;
runs of identical layers fold to one row."""

from __future__ import annotations

import re
import warnings

import _tree_models as models
import pytest
import torch

import torchatlas
from torchatlas._render._summary import SummaryOptions
from torchatlas._render._summary import summary as render_summary
from torchatlas._text import format_compact

WIDTHS = (80, 120, 200)


@pytest.fixture(scope="module")
def graphs() -> dict[str, torchatlas.Graph]:
    out = {}
    for name in ("llama", "t5", "unet"):
        torch.manual_seed(0)
        model, args, kwargs = getattr(models, name)()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out[name] = torchatlas.trace(model, args, kwargs)
    return out


def _header(text: str, fmt: str) -> list[str]:
    first = next(line for line in text.splitlines() if line.strip())
    return [cell.strip() for cell in re.split(r"\s{2,}", first.strip()) if cell.strip()]


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("fmt", ["text", "rich"])
@pytest.mark.parametrize("name", ["llama", "t5", "unet"])
def test_every_line_fits_and_no_row_wraps(graphs, name: str, fmt: str, width: int) -> None:
    graph = graphs[name]
    text = render_summary(graph.ir, SummaryOptions(format=fmt, width=width))
    lines = [line for line in text.splitlines() if line.strip()]
    assert max(len(line) for line in lines) <= width
    text, _, hidden = text.partition("\nHidden at width")  # below the table: the columns it left out
    lines = [line for line in text.splitlines() if line.strip()]
    names = " ".join(hidden.split()).partition(": ")[2].partition(" (a wider")[0].split(", ") if hidden else []
    assert not set(names) & set(_header(text, fmt)) and len(names) == len(set(names))
    rows = len(torchatlas._render._summary.summary_rows(graph.ir)[0])
    # header, one line per row, the totals (rules and section lines aside): a wrapped cell adds lines
    content = [line for line in lines if not set(line.strip()) <= set("-━─ ") and not line.startswith("Params: ")]
    assert len(content) == rows + 2
    header = _header(text, fmt)
    assert header[:1] == ["Module"]
    if width >= 80:
        for column in ("Output shapes", "Params", "FLOPs"):
            assert column in header, (column, header)


@pytest.mark.parametrize("name", ["llama", "t5", "unet"])
def test_numbers_are_never_cut(graphs, name: str) -> None:
    """Only the module column is cut; a narrow table writes counts compactly, never clipped."""
    ir = graphs[name].ir
    for width in WIDTHS:
        lines = render_summary(ir, SummaryOptions(format="text", width=width)).splitlines()
        module_width = len(lines[1].split("  ")[0])  # the rule under the header
        assert all("…" not in line[module_width:] for line in lines)
        totals = re.split(r"\s{2,}", next(line for line in lines if line.startswith("Total")))
        assert format_compact(ir.meta["param_count"]) in totals


def test_a_narrow_table_says_below_it_that_shared_parameters_are_counted_once(graphs) -> None:
    """T5's embedding is read by its encoder and its decoder: their rows add up to more than the
    total, and a table too narrow for the note in its Total cell says why below it."""
    ir = graphs["t5"].ir
    shared = ir.meta["shared_param_count"]
    assert shared > 0
    note = f"Params: {shared:,} shared between modules, counted once in the total"
    for width in WIDTHS:
        assert note in render_summary(ir, SummaryOptions(format="text", width=width)).splitlines()
    wide = render_summary(ir, SummaryOptions(format="text"))
    assert f"({shared:,} shared, counted once)" in wide and note not in wide
    assert "shared" not in render_summary(graphs["llama"].ir, SummaryOptions(format="text", width=80))


def test_no_width_shows_every_column(graphs) -> None:
    text = render_summary(graphs["llama"].ir, SummaryOptions(format="text"))
    assert _header(text, "text") == list(torchatlas._render._summary.COLUMNS)


def test_repeats_fold_to_one_row_with_per_layer_and_total_numbers(graphs) -> None:
    ir = graphs["llama"].ir
    folded = render_summary(ir, SummaryOptions(format="text"))
    row = next(line for line in folded.splitlines() if "(LlamaDecoderLayer)" in line)
    assert row.strip().startswith("layers.0–1 (LlamaDecoderLayer) ×2")
    assert re.search(r"[\d.]+K? ×2 = [\d.]+K?", row)
    unfolded = render_summary(ir, SummaryOptions(format="text", fold_repeats=False))
    assert sum("(LlamaDecoderLayer)" in line for line in unfolded.splitlines()) == 2


@pytest.mark.slow
def test_llama_70b_summary_fits_on_one_screen() -> None:
    import transformers

    config = transformers.LlamaConfig(
        hidden_size=8192, num_hidden_layers=80, intermediate_size=28672, num_attention_heads=64,
        num_key_value_heads=8, vocab_size=128256,
    )
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config)
    graph = torchatlas.trace(model, torch.zeros(1, 16, dtype=torch.long, device="meta"))
    for width in (None, *WIDTHS):
        text = render_summary(graph.ir, SummaryOptions(format="text", width=width))
        assert len(text.splitlines()) < 60
        fold = next(line for line in text.splitlines() if "layers.0–79 (" in line)
        assert "×80" in fold  # a narrow table cuts the class name first
        assert width == 80 or "layers.0–79 (LlamaDecoderLayer) ×80" in fold


def test_a_folded_run_of_one_shared_module_counts_its_parameters_once() -> None:
    class Shared(torch.nn.Module):  # one layer applied three times (ALBERT-style)
        def __init__(self) -> None:
            super().__init__()
            self.block = torch.nn.Linear(8, 8)

        def forward(self, x):
            for _ in range(3):
                x = self.block(x)
            return x

    graph = torchatlas.trace(Shared(), torch.randn(2, 8))
    row = next(line for line in graph.summary(format="text").splitlines() if "(Linear) ×3" in line)
    cells = re.split(r"\s{2,}", row.strip())
    # 72 parameters owned once; the three calls' FLOPs and MACs add up, both shown per call and in all
    assert cells[3:5] == ["72", "72"]
    assert "256 ×3 = 768" in cells and "128 ×3 = 384" in cells
    dot_box = next(line for line in graph.to_dot(fold_repeats=True).splitlines() if "×3" in line)
    assert "72 params" in dot_box


def test_a_folded_run_of_distinct_layers_shows_every_parameter_column_per_layer_and_in_all() -> None:
    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(64, 64)

        def forward(self, x):
            return torch.relu(self.fc(x))

    class Stack(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = torch.nn.ModuleList(Block() for _ in range(4))

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x

    graph = torchatlas.trace(Stack(), torch.randn(1, 64))
    row = next(line for line in graph.summary(format="text", wide=True, depth=1).splitlines() if "×4" in line)
    cells = re.split(r"\s{2,}", row.strip())
    # params, trainable, bytes: one layer's and the run's, so the columns agree with each other and the total
    assert cells[3:6] == ["4.2K ×4 = 16.6K", "4.2K ×4 = 16.6K", "16.25 KiB ×4 = 65.00 KiB"]
