"""The page document says what the tree, the summary and the diagram say (issue 29): its titles,
counts, fold names, box names and shape words are theirs, and ``web/src`` formats none of them."""

from __future__ import annotations

import html
import re
from collections import Counter
from pathlib import Path

import pytest
import torch
from _tree_models import LSTMHead

import torchatlas
from torchatlas._render._html import viewer_document
from torchatlas._view import backward_apart, dominant_dtype, model_title, op_display, shape_text

transformers = pytest.importorskip("transformers")
WEB = Path(__file__).resolve().parent.parent / "web" / "src"


def test_the_viewer_formats_no_graph_fact() -> None:
    sources = sorted(WEB.glob("*.js"))
    assert sources
    for source in sources:
        text = source.read_text(encoding="utf-8")
        assert not re.findall(r"\bfunction\s+format\w*|\bformat[A-Z]\w*\s*\(|foldedPath", text), source.name


def _coolcnn(backward: bool = False) -> torchatlas.Graph:
    from torchatlas import _example

    torch.manual_seed(0)
    return torchatlas.trace(_example.CoolCNN(), _example.example_input(), backward=backward)


def _lstm() -> torchatlas.Graph:
    return torchatlas.trace(LSTMHead(), torch.randn(2, 10, 32))


def _hf(kind: str) -> torchatlas.Graph:
    torch.manual_seed(0)
    ids = torch.randint(0, 100, (1, 8))
    if kind == "llama":
        cfg = transformers.AutoConfig.for_model(
            "llama", num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=2,
            num_key_value_heads=2, vocab_size=100,
        )
        return torchatlas.trace(transformers.AutoModel.from_config(cfg).eval(), kwargs={"input_ids": ids})
    if kind == "t5":
        cfg = transformers.AutoConfig.for_model(
            "t5", num_layers=2, num_decoder_layers=2, d_model=32, d_ff=64, num_heads=2, d_kv=16, vocab_size=100,
        )
        model = transformers.T5Model(cfg).eval()
        return torchatlas.trace(model, kwargs={"input_ids": ids, "decoder_input_ids": ids[:, :4]})
    cfg = transformers.AutoConfig.for_model("gpt2", n_layer=3, n_embd=32, n_head=2, vocab_size=100)
    return torchatlas.trace(transformers.GPT2Model(cfg).eval(), kwargs={"input_ids": ids})


FIXTURES = {
    "coolcnn": _coolcnn,
    "llama-2-layers": lambda: _hf("llama"),
    "t5-small": lambda: _hf("t5"),
    "lstm": _lstm,
    "coolcnn-backward": lambda: _coolcnn(backward=True),
    "gpt2-folded": lambda: _hf("gpt2"),
}

_BOX = re.compile(r'^\s*"(s\d+)" \[label=<<B>([^<]*)</B>')
_OP = re.compile(r'^\s*"(n\d+)" \[label=<<B>([^<]*)</B>')
_EDGE = re.compile(r'-> "[^"]+" \[label=" ([^"]*)"')


@pytest.mark.parametrize("name", list(FIXTURES))
def test_the_page_says_what_the_tree_summary_and_diagram_say(name: str) -> None:
    graph = FIXTURES[name]()
    ir = graph.ir
    page = viewer_document(ir)
    tree, summary, dot = graph.tree(ascii=False), graph.summary(format="text", wide=True), graph.to_dot()
    # the title and the counts
    assert page["title"] == model_title(ir) and f"<B>{model_title(ir)}</B>" in dot
    assert repr(graph).endswith(f": {page['status']}>")
    # the folds: names as the summary writes them, and the tree and diagram fold the same runs
    folds = sorted(f["name"] for f in page["folds"].values())
    summary_folds = sorted(re.sub(r"^\s*(\S+) \(.*", r"\1", line) for line in summary.splitlines() if re.search(r"\) ×\d+\s", line))
    assert folds == summary_folds
    for fold in folds:
        assert re.search(rf"{re.escape(fold)} \(\w+\) ×\d+", tree) and f"<B>{fold}</B>" in dot  # named below its caller
    # box names: each module call the diagram draws as a box is named as the page names it
    scopes = {s.id: page["scopes"][i] for i, s in enumerate(ir.scopes)}
    boxes = [m.groups() for line in dot.splitlines() if (m := _BOX.match(line))]
    assert boxes
    for sid, title in boxes:
        assert scopes[sid]["nm"] == title.replace("&#x27;", "'")
    # an open call (a cluster) is named as the page names it open: below its caller, a fold by the fold's name
    viewed = {s.id: page["scopes"][i] for i, s in enumerate(backward_apart(ir).scopes)}  # the backward part's calls too
    clusters = re.findall(r'subgraph "cluster_(s\w+)" \{\n\s*graph \[label=<<B>([^<]*)</B>', dot)
    assert clusters or name in ("coolcnn", "lstm")
    for sid, title in clusters:
        assert html.unescape(title) in (viewed[sid]["nm"], *folds), (sid, title)
    # op titles: one word per op, with its operator (``add (+)``), in the page, the diagram,
    # the tree and the Model Explorer export
    titles = {n.id: page["names"][page["nodes"][i]["op"]] for i, n in enumerate(ir.nodes) if n.kind == "op"}
    assert all(title == op_display(ir.node(nid)) for nid, title in titles.items())
    drawn = [(nid, html.unescape(title)) for line in dot.splitlines() if (m := _OP.match(line)) and (nid := m.group(1)) in titles for title in [m.group(2)]]
    assert drawn
    ops_in = Counter(n.scope for n in ir.nodes if n.kind == "op")
    for nid, title in drawn:
        assert title == titles[nid]
        node = ir.node(nid)
        if ops_in[node.scope] > 1 or ir.scope(node.scope).parent is None:  # the tree lists a one-op call as its line
            assert re.search(rf"(── |┬ |= ){re.escape(title)}( →| \(|  )", tree), title
    explorer = {n["id"]: n["label"] for n in graph.to_model_explorer()["graphs"][0]["nodes"]}
    assert all(explorer[nid] == title for nid, title in titles.items())
    # shapes: every edge label of the diagram is a shape word of the page, as the tree spells it
    words = {meta["x"] for meta in page["metas"]}
    dominant = dominant_dtype(ir)
    assert words == {shape_text(m, dominant) for n in ir.nodes for m in n.outputs}
    for label in (m.group(1) for line in dot.splitlines() if (m := _EDGE.search(line))):
        for shape in label.replace("✂ ", "").split("\\n"):
            assert shape in words or shape == "…", (shape, label)


def test_a_loop_over_one_module_is_named_alike_and_params_are_spelled_alike() -> None:
    class Loop(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.block = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU())

        def forward(self, x):
            for _ in range(3):
                x = self.block(x)
            return x

    graph = torchatlas.trace(Loop(), torch.randn(2, 8))
    page = viewer_document(graph.ir)
    [fold] = page["folds"].values()
    assert fold["name"] == "block#0–2" and "block#0–2 (Sequential) ×3" in graph.tree()  # which calls
    assert fold["w"]["params"] == "72" and fold["v"]["params"] == 72  # one module: its parameters once
    root = page["scopes"][0]
    assert page["words"][root["w"]]["params"] == "72" and root["pw"] == "72 params"
    assert page["status"] == "6 ops · 10 module calls" and repr(graph).endswith(": 6 ops · 10 module calls>")  # Loop, block ×3, Linear ×3, GELU ×3


def test_a_nested_fold_is_named_below_its_caller_in_the_page_summary_and_diagram() -> None:
    cfg = transformers.AutoConfig.for_model(
        "bert", num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=2, vocab_size=100
    )
    torch.manual_seed(0)
    graph = torchatlas.trace(transformers.BertModel(cfg).eval(), kwargs={"input_ids": torch.randint(0, 100, (1, 8))})
    [fold] = viewer_document(graph.ir)["folds"].values()
    assert fold["name"] == "layer.0–1"  # inside encoder (BertEncoder)
    assert "    layer.0–1 (BertLayer) ×2" in graph.summary(format="text", wide=True)
    assert "<B>layer.0–1</B>" in graph.to_dot() and "<B>layer.0–1</B>" in graph.to_dot(depth=2)  # open, then closed
    assert "│   └── layer.0–1 (BertLayer) ×2" in graph.tree(ascii=False)  # below encoder, as every output names it
