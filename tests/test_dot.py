"""Graphviz diagrams: structure of the DOT text, escaping, folding, size warnings, real rendering."""

from __future__ import annotations

import json
import shutil
import subprocess
import warnings

import pytest
import torch
from _dot_helpers import (
    IRBuilder,
    coolcnn_ir,
    encoder_decoder_ir,
    label_text,
    loop_ir,
    parse_dot,
    residual_ir,
    shared_ir,
)

import torchatlas
from torchatlas._ir import GraphIR
from torchatlas._ops import CATEGORIES, LEGEND, category
from torchatlas._render import _dot
from torchatlas._render._dot import DotOptions, diagram_size, image_format, render, to_dot
from torchatlas._render._graphviz import GraphvizNotFoundError
from torchatlas._render._tree import render_tree
from torchatlas._view import PALETTES, build_layout

# pydot's parser calls pyparsing names that newer pyparsing deprecates
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

needs_dot = pytest.mark.skipif(
    shutil.which("dot") is None, reason="Graphviz 'dot' is not installed (apt-get install graphviz)"
)


def render_to_file(ir: GraphIR, path, options: DotOptions | None = None):
    """What ``Graph.render(path)`` does: the format from the suffix, then the drawing."""
    path.write_bytes(render(ir, options, image_format(path)))
    return path


def diagram(ir: GraphIR, **options):
    return parse_dot(to_dot(ir, DotOptions(**options)))


# -- structure -------------------------------------------------------------------


def test_coolcnn_paths_branch_from_the_input_and_join_at_the_add():
    d = diagram(coolcnn_ir())
    x, add = d.find("args[0]"), d.find("add (+)")
    initial, parallel = d.find("initial_conv (Conv2d)"), d.find("parallel_conv (Conv2d)")
    assert set(d.succs(x)) == {initial, parallel}
    main_pool, side_pool = d.find("max_pool (MaxPool2d)"), d.find("max_pool#1 (MaxPool2d)")
    assert set(d.preds(add)) == {main_pool, side_pool}
    # each branch is its own chain conv -> relu -> pool
    for conv, pool in ((initial, main_pool), (parallel, side_pool)):
        (relu,) = d.succs(conv)
        assert d.label(relu) == "relu" and d.succs(relu) == [pool]
    # leaf modules are single boxes by default: no clusters, no conv2d op nodes, no params
    assert d.clusters == {}
    assert not [n for n in d.nodes if d.label(n) == "conv2d"]
    assert not [n for n in d.nodes if "weight" in d.label(n)]
    chain = [d.label(n).split("\n")[0] for n in d.nodes]
    assert chain[-1] == "output" and len(d.edges) == 17


def test_collapsed_boxes_show_in_and_out_shapes_and_parameter_count():
    d = diagram(coolcnn_ir())
    box = d.label(d.find("initial_conv (Conv2d)"))
    assert "1×3×32×32 → 1×16×32×32" in box and "448 params" in box
    fc = d.label(d.find("fully_connected1 (Linear)"))
    assert "262.1K params" in fc  # 2048*128 weight only in this hand-built graph


def test_edges_carry_shapes_and_dtype_only_where_it_differs():
    d = diagram(loop_ir(2, mark_repeats=False), expand_leaf_modules=True)
    first_line = {n: d.label(n).split("\n")[0] for n in d.nodes}
    labels = {(first_line[s], first_line[t]): label_text(a.get("label")).strip() for s, t, a in d.edges}
    assert labels[("args[0]", "linear")] == "2×8"
    assert labels[("mask", "masked_fill")] == "2×8 bool"


def test_expanded_leaf_modules_are_clusters_labelled_with_path_and_class():
    d = diagram(coolcnn_ir(), expand_leaf_modules=True)
    labels = {d.cluster_label(c) for c in d.clusters}
    assert {"initial_conv (Conv2d)", "max_pool#2 (MaxPool2d)", "output_layer (Linear)"} <= labels
    (initial,) = [c for c in d.clusters if d.cluster_label(c) == "initial_conv (Conv2d)"]
    in_initial = [n for n, a in d.nodes.items() if a["cluster"] == initial]
    assert [d.label(n) for n in in_initial] == ["conv2d"]


def test_residual_block_nests_clusters_and_keeps_the_skip_edge():
    d = diagram(residual_ir(), expand_leaf_modules=True)
    block = next(c for c in d.clusters if d.cluster_label(c) == "block (BasicBlock)")
    conv1 = next(c for c in d.clusters if d.cluster_label(c) == "conv1 (Conv2d)")
    assert d.clusters[conv1]["parent"] == block and d.clusters[block]["parent"] is None
    add = d.find("add (+=)")  # the op's one title, as the tree writes it
    assert d.nodes[add]["cluster"] == block and d.label(add) == "add (+=)\nin-place"
    x = d.find("args[0]")
    bn2 = next(n for n in d.preds(add) if n != x)
    assert x in d.preds(add) and d.label(bn2) == "batch_norm"
    assert d.nodes[add].get("penwidth") == "2"  # in-place writes are drawn bold


def test_residual_block_collapsed_at_depth_one():
    d = diagram(residual_ir(), depth=1)
    assert d.clusters == {}
    block = d.find("block (BasicBlock)")
    assert d.preds(block) == [d.find("args[0]")] and d.succs(block) == [d.find("output")]


def test_depth_zero_draws_the_model_as_one_box_between_inputs_and_outputs():
    d = diagram(coolcnn_ir(), depth=0)
    assert len(d.nodes) == 3
    model = d.find("CoolCNN (CoolCNN)")
    assert "1×3×32×32 → 1×10" in d.label(model) and "params" in d.label(model)


def test_shared_module_calls_are_separate_boxes_in_order():
    d = diagram(shared_ir())
    first, second = d.find("fc (Linear)"), d.find("fc#1 (Linear)")
    assert d.succs(d.find("args[0]")) == [first]
    assert d.succs(first) == [second] and d.succs(second) == [d.find("output")]


def test_fold_repeats_draws_a_run_as_its_first_member_as_the_tree_does():
    ir = loop_ir(4)
    d = diagram(ir)  # folded by default, as the tree and the summary
    [cluster] = d.clusters
    assert d.cluster_label(cluster) == "layers.0–3 (Block) ×4"
    assert "layers.0–3 (Block) ×4" in render_tree(ir)
    inside = [d.label(n).split("\n")[0] for n, a in d.nodes.items() if a.get("cluster") == cluster]
    assert inside == ["fc (Linear)", "gelu", "masked_fill"]  # the first member's body, once
    fc, fill = d.find("fc (Linear)"), d.find("masked_fill")
    assert d.preds(fc) == [d.find("args[0]")] and d.succs(fill) == [d.find("output")]  # the last member's output
    assert d.preds(fill) == [d.find("gelu"), d.find("mask")] and not [n for n in d.nodes if n.startswith("ref_")]


def test_a_fold_below_depth_is_one_box():
    ir = loop_ir(4)
    d = diagram(ir, depth=1)
    fold = d.find("layers.0–3 (Block) ×4")
    assert d.preds(fold) == [d.find("args[0]"), d.find("mask")]
    assert d.succs(fold) == [d.find("output")]
    assert d.nodes[fold].get("peripheries") == "2"
    assert "4 ×" not in d.label(fold) and "256 params" in d.label(fold)  # 4 blocks × 8×8 weights
    assert not d.clusters and not [n for n in d.nodes if d.label(n) in ("gelu", "masked_fill")]


def test_without_fold_each_block_is_a_cluster():
    d = diagram(loop_ir(4), fold_repeats=False)
    assert sorted(d.cluster_label(c) for c in d.clusters) == [f"layers.{i} (Block)" for i in range(4)]
    assert len([n for n in d.nodes if d.label(n) == "gelu"]) == 4


def test_fold_ignores_broken_runs():
    ir = loop_ir(3)
    layer1 = next(s for s in ir.scopes if s.path == "layers.1")
    layer1.meta["repeat"]["group"] = "other"  # no longer matches layers.0
    d = diagram(ir, fold_repeats=True)
    assert not [n for n in d.nodes if "×" in d.label(n).split("\n")[0]]


def test_show_params_draws_parameters_with_dashed_edges():
    d = diagram(coolcnn_ir(), show_params=True, expand_leaf_modules=True)
    weight = next(n for n in d.nodes if d.label(n).startswith("weight\n16×3×3×3"))
    (conv,) = d.succs(weight)
    assert d.label(conv) == "conv2d"
    edge = next(a for s, t, a in d.edges if s == weight)
    assert edge["style"] == "dashed"


def test_show_tensors_puts_a_node_on_every_edge():
    d = diagram(shared_ir(), show_tensors=True)
    first = d.find("fc (Linear)")
    (tensor,) = d.succs(first)
    assert d.label(tensor) == "1×4" and d.succs(tensor) == [d.find("fc#1 (Linear)")]
    assert diagram_size(shared_ir(), DotOptions(show_tensors=True)) == len(d.nodes) + len(d.edges)
    # a tensor read twice is one node with one edge in and two out
    d = diagram(coolcnn_ir(), show_tensors=True)
    (x_tensor,) = d.succs(d.find("args[0]"))
    assert len(d.preds(x_tensor)) == 1 and len(d.succs(x_tensor)) == 2
    assert len(set((s, t) for s, t, _ in d.edges)) == len(d.edges)
    assert diagram_size(coolcnn_ir(), DotOptions(show_tensors=True)) == len(d.nodes) + len(d.edges)
    looped = diagram(loop_ir(4), show_tensors=True)  # with ↪ boxes
    assert diagram_size(loop_ir(4), DotOptions(show_tensors=True)) == len(looped.nodes) + len(looped.edges)


def test_direction_theme_and_legend():
    d = diagram(coolcnn_ir(), direction="LR", theme="dark")
    assert d.graph["rankdir"] == "LR" and d.graph["bgcolor"].strip('"') == PALETTES["dark"].background
    legend = label_text(d.graph["label"])
    assert "CoolCNN" in legend and "compute" in legend and "reduction" in legend
    assert "normalization" not in legend  # only categories that appear
    assert "label" not in diagram(coolcnn_ir(), legend=False).graph


def test_options_are_validated():
    for bad in ({"depth": -1}, {"direction": "BT"}, {"theme": "pink"}):
        with pytest.raises(ValueError):
            DotOptions(**bad)


def test_output_is_deterministic_and_survives_a_json_round_trip():
    ir = coolcnn_ir()
    text = to_dot(ir, DotOptions(expand_leaf_modules=True, show_params=True))
    again = GraphIR.from_dict(json.loads(ir.to_json()))
    assert to_dot(again, DotOptions(expand_leaf_modules=True, show_params=True)) == text


HOSTILE = 'evil"] ; x -> y [label="pwn\\" {braces} <b>html</b> & \\ back\nslash\x00\u202e'


def hostile_ir() -> GraphIR:
    b = IRBuilder(f"tests.{HOSTILE}")
    x = b.input(f"kwargs['{HOSTILE}']", (1, "s<0>"))
    block = b.scope(HOSTILE, f"mod.{HOSTILE}")
    inner = b.scope(f"{HOSTILE}.inner", "torch.nn.modules.linear.Linear", block)
    y = b.op(f"torch.{HOSTILE}", [x], (1, 2), inner)
    b.output(b.op("torch.relu", [y], (1, 2), block), path=f"output['{HOSTILE}']")
    return b.build()


@pytest.mark.parametrize("options", [{}, {"expand_leaf_modules": True, "show_tensors": True}])
def test_hostile_names_stay_inside_their_labels(options):
    d = diagram(hostile_ir(), **options)
    visible = HOSTILE.replace("\n", "\\n").replace("\x00", "\\x00").replace("\u202e", "\\u202e")
    texts = [d.label(n) for n in d.nodes] + [d.cluster_label(c) for c in d.clusters]
    assert any(visible[:40] in t for t in texts)
    assert {"x", "y"}.isdisjoint(d.nodes)  # nothing escaped into DOT statements
    assert len(d.edges) == (6 if options else 3)


@needs_dot
@pytest.mark.graphviz
def test_hostile_names_render():
    svg = render(hostile_ir(), DotOptions(expand_leaf_modules=True), "svg").decode()
    assert "&lt;b&gt;html&lt;/b&gt;" in svg and "<b>html" not in svg


# -- size ------------------------------------------------------------------------------


def chain_ir(blocks: int, ops_per_block: int) -> GraphIR:
    b = IRBuilder("tests.Deep")
    x = b.input("args[0]", (1, 4))
    for i in range(blocks):
        sid = b.scope(f"blocks.{i}", "tests.Block")
        for _ in range(ops_per_block):
            x = b.op("torch.relu", [x], (1, 4), sid)
    b.output(x)
    return b.build()


def test_big_diagrams_warn_with_a_depth_that_fits(monkeypatch):
    ir = chain_ir(40, 80)
    assert diagram_size(ir) > _dot.MAX_DOT_ELEMENTS
    monkeypatch.setattr(_dot, "run_dot", lambda source, fmt: b"drawn")
    with pytest.warns(RuntimeWarning) as caught:
        assert render(ir, DotOptions(), "svg") == b"drawn"
    assert [str(w.message) for w in caught] == [
        f"this diagram has {diagram_size(ir)} nodes and edges; Graphviz may take minutes to lay it out "
        "(about 4000 take ~30 s). Draw fewer with depth=1 (--depth 1 on the command line)."
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        render(ir, DotOptions(depth=1), "svg")


def dense_ir(blocks: int, ops_per_block: int) -> GraphIR:
    """A chain of blocks each of which also reads the model's input: far reads (DenseNet's kind)."""
    b = IRBuilder("tests.Dense")
    first = x = b.input("args[0]", (1, 4))
    for i in range(blocks):
        sid = b.scope(f"blocks.{i}", "tests.Block")
        x = b.op("torch.add", [x, first], (1, 4), sid)
        for _ in range(ops_per_block):
            x = b.op("torch.relu", [x], (1, 4), sid)
    b.output(x)
    return b.build()


def test_a_big_diagram_with_dense_reads_warns_once_that_they_are_stand_ins(monkeypatch):
    ir = dense_ir(40, 60)
    stand_ins = sum(1 for u in build_layout(ir, DotOptions()).units.values() if u.kind == "ref")
    assert stand_ins >= 30
    monkeypatch.setattr(_dot, "run_dot", lambda source, fmt: b"drawn")
    with pytest.warns(RuntimeWarning) as caught:
        render(ir, DotOptions(fold_repeats=False), "svg")
    [message] = [str(w.message) for w in caught]
    assert "Draw fewer with depth=1 (--depth 1 on the command line)" in message
    assert message.endswith(f"already drawn as ↪ stand-ins ({stand_ins} of them), not long edges.")


def test_dot_format_needs_no_binary(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert render(shared_ir(), None, "dot").decode() == to_dot(shared_ir())
    out = render_to_file(shared_ir(), tmp_path / "g.gv")
    assert out.read_text().startswith("digraph")
    with pytest.raises(GraphvizNotFoundError, match="apt-get install graphviz"):
        render(shared_ir(), None, "png")
    with pytest.raises(ValueError, match="format"):
        render_to_file(shared_ir(), tmp_path / "g.bmp")


# -- categories ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "kind", "expected"),
    [
        ("torch.conv2d", "op", "compute"),
        ("torch.nn.functional.scaled_dot_product_attention", "op", "compute"),
        ("torch.Tensor.__matmul__", "op", "compute"),
        ("torch.Tensor.__iadd__", "op", "elementwise"),
        ("torch.relu_", "op", "elementwise"),
        ("torch.Tensor.__getitem__", "op", "shape"),
        ("torch.Tensor.permute", "op", "shape"),
        ("torch.softmax", "op", "reduction"),
        ("torch.nn.functional.layer_norm", "op", "normalization"),
        ("torch.arange", "op", "other"),
        (None, "input", "io"),
        (None, "buffer", "param"),
    ],
)
def test_category(target, kind, expected):
    assert category(target, kind) == expected


def test_every_category_has_colours_and_a_legend_entry():
    assert [c for c, _ in LEGEND] == list(CATEGORIES)
    for palette in PALETTES.values():
        assert set(palette.fill) == set(palette.border) == set(CATEGORIES)


# -- real rendering ----------------------------------------------------------------------


def _layout_json(ir: GraphIR, **options) -> dict:
    source = to_dot(ir, DotOptions(**options)).encode()
    return json.loads(subprocess.run(["dot", "-Tjson"], input=source, capture_output=True, check=True).stdout)


@needs_dot
@pytest.mark.graphviz
def test_coolcnn_branches_are_drawn_side_by_side(tmp_path):
    laid = _layout_json(coolcnn_ir())
    pos = {o["name"]: tuple(map(float, o["pos"].split(","))) for o in laid["objects"] if "pos" in o}
    (x1, y1), (x2, y2) = pos["s1"], pos["s3"]
    assert abs(y1 - y2) < 1 and abs(x1 - x2) > 50  # same rank, different columns
    assert pos["s1"][0] < pos["s3"][0]  # main path on the left, as in the code


@needs_dot
@pytest.mark.graphviz
def test_renders_svg_png_and_pdf_files(tmp_path):
    ir = residual_ir()
    svg = render_to_file(ir, tmp_path / "g.svg", DotOptions(expand_leaf_modules=True))
    png = render_to_file(ir, tmp_path / "g.png")
    pdf = render_to_file(ir, tmp_path / "g.pdf")
    assert svg.read_text().lstrip().startswith("<?xml") and "conv1" in svg.read_text()
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert pdf.read_bytes()[:5] == b"%PDF-"


# -- values read by many module calls ---------------------------------------------------


def test_a_value_read_in_many_calls_gets_reference_boxes_instead_of_long_edges():
    d = diagram(loop_ir(4), fold_repeats=False)
    mask = d.find("mask")
    (first,) = d.succs(mask)
    assert d.cluster_label(d.nodes[first]["cluster"]) == "layers.0 (Block)"
    refs = [n for n in d.nodes if d.label(n).startswith("↪ mask")]
    assert [d.cluster_label(d.nodes[r]["cluster"]) for r in refs] == [f"layers.{i} (Block)" for i in (1, 2, 3)]
    for ref in refs:
        (reader,) = d.succs(ref)
        assert d.label(reader) == "masked_fill" and d.nodes[reader]["cluster"] == d.nodes[ref]["cluster"]
    # two readers are drawn as plain edges
    assert not [n for n in diagram(loop_ir(2), fold_repeats=False).nodes if n.startswith("ref_")]


def test_a_value_read_by_repeated_layers_inside_one_call_gets_reference_boxes():
    # The encoder's output is read in one call below the model (the decoder), but by every
    # one of its layers: it keeps a real edge to the first layer only.
    d = diagram(encoder_decoder_ir(4), fold_repeats=False)
    (first,) = d.succs(d.find("fc (Linear)"))
    assert d.cluster_label(d.nodes[first]["cluster"]) == "layers.0 (Layer)"
    refs = [n for n in d.nodes if d.label(n).startswith("↪ encoder.fc")]
    assert [d.cluster_label(d.nodes[r]["cluster"]) for r in refs] == [f"layers.{i} (Layer)" for i in (1, 2, 3)]
    # the same readers in layers that are not repeats of one layer keep their edges, but
    # for a read after three layers ran in between: far, a stand-in (_view._far)
    plain = encoder_decoder_ir(4)
    for s in plain.scopes:
        s.meta.pop("repeat", None)
    d = diagram(plain, fold_repeats=False)
    refs = [n for n in d.nodes if n.startswith("ref_")]
    assert [d.cluster_label(d.nodes[r]["cluster"]) for r in refs] == ["layers.3 (Layer)"]


def test_each_cluster_is_pinned_below_the_last_value_it_reads_from_outside():
    # Layer 1's k reads the encoder's output, made long before: dot would rank it (and with it
    # the top of layer 1's cluster) beside layer 0, and the layers would stand in a staircase.
    d = diagram(encoder_decoder_ir(2), fold_repeats=False)

    def in_layer(i: int, label: str) -> str:
        return next(
            n for n, a in d.nodes.items()
            if d.label(n).split("\n")[0] == label and d.cluster_label(a["cluster"]) == f"layers.{i} (Layer)"
        )

    add0, k1, q1 = in_layer(0, "add (+)"), in_layer(1, "k (Linear)"), in_layer(1, "q (Linear)")
    assert (add0, k1) in d.pins  # held below layer 0's output, the last value layer 1 reads
    assert (add0, q1) not in d.pins and add0 in d.preds(q1)  # a real edge already holds q
    assert not [p for p in d.pins if p[1] == d.find("fc (Linear)")]  # the encoder reads only the input


@needs_dot
@pytest.mark.graphviz
def test_repeated_layers_stack_one_under_the_other():
    laid = _layout_json(encoder_decoder_ir(2), fold_repeats=False)
    boxes = {o["label"]: tuple(map(float, o["bb"].split(","))) for o in laid["objects"] if "bb" in o and "label" in o}
    (_, low0, _, high0), (_, low1, _, high1) = (
        next(bb for label, bb in boxes.items() if f"<B>layers.{i}</B>" in label) for i in (0, 1)
    )
    assert high1 < low0  # layer 1's box lies wholly below layer 0's (y grows upwards in dot)


# -- real captures -----------------------------------------------------------------------


def test_real_coolcnn_capture_draws_the_two_branches():
    torch = pytest.importorskip("torch")
    from _capture_helpers import load_coolcnn

    import torchatlas

    model = load_coolcnn().CoolCNN()
    d = parse_dot(to_dot(torchatlas.trace(model, (torch.randn(1, 3, 32, 32),)).ir))
    add = d.find("add (+)")
    assert {d.label(p).split("\n")[0] for p in d.preds(add)} == {"max_pool (MaxPool2d)", "max_pool#1 (MaxPool2d)"}
    assert set(d.succs(d.find("x"))) == {d.find("initial_conv (Conv2d)"), d.find("parallel_conv (Conv2d)")}


def test_real_capture_folds_a_module_list_with_find_repeats():
    torch = pytest.importorskip("torch")
    import torchatlas

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = torch.nn.ModuleList(
                torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU()) for _ in range(5)
            )
            self.head = torch.nn.Linear(8, 2)

        def forward(self, x):
            for block in self.blocks:
                x = block(x)
            return self.head(x)

    ir = torchatlas.trace(Net(), (torch.randn(3, 8),)).ir
    d = parse_dot(to_dot(ir, DotOptions(depth=1)))
    fold = d.find("blocks.0–4 (Sequential) ×5")
    assert d.succs(d.find("x")) == [fold] and d.succs(fold) == [d.find("head (Linear)")]
    assert "360 params" in d.label(fold)  # 5 × (64 + 8)


def test_unused_ops_are_dashed_and_say_so() -> None:
    class Unused(torch.nn.Module):
        def forward(self, x):
            mask = torch.arange(4) > 1  # noqa: F841 - nothing reads it
            return x.relu()

    dot = torchatlas.trace(Unused(), torch.randn(2, 4)).to_dot()
    lines = {name: line for line in dot.splitlines() for name in ("arange", "gt (&gt;)", "relu") if f">{name}<" in line or f"{name}<BR/>" in line}
    assert 'style="rounded,filled,dashed"' in lines["arange"] and "unused" in lines["arange"]
    assert "dashed" not in lines["relu"] and "unused" not in lines["relu"]
