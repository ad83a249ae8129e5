"""Model Explorer export, loaded back through the ai-edge-model-explorer package's own types."""

from __future__ import annotations

import json
import re

import pytest
import torch
import transformers
from _capture_helpers import load_coolcnn

import torchatlas
from torchatlas._render._model_explorer import to_model_explorer

graph_builder = pytest.importorskip("model_explorer.graph_builder", reason="pip install ai-edge-model-explorer")
dacite = pytest.importorskip("dacite")
from model_explorer.utils import convert_adapter_response, remove_none  # noqa: E402


def load_collection(doc: dict) -> graph_builder.GraphCollection:
    """What Model Explorer's server does with a graph collection: typed dataclasses, strictly checked."""
    return dacite.from_dict(graph_builder.GraphCollection, json.loads(json.dumps(doc)), config=dacite.Config(strict=True))


@pytest.fixture(scope="module")
def coolcnn_doc() -> dict:
    coolcnn = load_coolcnn()
    return to_model_explorer(torchatlas.trace(coolcnn.CoolCNN(), coolcnn.example_input()).ir)


def test_collection_loads_and_round_trips(coolcnn_doc: dict) -> None:
    collection = load_collection(coolcnn_doc)
    assert collection.label == "CoolCNN"
    served = convert_adapter_response({"graphCollections": [collection]})
    served_collection = remove_none(served["graphCollections"][0])
    served_collection.pop("graphSorting")  # a viewer default the loader fills in
    assert served_collection == remove_none(coolcnn_doc)


def test_namespaces_follow_module_calls_and_edges_resolve(coolcnn_doc: dict) -> None:
    graph = load_collection(coolcnn_doc).graphs[0]
    ids = {n.id for n in graph.nodes}
    for node in graph.nodes:
        for edge in node.incomingEdges:
            assert edge.sourceNodeId in ids
    convs = [n for n in graph.nodes if n.label == "conv2d"]
    assert [n.namespace for n in convs] == ["initial_conv", "parallel_conv", "secondary_conv"]
    pools = sorted({n.namespace for n in graph.nodes if n.label == "max_pool2d"})
    assert pools == ["max_pool", "max_pool#1", "max_pool#2"]
    attrs = {kv.key: kv.value for kv in convs[0].attrs}
    assert attrs["target"] == "torch.conv2d" and attrs["module_class"].endswith("Conv2d")
    assert re.search(r"\.py:\d+$", attrs["source"]) and "self.initial_conv(x)" in attrs["code"]
    assert int(attrs["flops"]) > 0
    shape = {kv.key: kv.value for kv in convs[0].outputsMetadata[0].attrs}["tensor_shape"]
    assert shape == "float32[1, 16, 32, 32]"
    add = next(n for n in graph.nodes if n.label == "add (+)")  # as the tree and diagram title it
    sources = {e.sourceNodeId for e in add.incomingEdges}
    assert {next(n for n in graph.nodes if n.id == s).namespace for s in sources} == {"max_pool", "max_pool#1"}
    group = coolcnn_doc["graphs"][0]["groupNodeAttributes"]["initial_conv"]
    assert group["class"].endswith("Conv2d") and int(group["params"]) == 3 * 16 * 9 + 16


def test_transformer_namespaces_nest_and_slashes_cannot_split_a_level() -> None:
    cfg = transformers.AutoConfig.for_model(
        "llama", num_hidden_layers=2, hidden_size=32, intermediate_size=64,
        num_attention_heads=4, num_key_value_heads=4, vocab_size=100,
    )
    torch.manual_seed(0)
    model = transformers.AutoModel.from_config(cfg).eval()
    graph = torchatlas.trace(model, (), kwargs={"input_ids": torch.randint(0, 100, (1, 5))})
    doc = to_model_explorer(graph.ir)
    namespaces = {n.namespace for n in load_collection(doc).graphs[0].nodes}
    assert "layers.1/self_attn/q_proj" in namespaces
    renamed = graph.ir.with_meta()
    renamed.scopes[1].path = "a/b"
    assert all(ns.count("/") <= 3 for ns in {n["namespace"] for n in to_model_explorer(renamed)["graphs"][0]["nodes"]})
    assert any("a∕b" in n["namespace"] for n in to_model_explorer(renamed)["graphs"][0]["nodes"])


def test_top_level_is_the_graph_and_broadcast_values_get_stand_ins() -> None:
    config = transformers.LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=50,
    )
    torch.manual_seed(0)
    graph = torchatlas.trace(transformers.LlamaModel(config).eval(), torch.randint(0, 50, (1, 6)))
    doc = to_model_explorer(graph.ir)
    nodes = load_collection(doc).graphs[0].nodes
    by_id = {n.id: n for n in nodes}
    top = {n.namespace.split("/")[0] for n in nodes}
    assert {"embed_tokens", "rotary_emb", "layers.0", "layers.3", "norm"} <= top  # no group around everything
    rotary = {n.id for n in nodes if n.namespace.startswith("rotary_emb")}
    # real edges from the rotary embedding reach the first layer only; the others read stand-ins
    reached = {
        by_id[n.id].namespace.split("/")[0]
        for n in nodes
        for e in n.incomingEdges
        if e.sourceNodeId in rotary and not n.namespace.startswith("rotary_emb")
    }
    assert reached == {"layers.0"}
    stand_ins = [n for n in nodes if n.label.startswith("↪ ")]
    assert {n.namespace for n in stand_ins} == {"layers.1", "layers.2", "layers.3"}
    assert all(n.incomingEdges == [] for n in stand_ins)
    refers = {a.value for n in stand_ins for a in n.attrs if a.key == "refers_to"}
    assert refers <= rotary and len(refers) == 2  # cos and sin


def test_op_arguments_are_attributes(coolcnn_doc: dict) -> None:
    nodes = load_collection(coolcnn_doc).graphs[0].nodes
    args = {n.label: next(a.value for a in n.attrs if a.key == "arguments") for n in nodes if n.id.startswith("n")
            and any(a.key == "arguments" for a in n.attrs)}
    assert args["view"] == "(%0, -1, 2048)"  # the view's shape, as written
    assert args["max_pool2d"].startswith("(%0, 2, stride=2")
    assert args["conv2d"] == "(%0, %1, %2, [1, 1], [1, 1], [1, 1], 1)"


def test_its_options_are_the_view_options_and_hide_what_every_output_hides() -> None:
    from torchatlas._render import ModelExplorerOptions
    from torchatlas._view import ViewOptions

    coolcnn = load_coolcnn()
    graph = torchatlas.trace(coolcnn.CoolCNN(), coolcnn.example_input())
    assert issubclass(ModelExplorerOptions, ViewOptions)
    plain = load_collection(graph.to_model_explorer()).graphs[0]
    assert {kv.value for n in plain.nodes for kv in n.attrs if kv.key == "kind"} == {"input", "op", "output"}
    with_params = load_collection(graph.to_model_explorer(show_params=True, title="cnn"))
    weights = [n for n in with_params.graphs[0].nodes if n.label == "weight" and n.namespace == "initial_conv"]
    assert with_params.label == "cnn" and len(weights) == 1
    conv = next(n for n in with_params.graphs[0].nodes if n.label == "conv2d" and n.namespace == "initial_conv")
    assert weights[0].id in {e.sourceNodeId for e in conv.incomingEdges}
    for refused in ({"depth": 2}, {"fold_repeats": True}, {"expand_leaf_modules": True}, {"direction": "LR"}):
        with pytest.raises(ValueError, match=r"^ModelExplorerOptions cannot honour \w+=.*: Model Explorer [^\n]+$"):
            graph.to_model_explorer(**refused)


def test_a_stand_in_is_named_as_the_diagrams_and_the_pages() -> None:
    config = transformers.AutoConfig.for_model(
        "t5", num_layers=4, num_decoder_layers=4, d_model=32, d_ff=64, num_heads=2, d_kv=16, vocab_size=100
    )
    torch.manual_seed(0)
    ids = torch.randint(0, 100, (1, 8))
    graph = torchatlas.trace(transformers.T5Model(config).eval(), kwargs={"input_ids": ids, "decoder_input_ids": ids[:, :4]})
    labels = [n["label"] for n in graph.to_model_explorer()["graphs"][0]["nodes"] if n["label"].startswith("↪ ")]
    # the encoder's output, read in the decoder: named where it comes from (``_view.far_name``), as
    # the diagram's and the page's stand-ins; never the encoder's own `hidden_states`, which means
    # the decoder's state there
    assert labels and set(labels) == {"↪ encoder.dropout#1"}
    assert "↪ encoder.dropout#1" in graph.to_dot()
    assert "decoder (T5Stack)  (1×4 int64, 1×8×32) → 1×4×32  ← decoder_input_ids, encoder_hidden_states" in graph.tree()
