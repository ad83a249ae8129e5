"""The summary table: one row per module call, totals, depth, formats and escaping."""

from __future__ import annotations

import json
import re

import pytest
import torch
from _passes_builder import IRBuilder, linear_layer, param_entry

import torchatlas
from torchatlas._passes import analyze
from torchatlas._render._summary import COLUMNS, SummaryOptions
from torchatlas._render._summary import summary as render_summary
from torchatlas._text import format_compact


def summary(ir, **options) -> str:
    return render_summary(ir, SummaryOptions(**options))


def _mlp_builder(first: str = "enc") -> IRBuilder:
    b = IRBuilder("m.MLP")
    x = b.input((2, 4))
    enc = b.scope(first, "m.Encoder")
    h = linear_layer(b, x, f"{first}.fc", 4, 8, parent=enc)
    b.returns(enc, h)
    y = linear_layer(b, h, "head", 8, 3)
    b.output(y)
    b.meta["parameters"] = [
        param_entry(f"{first}.fc.weight", (8, 4)),
        param_entry(f"{first}.fc.bias", (8,)),
        param_entry("head.weight", (3, 8), requires_grad=False),
        param_entry("head.bias", (3,)),
    ]
    return b


def _parse_text(out: str) -> list[dict[str, str]]:
    """Rows of the plain-text table as {column: cell}; the module cell keeps its indent."""
    lines = out.splitlines()
    header = re.split(r" {2,}", lines[0].strip())
    assert header == list(COLUMNS)
    starts = [lines[0].index(name) if i == 0 else None for i, name in enumerate(header)]
    assert starts[0] == 0
    rows = []
    for line in lines[2:]:
        if set(line.strip()) <= {"-", " "}:
            continue
        indent = len(line) - len(line.lstrip(" "))
        cells = re.split(r" {2,}", line.strip())
        # empty shape cells of the totals row collapse; pad from the right for numbers
        if len(cells) < len(COLUMNS):
            cells = cells[:1] + [""] * (len(COLUMNS) - len(cells)) + cells[1:]
        row = dict(zip(COLUMNS, cells))
        row["indent"] = str(indent)
        rows.append(row)
    return rows


def test_text_rows_one_per_call_with_totals():
    rows = _parse_text(summary(analyze(_mlp_builder().build()), format="text"))
    modules = [r["Module"] for r in rows]
    assert modules == ["<root> (MLP)", "enc (Encoder)", "fc (Linear)", "head (Linear)", "Total"]
    assert [int(r["indent"]) for r in rows] == [0, 2, 4, 2, 0]
    root, enc, fc, head, total = rows
    assert (fc["Params"], fc["Trainable"], fc["Param bytes"]) == ("40", "40", "160 B")
    assert (head["Params"], head["Trainable"]) == ("27", "3")
    assert (total["Params"], total["Trainable"]) == ("67", "43")
    assert fc["Input shapes"] == "2×4" and fc["Output shapes"] == "2×8"
    assert root["Input shapes"] == "2×4" and root["Output shapes"] == "2×3"
    assert fc["FLOPs"] == "128" and fc["MACs"] == "64"
    assert head["% FLOPs"] == f"{100 * 96 / 224:.1f}%"
    assert total["FLOPs"] == "224" and total["% FLOPs"] == "100.0%"
    assert fc["Activations"] == "64 B"


def test_depth_collapses_deeper_calls_into_their_ancestors():
    ir = analyze(_mlp_builder().build())
    rows = _parse_text(summary(ir, depth=1, format="text"))
    assert [r["Module"] for r in rows] == ["<root> (MLP)", "enc (Encoder)", "head (Linear)", "Total"]
    assert rows[1]["Params"] == "40" and rows[1]["FLOPs"] == "128"
    assert [r["Module"] for r in _parse_text(summary(ir, depth=0, format="text"))] == ["<root> (MLP)", "Total"]


def test_unknown_costs_and_shared_parameters_are_flagged():
    b = _mlp_builder()
    b.op("mylib.mystery", [b.nodes[0].id], (2, 4))
    b.meta["parameters"][0]["shared_with"] = ["head.weight"]
    rows = _parse_text(summary(analyze(b.build()), format="text"))
    assert rows[0]["FLOPs"].endswith("+?")
    assert rows[-1]["Module"] == "Total (1 op of unknown cost)"
    assert "shared, counted once" in rows[-1]["Params"]


def _md_cells(line: str) -> list[str]:
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def test_markdown_is_a_pipe_table_with_escaped_names():
    b = _mlp_builder(first="a|b<script>*x*")
    out = summary(analyze(b.build()), format="markdown")
    lines = out.strip().splitlines()
    assert _md_cells(lines[0]) == list(COLUMNS)
    assert all(len(_md_cells(line)) == len(COLUMNS) for line in lines)
    assert "<script>" not in out
    assert r"a\|b\<script\>\*x\*" in out
    assert _md_cells(lines[-1])[0] == "**Total**"


def test_control_characters_cannot_reach_the_terminal():
    b = _mlp_builder(first="evil\x1b[2J")
    ir = analyze(b.build())
    shown = {"text": r"evil\x1b[2J", "rich": r"evil\x1b[2J", "markdown": r"evil\\x1b\[2J"}
    for fmt, visible in shown.items():
        out = summary(ir, format=fmt)
        assert "\x1b" not in out
        assert visible in out


def test_rich_format_renders_every_call_and_colour_only_on_request():
    ir = analyze(_mlp_builder().build())
    plain = summary(ir, format="rich", width=200)
    for label in ("<root> (MLP)", "enc (Encoder)", "fc (Linear)", "head (Linear)", "Total"):
        assert label in plain
    assert "\x1b[" not in plain
    assert "\x1b[" in summary(ir, format="rich", width=200, color=True)
    assert max(len(line) for line in plain.splitlines()) <= 200


def test_unknown_format_is_rejected():
    with pytest.raises(ValueError, match="unknown summary format"):
        summary(analyze(_mlp_builder().build()), format="html")


def test_graph_analyses_before_it_renders():
    rows = _parse_text(str(torchatlas.Graph(_mlp_builder().build()).summary(format="text")))
    assert rows[-1]["Params"] == "67"


def test_coolcnn_summary():
    pytest.importorskip("torch")
    from torchatlas._example import CoolCNN, example_input

    model = CoolCNN()
    rows = _parse_text(summary(torchatlas.trace(model, (example_input(),)).ir, format="text"))
    by_module = {r["Module"]: r for r in rows}
    assert by_module["max_pool#2 (MaxPool2d)"]["Input shapes"] == "1×32×16×16"
    assert by_module["secondary_conv (Conv2d)"]["Params"] == "4.6K"  # as the diagram's 4.6K params
    assert by_module["Total"]["Params"] == format_compact(sum(p.numel() for p in model.parameters()))


def test_analysis_of_a_6000_op_graph_is_fast():
    b = IRBuilder("m.Big")
    x = b.input((1, 16, 64))
    for layer in range(80):
        s = b.scope(f"layers.{layer}", "m.Layer")
        for i in range(25):
            h = linear_layer(b, x, f"layers.{layer}.fc{i}", 64, 64, batch=16, parent=s)
            h = b.op("torch.relu", [h], (1, 16, 64), s)
            x = b.op("torch.Tensor.__add__", [h, x], (1, 16, 64), s)
        b.returns(s, x)
    b.output(x)
    ir = b.build()
    assert sum(1 for _ in ir.ops()) == 6000
    out = analyze(ir)  # its cost is measured in bench/bench_render.py, not here
    assert summary(out, format="text", depth=1)
    assert out.meta["repeat_groups"][0]["count"] == 80


def test_analysis_survives_a_json_round_trip():
    from torchatlas._ir import GraphIR

    ir = analyze(_mlp_builder().build())
    loaded = GraphIR.from_dict(json.loads(ir.to_json()))
    assert loaded.meta["analyzed"] is True
    assert summary(loaded, format="text") == summary(ir, format="text")


def test_runs_of_equal_shapes_count_once() -> None:
    from torchatlas._text import format_shapes

    cache = [[1, 2, 8, 16]] * 4
    assert format_shapes([[1, 8, 100], *cache]) == "1×8×100, 1×2×8×16 ×4"
    assert format_shapes([[3], [3]]) == "3, 3"  # two stay two: "3 ×2" reads worse
    assert format_shapes([[1], *cache, [2], [5], [6]], limit=2) == "1, 1×2×8×16 ×4 +3"


def test_modules_the_model_does_not_register_are_pointed_out() -> None:
    import torch

    class KeepsHelpersInAList(torch.nn.Module):  # a classic bug: the list hides the Linear from the model
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(8, 8)
            self.helpers = [torch.nn.Linear(8, 8)]

        def forward(self, x):
            return self.helpers[0](self.fc(x))

    graph = torchatlas.trace(KeepsHelpersInAList(), torch.randn(2, 8))
    assert [s.path for s in graph.ir.scopes if s.meta.get("unregistered")] == ["<Linear>"]
    last = graph.summary(format="text").rstrip().splitlines()[-1]
    assert last.startswith("⚠ not registered with the model") and last.endswith(": <Linear>")
    assert "not registered" not in torchatlas.trace(torch.nn.Linear(2, 2), torch.randn(1, 2)).summary(format="text")

    shared_gelu = torch.nn.GELU()  # transformers' ACT2FN hands out one shared instance: nothing to lose

    class SharedActivation(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(8, 8)

        def forward(self, x):
            return shared_gelu(self.fc(x))

    graph = torchatlas.trace(SharedActivation(), torch.randn(2, 8))
    assert [s.path for s in graph.ir.scopes if s.meta.get("unregistered")] == ["<GELU>"]
    assert "not registered" not in graph.summary(format="text")


def test_a_folded_rows_time_and_nan_counts_are_the_repeats_passes_totals() -> None:
    transformers = pytest.importorskip("transformers")

    from torchatlas._ir import GraphIR
    from torchatlas._text import format_duration

    cfg = transformers.AutoConfig.for_model("gpt2", n_layer=3, n_embd=32, n_head=2, vocab_size=100)
    torch.manual_seed(0)
    model = transformers.GPT2Model(cfg).eval()
    ir = torchatlas.trace(model, kwargs={"input_ids": torch.randint(0, 100, (1, 8))}, profile=True, stats=True).ir
    [group] = [g for g in ir.meta["repeat_groups"] if g["label"].startswith("h.0")]
    members = [ir.scope(sid).meta for sid in group["scopes"]]
    totals = group["totals"]
    assert totals["time_us"] == sum(m["time_us"] for m in members) > 0
    assert totals["nonfinite_ops"] == sum(m["nonfinite_ops"] for m in members)

    def folded_row(graph: GraphIR) -> dict[str, str]:
        lines = render_summary(graph, SummaryOptions(format="markdown")).splitlines()
        header = [c.strip(" *") for c in _md_cells(lines[0])]
        row = next(line for line in lines if "h.0–2 (GPT2Block) ×3" in line)
        return dict(zip(header, _md_cells(row), strict=True))

    row = folded_row(ir)
    assert row["Time"] == format_duration(totals["time_us"]) and row["NaN/Inf ops"] == "-"
    # the row reads the totals the pass wrote, it adds nothing up itself
    told = [{**g, "totals": {**g["totals"], "time_us": 4321.0, "nonfinite_ops": 7}} if g is group else g for g in ir.meta["repeat_groups"]]
    row = folded_row(GraphIR(ir.scopes, ir.nodes, {**ir.meta, "repeat_groups": told}))
    assert row["Time"] == format_duration(4321.0) and row["NaN/Inf ops"] == "7"
    # and so do the tree's line and the diagram's box of the run
    from torchatlas._render._dot import DotOptions, to_dot
    from torchatlas._render._tree import TreeOptions, render_tree

    told_ir = GraphIR(ir.scopes, ir.nodes, {**ir.meta, "repeat_groups": told})
    line = next(line for line in render_tree(told_ir, TreeOptions()).splitlines() if "h.0–2 (GPT2Block) ×3" in line)
    assert f"time {format_duration(4321.0)}" in line
    assert f"· {format_duration(4321.0)}" in to_dot(told_ir, DotOptions(depth=1))  # the run closed: one box


def test_an_empty_vector_reads_as_empty_never_as_a_bare_zero() -> None:
    from torchatlas._text import format_shape

    assert format_shape((0,)) == "0 (empty)" and format_shape((2, 0)) == "2×0" and format_shape(()) == "scalar"

    class EmptyCache(torch.nn.Module):
        def forward(self, x):
            keys = torch.tensor([])  # an empty cache, as transformers' DynamicCache starts one
            return torch.cat([keys, x])

    graph = torchatlas.trace(EmptyCache(), torch.randn(3))
    assert "tensor → 0 (empty)" in graph.tree() and 'label=" 0 (empty)"' in graph.to_dot()
