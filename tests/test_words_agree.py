"""The agreement test (issue 40, ``shared/design/words.md``): each fixture is rendered in every
output, the words are read back from each (the diagram's DOT labels, the tree's lines, Model
Explorer's JSON, the page's words by running ``web/src``'s ``model.js`` and ``describe.js`` under
node on the page document), and every fact must be spelled one way: as ``_view``'s ``Words``."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest
import torch
from _tree_models import LSTMHead
from torch import nn

import torchatlas
from torchatlas._render._html import viewer_document
from torchatlas._view import DotOptions, backward_apart, build_view, far_name, model_title

transformers = pytest.importorskip("transformers")
WEB = Path(__file__).resolve().parent.parent / "web" / "src"
NODE = shutil.which("node")

_READER = """
import { readFileSync } from "node:fs";
import { Model } from "./model.js";
import { Describer } from "./describe.js";
const doc = JSON.parse(readFileSync(process.argv[2], "utf8"));
const model = new Model(doc), describer = new Describer(model);
const said = (id) => ({ ...describer.fullUnit(id), tooltip: describer.tooltip(id) });
const out = { nodes: model.nodes.map((n) => said("n" + n.idx)), scopes: model.scopes.map((s) => said("s" + s.idx)), folds: {} };
for (const [group, members] of model.groups) out.folds[members[0]] = said("g" + members[0]);
process.stdout.write(JSON.stringify(out));
"""


def page_words(document: dict, tmp: Path) -> dict:
    """What the page's boxes say: ``web/src`` run under node on the document."""
    for name in ("model.js", "describe.js"):
        shutil.copy(WEB / name, tmp / name)
    (tmp / "package.json").write_text('{"type": "module"}')
    (tmp / "read.js").write_text(_READER)
    (tmp / "doc.json").write_text(json.dumps(document))
    done = subprocess.run([NODE, str(tmp / "read.js"), str(tmp / "doc.json")], capture_output=True, text=True, timeout=120, check=True)
    return json.loads(done.stdout)


# -- fixtures ------------------------------------------------------------------------------


def _coolcnn(backward: bool = False) -> torchatlas.Graph:
    from torchatlas import _example

    torch.manual_seed(0)
    return torchatlas.trace(_example.CoolCNN(), _example.example_input(), backward=backward)


def _hf(kind: str) -> torchatlas.Graph:
    torch.manual_seed(0)
    ids = torch.randint(0, 100, (1, 8))
    if kind == "llama":
        cfg = transformers.AutoConfig.for_model(
            "llama", num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=2, num_key_value_heads=2, vocab_size=100
        )
        return torchatlas.trace(transformers.AutoModel.from_config(cfg).eval(), kwargs={"input_ids": ids})
    if kind == "t5":
        cfg = transformers.AutoConfig.for_model("t5", num_layers=4, num_decoder_layers=4, d_model=32, d_ff=64, num_heads=2, d_kv=16, vocab_size=100)
        return torchatlas.trace(transformers.T5Model(cfg).eval(), kwargs={"input_ids": ids, "decoder_input_ids": ids[:, :4]})
    cfg = transformers.AutoConfig.for_model("gpt2", n_layer=3, n_embd=32, n_head=2, vocab_size=100)
    return torchatlas.trace(transformers.GPT2Model(cfg).eval(), kwargs={"input_ids": ids})


class MakesNaN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.norm = nn.Sequential(nn.Identity())

    def forward(self, x):
        h = self.fc(x)
        return self.norm(h) / torch.zeros_like(h)


class Fails(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ok = nn.Linear(4, 4)
        self.bad = nn.Linear(5, 2)

    def forward(self, x):
        return self.bad(torch.relu(self.ok(x)))


def _diff() -> torchatlas.Graph:
    a = torchatlas.trace(nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2)), torch.randn(2, 4))
    b = torchatlas.trace(nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 2)), torch.randn(2, 4))
    return torchatlas.Graph(torchatlas.diff(a, b).graph)


def _tp_llama() -> torchatlas.Graph:
    """The 2-layer Llama sharded tensor-parallel over a fake group of 2 ranks, as the distributed tests trace it."""
    import torch.distributed as dist
    from _distributed_models import tp_llama
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    try:
        model, args, kwargs = tp_llama(2)
        return torchatlas.trace(model, args, kwargs)
    finally:
        dist.destroy_process_group()


def _unet() -> torchatlas.Graph:
    """diffusers' UNet2DModel, tiny: its time embedding is a side branch every block reads as ``temb``."""
    diffusers = pytest.importorskip("diffusers")
    torch.manual_seed(0)
    model = diffusers.UNet2DModel(
        sample_size=8, in_channels=3, out_channels=3, layers_per_block=1, block_out_channels=(8, 16),
        down_block_types=("DownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "UpBlock2D"), norm_num_groups=4,
    )
    return torchatlas.trace(model.eval(), (torch.randn(1, 3, 8, 8), torch.tensor([10])))


FIXTURES = {
    "coolcnn": _coolcnn,
    "llama-2-layers": lambda: _hf("llama"),
    "t5": lambda: _hf("t5"),
    "lstm-tagger": lambda: torchatlas.trace(LSTMHead(), torch.randn(2, 10, 32)),
    "coolcnn-backward": lambda: _coolcnn(backward=True),
    "gpt2-folded": lambda: _hf("gpt2"),
    "nan": lambda: torchatlas.trace(MakesNaN(), torch.randn(2, 4), stats=True),
    "failing": lambda: torchatlas.trace(Fails(), torch.randn(2, 4), partial=True),
    "diff": _diff,
    "tp-llama": _tp_llama,
    "diffusers-unet": _unet,
}

_UNIT = re.compile(r'^\s*"([ns]\d+|ref_[^"]+|r\d+[^"]*)" \[label=<(.*)>, (?:fillcolor|style)')


def _dot_texts(dot: str) -> dict[str, list[str]]:
    """Unit id -> every line of words its DOT label shows (HTML dropped)."""
    out: dict[str, list[str]] = {}
    for line in dot.splitlines():
        m = re.match(r'^\s*"([^"]+)" \[label=<(.*?)>, ', line)
        if m and not m.group(1).startswith(("d_", "t_")):
            label = m.group(2)
            out[m.group(1)] = [html.unescape(re.sub(r"<[^>]+>", "", part)).strip() for part in label.split("<BR/>")]
    return out


def _mermaid_text(label: str) -> str:
    """A Mermaid label's text, its entity codes (``#35;``, ``#quot;``) read back."""
    named = {"quot": '"', "lt": "<", "gt": ">"}
    return re.sub(r"#(\d+|quot|lt|gt);", lambda m: named.get(m.group(1)) or chr(int(m.group(1))), label)


@pytest.mark.skipif(NODE is None, reason="node runs web/src")
@pytest.mark.parametrize("name", list(FIXTURES))
def test_every_output_spells_each_fact_one_way(name: str, tmp_path: Path) -> None:
    graph = FIXTURES[name]()
    ir = graph.ir
    viewed = backward_apart(ir)
    model = model_title(ir)
    document = viewer_document(ir)
    page = page_words(document, tmp_path)
    spelled: dict[str, dict[str, str]] = defaultdict(dict)  # fact -> output -> its words

    # the diagram at every depth: each unit's words as the view built them, laid out as said
    for depth in (None, 1, 0):
        options = DotOptions(depth=depth)
        view = build_view(ir, options)
        drawn = _dot_texts(graph.to_dot(depth=depth))
        for unit_id, words in view.words.items():
            lines = drawn[unit_id]
            shown = " ".join(lines)
            assert html.unescape(re.sub(r"\s+", " ", words.title)) in shown, (unit_id, words.title, lines)
            for mark in words.marks:
                if mark.kind in ("failed", "nonfinite"):
                    spelled[f"mark {mark.kind} {unit_id}"][f"diagram@{depth}"] = next((t for t in lines if t.startswith(mark.text[:40])), "—")
            for fact in words.facts:
                if fact.endswith(" params"):
                    spelled[f"params {unit_id}"][f"diagram@{depth}"] = fact
            unit = view.layout.units[unit_id]
            if unit.kind == "ref":  # a stand-in: named where it comes from, at every depth
                spelled[f"far {unit.node.id}:{unit.slot}"][f"diagram@{depth}"] = lines[0]
    # the page: its boxes' words, read by running web/src
    node_index = {n.id: i for i, n in enumerate(viewed.nodes)}
    scope_index = {s.id: i for i, s in enumerate(viewed.scopes)}
    offset = 1 if document["scopes"][0]["path"] == "" and viewed.scopes[0].parent is not None else 0
    for n in viewed.nodes:
        said = page["nodes"][node_index[n.id]]
        if n.kind in ("op", "input", "output"):
            spelled[f"title {n.id}"]["page"] = said["title"]
        for kind, text in document["nodes"][node_index[n.id]].get("mk", ()):
            if kind in ("failed", "nonfinite"):
                spelled[f"mark {kind} {n.id}"]["page"] = said["subtitle"] if said["subtitle"].startswith(text[:40]) else said["tooltip"]
        for slot, far in enumerate(document["nodes"][node_index[n.id]].get("fw", ())):
            spelled[f"far {n.id}:{slot}"]["page"] = far
            assert far == far_name(viewed, torchatlas._ir.Ref(n.id, slot), model)  # noqa: SLF001
    for s in viewed.scopes:
        i = scope_index[s.id] + offset
        said = page["scopes"][i]
        if s.parent is not None:
            spelled[f"call {s.id}"]["page"] = said["title"]
        params = document["scopes"][i].get("pw")
        if params:
            spelled[f"params {s.id}"]["page"] = params
        for kind, text in document["scopes"][i].get("mk", ()):
            if kind in ("failed", "nonfinite"):
                spelled[f"mark {kind} {s.id}"]["page"] = text if text in said["subtitle"] and text in said["tooltip"] else said["subtitle"]
    # the diagram's titles of ops, inputs and calls, at full depth
    full = build_view(ir, DotOptions())
    for unit_id, words in full.words.items():
        unit = full.layout.units[unit_id]
        if unit.kind == "node":
            spelled[f"title {unit.node.id}"]["diagram"] = words.title
        elif unit.kind == "box":
            spelled[f"call {unit.scope.id}"]["diagram"] = words.title
    # Mermaid: the same units in the same order, each box's first line its title
    boxes = dict(re.findall(r'^\s*(u\d+)\["(.*)"\]$', graph.to_mermaid(), re.M))
    for i, (unit_id, words) in enumerate(full.words.items()):
        unit, line = full.layout.units[unit_id], _mermaid_text(boxes[f"u{i}"].split("<br/>")[0])
        if unit.kind == "node":
            spelled[f"title {unit.node.id}"]["mermaid"] = line
        elif unit.kind == "box":
            spelled[f"call {unit.scope.id}"]["mermaid"] = line.removesuffix(f" ({words.subtitle})")
        elif unit.kind == "ref":
            spelled[f"far {unit.node.id}:{unit.slot}"]["mermaid"] = line
    # Model Explorer: op, input and output labels, and its stand-ins
    for n in graph.to_model_explorer()["graphs"][0]["nodes"]:
        if n["label"].startswith("↪ "):
            refers = {a["key"]: a["value"] for a in n["attrs"]}
            spelled[f"far {refers['refers_to']}:{refers['slot']}"]["model explorer"] = n["label"]
        else:
            spelled[f"title {n['id']}"]["model explorer"] = n["label"]
    # the tree: each mark's words where the tree shows it
    tree = "\n".join(graph.tree(depth=depth, ascii=False) for depth in (None, 1, 0))
    for fact, outputs in list(spelled.items()):
        if fact.startswith("mark "):
            text = next(iter(outputs.values()))
            if text.split(":")[0] in tree:
                outputs["tree"] = text if text in tree else next(line for line in tree.splitlines() if text.split(":")[0] in line)

    two_ways = {fact: outputs for fact, outputs in spelled.items() if len(set(outputs.values())) > 1}
    assert not two_ways, two_ways
    for fact, outputs in EXPECTED.get(name, {}).items():  # the facts of today's list are read from each output
        assert any(f.startswith(fact) and outputs <= set(o) for f, o in spelled.items()), {f: o for f, o in spelled.items() if f.startswith(fact)}


EXPECTED = {
    "coolcnn": {"params": {"diagram@None", "page"}, "title n0": {"diagram", "page", "model explorer", "mermaid"}},
    "t5": {"far": {"diagram@None", "page", "model explorer", "mermaid"}, "title n0": {"diagram", "page", "model explorer", "mermaid"}},
    "nan": {"mark nonfinite": {"diagram@None", "page", "tree"}},
    "failing": {"mark failed": {"diagram@0", "page", "tree"}},
    "diff": {"call": {"diagram", "page", "mermaid"}},
    "tp-llama": {"title n0": {"diagram", "page", "model explorer", "mermaid"}, "call": {"diagram", "page", "mermaid"}},
    "diffusers-unet": {"title n0": {"diagram", "page", "model explorer", "mermaid"}},
}
"""Per fixture: a fact of the issue's list and the outputs it must be read from."""


# -- today's list, as cases ------------------------------------------------------------------


def _box(dot: str, title: str) -> str:
    return next(line for line in dot.splitlines() if f"<B>{title}</B>" in line)


def test_parameters_are_spelled_one_way() -> None:
    graph = _coolcnn()
    conv = next(s for s in graph.ir.scopes if s.path == "initial_conv")
    page = viewer_document(graph.ir)["scopes"][graph.ir.scopes.index(conv)]
    assert "448 params" in _box(graph.to_dot(), "initial_conv") and page["pw"] == "448 params"


def test_an_input_is_named_by_forwards_parameter_in_every_output() -> None:
    class TwoInputs(nn.Module):
        def forward(self, sample, timestep):
            return sample * timestep

    graph = torchatlas.trace(TwoInputs(), (torch.randn(2, 2), torch.randn(2, 2)))
    inputs = [n for n in graph.ir.nodes if n.kind == "input"]
    assert [n.path for n in inputs] == ["args[0]", "args[1]"]  # the document keeps where each was passed
    document = viewer_document(graph.ir)
    assert [document["names"][document["nodes"][graph.ir.nodes.index(n)]["op"]] for n in inputs] == ["sample", "timestep"]
    assert "<B>sample</B>" in graph.to_dot() and "<B>timestep</B>" in graph.to_dot()
    labels = {n["label"] for n in graph.to_model_explorer()["graphs"][0]["nodes"]}
    assert {"sample", "timestep"} <= labels


def test_a_failure_and_a_nan_read_alike_in_the_tree_the_diagram_and_the_page(tmp_path: Path) -> None:
    failing = FIXTURES["failing"]()
    line = "✗ failed: RuntimeError: mat1 and mat2 shapes cannot be multiplied (2x4 and 5x2)"
    assert line in failing.tree(ascii=False) and line[:40] in failing.to_dot(expand_leaf_modules=True)
    assert failing.tree(depth=0, ascii=False).endswith("✗ failed inside") and "✗ failed inside" in failing.to_dot(depth=0)
    said = page_words(viewer_document(failing.ir), tmp_path)
    assert any(n.get("subtitle") == line for n in said["nodes"]) and "✗ failed inside" in said["scopes"][0]["tooltip"]
    nan = FIXTURES["nan"]()
    assert "⚠ Inf×8" in nan.tree(ascii=False) and "⚠ Inf×8" in nan.to_dot()


def test_a_folds_parameters_read_each_times_n_equals_total_in_the_diagram_and_the_summary() -> None:
    graph = _hf("llama")
    row = next(line for line in graph.summary(format="text", depth=1, wide=True).splitlines() if "layers.0–1" in line)
    each_total = re.search(r"(\S+ ×2 = \S+)", row).group(1)  # the Params column, the first run cell
    assert f"{each_total} params" in _box(graph.to_dot(depth=1), "layers.0–1")

    class Loop(nn.Module):  # one module called three times owns one set of parameters: no ×N
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            for _ in range(3):
                x = self.fc(x)
            return x

    assert "· 20 params" in _box(torchatlas.trace(Loop(), torch.randn(2, 4)).to_dot(depth=1), "fc#0–2")


def test_the_lstm_box_lists_all_three_outputs() -> None:
    graph = torchatlas.trace(LSTMHead(), torch.randn(2, 10, 32))
    assert "2×10×96, 4×2×48, 4×2×48" in _box(graph.to_dot(), "lstm")
    assert "(2×10×96, 4×2×48, 4×2×48)" in graph.tree(ascii=False)


def test_a_diffs_status_is_one_word_in_its_list_and_its_boxes() -> None:
    from torchatlas._view import DIFF_STATUS

    a = torchatlas.trace(nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2)), torch.randn(2, 4))
    b = torchatlas.trace(nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2)), torch.randn(2, 4))
    diff = torchatlas.diff(a, b)
    page = diff.to_html()
    document = viewer_document(diff.graph)
    removed = [s for s in document["scopes"] if s.get("df") == "removed"]
    assert removed and all(s["dfw"] == DIFF_STATUS["removed"] for s in removed)
    assert DIFF_STATUS["removed"] in page and "removed from" not in page


def test_a_plain_function_shows_what_it_returned() -> None:
    def f(x):
        return torch.relu(x) * 2

    class Callable:
        def __call__(self, x):
            return x + 1, x * 2

    graph = torchatlas.trace(f, (torch.randn(2, 2),))
    assert graph.tree(ascii=False).splitlines()[0] == "f  2×2 → 2×2"
    assert graph.ir.scopes[0].meta["output_shapes"] == [[2, 2]]
    root = next(line for line in graph.summary(format="text", wide=True).splitlines() if line.startswith("<root> (f)"))
    assert root.split()[3] == "2×2"  # the Output shapes column
    assert torchatlas.trace(lambda x: x.sum(), (torch.randn(2, 2),)).tree(ascii=False).splitlines()[0] == "<lambda>  2×2 → scalar"
    assert torchatlas.trace(Callable(), (torch.randn(2, 2),)).tree(ascii=False).splitlines()[0].endswith("2×2 → (2×2, 2×2)")


def test_a_plain_functions_input_is_named_by_its_parameter_in_every_output() -> None:
    class Callable:
        def __call__(self, y):
            return y + 1

    class Runner:
        def run(self, w, v):
            return w * v

    two = (torch.randn(2, 2), torch.randn(2, 2))
    for called, args, names in [(lambda z: z.sum(), two[:1], ["z"]), (Callable(), two[:1], ["y"]), (Runner().run, two, ["w", "v"])]:
        graph = torchatlas.trace(called, args)
        inputs = [n for n in graph.ir.nodes if n.kind == "input"]
        document = viewer_document(graph.ir)
        assert [document["names"][document["nodes"][graph.ir.nodes.index(n)]["op"]] for n in inputs] == names
        assert all(f"<B>{name}</B>" in graph.to_dot() and f'["{name}<br/>2×2"]' in graph.to_mermaid() for name in names)
        assert {n["label"] for n in graph.to_model_explorer()["graphs"][0]["nodes"]} >= set(names)
    assert torchatlas.trace(Callable(), two[:1]).ir.scopes[0].cls == f"{__name__}.test_a_plain_functions_input_is_named_by_its_parameter_in_every_output.<locals>.Callable"


def test_an_eval_dropout_counts_no_activation_memory_in_the_summary() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.1), nn.Identity()).eval()
    summary = torchatlas.trace(model, torch.randn(2, 4)).summary(format="text", wide=True)
    header, *lines = summary.splitlines()
    at = header.index("Activations")
    cell = {line.split()[0]: line[at - 4 : at + len("Activations")].split()[-2:] for line in lines if line.strip()[:1] in ("0", "1", "2")}
    assert cell["1"] == cell["2"] == ["0", "B"] and cell["0"] == ["32", "B"]  # as Identity; the Linear's output


def test_the_summary_keeps_the_backward_part_apart() -> None:
    forward, backward = _coolcnn(), _coolcnn(backward=True)
    rows = {line.split("  ")[0].strip(): line for line in backward.summary(format="text", wide=True).splitlines()}
    plain = {line.split("  ")[0].strip(): line for line in forward.summary(format="text", wide=True).splitlines()}
    assert rows["<root> (CoolCNN)"].split()[6] == plain["<root> (CoolCNN)"].split()[6]  # the forward FLOPs alone
    assert "◀ backward" in rows and "+?" not in rows["<root> (CoolCNN)"]


def test_a_norm_is_filled_as_normalization_and_the_legend_names_folds_and_decisions() -> None:
    graph = _hf("llama")
    dot = graph.to_dot(depth=2)
    rms, layer_norm = _box(dot, "input_layernorm"), _box(_hf("gpt2").to_dot(depth=3), "ln_1")
    fill = re.compile(r'fillcolor="([^"]+)"')
    assert fill.search(rms).group(1) == fill.search(layer_norm).group(1)  # LlamaRMSNorm as LayerNorm
    assert "×N  repeated calls folded to one" in dot

    class Decides(nn.Module):
        def forward(self, x):
            return x * 2 if x.sum() > 0 else x

    assert "decision: Python read the value" in torchatlas.trace(Decides(), torch.ones(2)).to_dot()


def test_the_page_legend_lists_only_the_categories_drawn_as_the_diagrams() -> None:
    graph = torchatlas.trace(nn.Sequential(nn.Linear(4, 4), nn.ReLU()), torch.randn(2, 4))
    legend = [cat for cat, _ in viewer_document(graph.ir)["legend"]]
    assert "compute" in legend and "elementwise" in legend
    assert not {"normalization", "reduction", "shape", "communication"} & set(legend)  # none in the graph
    assert all(cat in graph.to_dot() for cat in legend if cat not in ("io", "param"))


_DEPTH = """
import { readFileSync } from "node:fs";
import { Model } from "./model.js";
const model = new Model(JSON.parse(readFileSync(process.argv[2], "utf8")));
model.expandToDepth(Number(process.argv[3]), false, true, true);  // a depth asked for: the page's first view, the depth menu
process.stdout.write(JSON.stringify({ expanded: [...model.expanded], leaves: [...model.visibleGraph().leaves.keys()] }));
"""


@pytest.mark.skipif(NODE is None, reason="node runs web/src")
def test_a_depth_asked_for_opens_the_folds_above_it_as_the_diagram(tmp_path: Path) -> None:
    graph = _hf("gpt2")
    document = viewer_document(graph.ir)
    page_words(document, tmp_path)  # copies web/src
    (tmp_path / "depth.js").write_text(_DEPTH)
    (tmp_path / "doc.json").write_text(json.dumps(document))
    done = subprocess.run([NODE, str(tmp_path / "depth.js"), str(tmp_path / "doc.json"), "2"], capture_output=True, text=True, check=True)
    seen = json.loads(done.stdout)
    first = next(i for i, s in enumerate(graph.ir.scopes) if s.path == "h.0")
    assert first in seen["expanded"]  # h.0–2 ×3 drawn open, as its first member
    inside = {i for i, s in enumerate(graph.ir.scopes) if s.parent == graph.ir.scopes[first].id}
    assert {f"s{i}" for i in inside} <= set(seen["leaves"])  # h.0's calls are the boxes, as to_dot(depth=2) draws them
    dot = graph.to_dot(depth=2)
    assert all(f'"{graph.ir.scopes[i].id}" [label=' in dot for i in inside)


def test_the_diff_pages_list_starts_as_one_line_below_the_fitted_graph() -> None:
    """Measured at 1280×720 in Chromium (docs/img/diff-page-1280x720.png): the closed list's line
    sits under the fitted graph; open, it would cover the graph's bottom."""
    a = torchatlas.trace(nn.Sequential(nn.Linear(4, 4), nn.ReLU()), torch.randn(2, 4))
    b = torchatlas.trace(nn.Sequential(nn.Linear(4, 8), nn.ReLU()), torch.randn(2, 4))
    page = torchatlas.diff(a, b).to_html()
    assert '<details class="diff-list"><summary>A and B differ: ' in page


def test_the_viewer_writes_no_word_of_a_box_its_own() -> None:
    """``web/src`` shows the words Python gives (``mk``, ``fw``, ``pr``, ``dfw``, ``pw``, the
    names): none of the words of today's list is a literal there."""
    words = ("failed here", "ops with NaN", "NaN/Inf op${", "removed from", "added in", "yes: ", "↪ ${", '"W"', "changed from")
    for source in sorted(WEB.glob("*.js")):
        text = source.read_text(encoding="utf-8")
        assert not [w for w in words if w in text], source.name


def test_the_unets_time_embedding_branch_is_named_as_every_block_reads_it() -> None:
    graph = _unet()
    tree = graph.tree(depth=1, ascii=False)
    assert "├── ┬ temb\n" in tree and "┬ sample" not in tree
    assert all(line.endswith("← temb") or "temb," in line for line in tree.splitlines() if "down_blocks" in line)
    inputs = [n for n in graph.ir.nodes if n.kind == "input"]
    assert [build_view(graph.ir, DotOptions()).words[n.id].title for n in inputs] == ["sample", "timestep"]  # forward's names


def test_a_tensor_parallel_llamas_collectives_read_alike_in_the_diagram_and_the_tree() -> None:
    graph = _tp_llama()
    dot, tree = graph.to_dot(depth=2), graph.tree(ascii=False)
    assert "⇄ all_reduce" in dot and "all_reduce" in tree
    assert "<B>layers.0–1</B>" in dot and "── layers.0–1 (LlamaDecoderLayer) ×2" in tree


_PLACED = re.compile(
    r"""(?:section\(|flash\(|textContent = |\btext: |\.title = |h\("(?:button|p|h3|h4|dt|dd)", [^,()]+, |\[)\s*(["`])((?:(?!\1).)*)\1(?!\s*,\s*["`])"""
)
"""A string literal a user reads: a section's title, a notice, a text, a tooltip, a button's
label, a panel row's label (the first item of a ``[label, value]`` row)."""

TOOLBAR = {
    "main.js": {
        "Enter", "Shift+click", "Esc", "Keyboard", "params", "◆", "depth ${d}", "rank ${r}",
        "torchatlas viewer failed to start:\\n${atlas.error}",  # before any document could be read
    },
    "overlay.js": {"fill: category", "fill: ${text}", "size"},
}
"""The toolbar's own words (and the one notice shown where no document could be read): the
only words ``web/src`` writes itself."""


def test_the_viewer_writes_no_word_outside_its_toolbar() -> None:
    """Every other word the page shows comes from the document: the boxes' (``Words``), the
    details panel's, the dock's and the notices' (``PAGE_WORDS``, the document's ``ui``)."""
    from torchatlas._view._words import PAGE_WORDS

    found = {}
    for source in sorted(WEB.glob("*.js")):
        lines = [line for line in source.read_text(encoding="utf-8").splitlines() if not line.lstrip().startswith(("//", "*", "/**"))]
        placed = {m.group(2) for line in lines for m in _PLACED.finditer(line)}
        # a word: letters left once the values put in are taken out; a style sheet's text is none
        words = {t for t in placed if re.search(r"[A-Za-z]{2}", re.sub(r"\$\{[^}]*\}", "", t)) and "{" not in re.sub(r"\$\{[^}]*\}", "", t)}
        words -= TOOLBAR.get(source.name, set())
        if words:
            found[source.name] = sorted(words)
    assert not found, found
    assert {"hint", "kind", "moduleCall", "copy", "boxesShown", "unfoldTitle"} <= set(PAGE_WORDS)
    assert viewer_document(_coolcnn().ir)["ui"] == PAGE_WORDS


def test_a_branch_is_named_by_what_its_join_reads() -> None:
    tree = _hf("gpt2").tree(ascii=False)
    assert "┬ feed_forward_hidden_states" in tree  # hidden_states = residual + feed_forward_hidden_states
    assert "┬ hidden_states\n" not in tree
