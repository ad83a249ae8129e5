"""The outputs show one graph alike: every writer draws from the presentation layer (``_view``)."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
import torch
from _tree_models import LSTMHead

import torchatlas
from torchatlas._render import DotOptions, HtmlOptions, ModelExplorerOptions, SummaryOptions, TreeOptions
from torchatlas._view import ViewOptions

transformers = pytest.importorskip("transformers")


def gpt2(layers: int = 3) -> torchatlas.Graph:
    cfg = transformers.AutoConfig.for_model("gpt2", n_layer=layers, n_embd=32, n_head=2, vocab_size=100)
    torch.manual_seed(0)
    model = transformers.GPT2Model(cfg).eval()
    return torchatlas.trace(model, kwargs={"input_ids": torch.randint(0, 100, (1, 8))})


VIEW_FIELDS = ("depth", "fold_repeats", "expand_leaf_modules", "show_params", "show_constants", "direction")


def test_every_writer_takes_the_view_options_with_one_default_each() -> None:
    assert tuple(f.name for f in dataclasses.fields(ViewOptions)) == VIEW_FIELDS
    for options in (TreeOptions, SummaryOptions, DotOptions, HtmlOptions, ModelExplorerOptions):
        assert issubclass(options, ViewOptions)
        # a field a writer cannot honour may have the default it does (Model Explorer folds nothing)
        assert all(getattr(options(), name) == getattr(ViewOptions(), name) for name in VIEW_FIELDS if name not in options.UNHONOURED)
        with pytest.raises(ValueError, match="depth must be None or an integer"):
            options(depth=-1)


@pytest.mark.parametrize("options", [TreeOptions, SummaryOptions, ModelExplorerOptions])
def test_a_writer_refuses_the_view_options_it_cannot_honour_in_one_line(options: type[ViewOptions]) -> None:
    assert options.UNHONOURED and set(options.UNHONOURED) <= set(VIEW_FIELDS)
    for name in options.UNHONOURED:
        value = {"direction": "LR", "depth": 2}.get(name, not getattr(options(), name))
        with pytest.raises(ValueError, match=rf"^{options.__name__} cannot honour {name}={value!r}: \S"):
            options(**{name: value})
    assert not DotOptions.UNHONOURED and not HtmlOptions.UNHONOURED  # the diagram and the page honour every view option


def page_document(page: str) -> dict:
    """The graph document a page embeds."""
    start = page.index('id="atlas-data">') + len('id="atlas-data">')
    return json.loads(page[start : page.index("</script>", start)])


class MadeConstant(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.scale = torch.tensor(2.0)  # a plain attribute, not a buffer: a constant

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) * self.scale


def test_the_diagram_and_the_page_hide_the_same_node_kinds() -> None:
    graph = torchatlas.trace(MadeConstant(), torch.randn(2, 4))
    constants = [n for n in graph.ir.nodes if n.kind == "constant"]
    assert constants
    for options, drawn in ((ViewOptions(), False), (ViewOptions(show_constants=True), True)):
        dot = graph.to_dot(show_constants=options.show_constants, expand_leaf_modules=True)
        assert (f'"{constants[0].id}"' in dot) is drawn
        page = page_document(graph.to_html(show_constants=options.show_constants))
        assert page["view"]["hidden"] == sorted(options.hidden_kinds())
        assert ("constant" in page["view"]["hidden"]) is not drawn
    assert ViewOptions().hidden_kinds() == {"param", "buffer", "constant"}
    assert ViewOptions(show_params=True, show_constants=True).hidden_kinds() == set()


def test_the_page_starts_from_the_view_options() -> None:
    graph = torchatlas.trace(MadeConstant(), torch.randn(2, 4))
    view = page_document(graph.to_html(depth=2, fold_repeats=False, direction="LR", show_params=True))["view"]
    closed = view.pop("closed")
    assert view == {"hidden": ["constant"], "state": ["buffer", "param"], "fold": False, "depth": 2, "direction": "RIGHT"}
    page = page_document(graph.to_html())
    # the standard torch.nn layers the diagram draws as one box start closed on the page too
    leaves = {s["path"] for i, s in enumerate(page["scopes"]) if i in closed}
    boxed = {s.path for s in graph.ir.scopes if s.parent is not None and s.cls.startswith("torch.nn.")}
    assert closed and leaves == boxed
    assert page_document(graph.to_html(expand_leaf_modules=True))["view"]["closed"] == []


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
    graph = torchatlas.trace(LSTMHead(), torch.randn(2, 10, 32))
    [box] = [line for line in graph.to_dot().splitlines() if "(LSTM)" in line and "label=" in line]
    assert "2×10×32 → 2×10×96, 4×2×48, 4×2×48 ·" in box  # out, h and c
    assert "(LSTM)  2×10×32 → (2×10×96, 4×2×48, 4×2×48)" in graph.tree()  # spelled as in the tree


def _dangling(tree: str) -> list[str]:
    """Lines that end a level on a lone ``┬`` fork: the next line is shallower or there is none."""
    lines = tree.splitlines()
    out = []
    for i, line in enumerate(lines):
        text = line.lstrip("│├└─ ")
        if not text.startswith("┬ ") or text.startswith("┬ ("):
            continue
        indent = len(line) - len(text)
        after = lines[i + 1] if i + 1 < len(lines) else ""
        before = lines[i - 1].lstrip("│├└─ ") if i else ""
        if line.lstrip("│ ").startswith("└") and not before.startswith("┬ "):
            out.append(line)
        elif after and len(after) - len(after.lstrip("│├└─ ")) < indent and not before.startswith("┬ "):
            out.append(line)
    return out


@pytest.mark.parametrize("kind", ["resnet", "vit"])
def test_no_tree_ends_on_a_dangling_fork(kind: str) -> None:
    torch.manual_seed(0)
    if kind == "resnet":
        cfg = transformers.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], layer_type="basic")
        model, last = transformers.ResNetModel(cfg), "└── pooler (AdaptiveAvgPool2d)  1×16×4×4 → 1×16×1×1  (returned)"
    else:
        cfg = transformers.ViTConfig(
            hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, image_size=32, patch_size=8
        )
        model, last = transformers.ViTModel(cfg), "└── pooler (ViTPooler)  1×17×32 → 1×32  (returned)"
    tree = torchatlas.trace(model.eval(), torch.randn(1, 3, 32, 32)).tree(ascii=False)
    assert last in tree.splitlines()
    assert _dangling(tree) == []


def test_the_summary_keeps_dtypes_and_its_root_row_agrees_with_the_total() -> None:
    class Embed(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = torch.nn.Embedding(10, 8)
            self.fc = torch.nn.Linear(8, 8)

        def forward(self, ids):
            return self.fc(self.emb(ids)).cummax(-1).values  # cummax: an op of unknown cost

    graph = torchatlas.trace(Embed(), torch.zeros(1, 16, dtype=torch.long))
    rows = {line.split()[0]: line for line in graph.summary(format="text", wide=True).splitlines()[2:]}
    assert "1×16 int64" in rows["<root>"] and "1×16 int64" in rows["emb"]  # ids keep their dtype
    flops = [cell for cell in rows["<root>"].split() if cell.endswith("+?")]
    assert flops and all(cell in rows["Total"].split() for cell in flops)


def test_the_summary_fits_columns_off_a_terminal(tmp_path) -> None:
    import os
    import subprocess
    import sys

    path = gpt2(2).save(tmp_path / "g.json")
    env = {**os.environ, "COLUMNS": "80"}
    out = subprocess.run(
        [sys.executable, "-m", "torchatlas", str(path), "-f", "summary"], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() and max(len(line) for line in out.splitlines()) <= 80
    wide = subprocess.run(
        [sys.executable, "-m", "torchatlas", str(path), "-f", "summary", "--wide"], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert max(len(line) for line in wide.splitlines()) > 80


def test_the_failures_pass_marks_the_calls_around_the_failing_op() -> None:
    class FailsInLeaf(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ok, self.bad = torch.nn.Linear(4, 4), torch.nn.Linear(5, 2)

        def forward(self, x):
            return self.bad(torch.relu(self.ok(x)))

    graph = torchatlas.trace(FailsInLeaf(), torch.randn(2, 4), partial=True)
    assert {s.path for s in graph.ir.scopes if s.meta.get("failed")} == {"", "bad"}
