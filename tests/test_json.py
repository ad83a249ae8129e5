"""The JSON document of a real capture: structure, wiring, round trip and malformed files."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn as nn
from _capture_helpers import load_coolcnn

import torchatlas

COOLCNN_SCOPES = [  # (path, class, call, parent path)
    ("", "torchatlas._example.CoolCNN", 0, None),
    ("initial_conv", "torch.nn.modules.conv.Conv2d", 0, ""),
    ("max_pool", "torch.nn.modules.pooling.MaxPool2d", 0, ""),
    ("parallel_conv", "torch.nn.modules.conv.Conv2d", 0, ""),
    ("max_pool", "torch.nn.modules.pooling.MaxPool2d", 1, ""),
    ("secondary_conv", "torch.nn.modules.conv.Conv2d", 0, ""),
    ("max_pool", "torch.nn.modules.pooling.MaxPool2d", 2, ""),
    ("fully_connected1", "torch.nn.modules.linear.Linear", 0, ""),
    ("output_layer", "torch.nn.modules.linear.Linear", 0, ""),
]

# (kind, target or path, scope path) for each node, in execution order
COOLCNN_NODES = [
    ("input", "args[0]", ""),
    ("param", "initial_conv.weight", "initial_conv"),
    ("param", "initial_conv.bias", "initial_conv"),
    ("op", "torch.conv2d", "initial_conv"),
    ("op", "torch.relu", ""),
    ("op", "torch.nn.functional.max_pool2d", "max_pool"),
    ("param", "parallel_conv.weight", "parallel_conv"),
    ("param", "parallel_conv.bias", "parallel_conv"),
    ("op", "torch.conv2d", "parallel_conv"),
    ("op", "torch.relu", ""),
    ("op", "torch.nn.functional.max_pool2d", "max_pool"),
    ("op", "torch.Tensor.__add__", ""),
    ("op", "torch.Tensor.__truediv__", ""),
    ("param", "secondary_conv.weight", "secondary_conv"),
    ("param", "secondary_conv.bias", "secondary_conv"),
    ("op", "torch.conv2d", "secondary_conv"),
    ("op", "torch.relu", ""),
    ("op", "torch.nn.functional.max_pool2d", "max_pool"),
    ("op", "torch.Tensor.view", ""),
    ("param", "fully_connected1.weight", "fully_connected1"),
    ("param", "fully_connected1.bias", "fully_connected1"),
    ("op", "torch.nn.functional.linear", "fully_connected1"),
    ("op", "torch.relu", ""),
    ("param", "output_layer.weight", "output_layer"),
    ("param", "output_layer.bias", "output_layer"),
    ("op", "torch.nn.functional.linear", "output_layer"),
    ("output", "output", ""),
]

# (producer index, consumer index, argument position) over COOLCNN_NODES
COOLCNN_EDGES = sorted(
    [
        (0, 3, 0), (1, 3, 1), (2, 3, 2), (3, 4, 0), (4, 5, 0),
        (0, 8, 0), (6, 8, 1), (7, 8, 2), (8, 9, 0), (9, 10, 0),
        (5, 11, 0), (10, 11, 1), (11, 12, 0),
        (12, 15, 0), (13, 15, 1), (14, 15, 2), (15, 16, 0), (16, 17, 0), (17, 18, 0),
        (18, 21, 0), (19, 21, 1), (20, 21, 2), (21, 22, 0),
        (22, 25, 0), (23, 25, 1), (24, 25, 2), (25, 26, 0),
    ]
)


@pytest.fixture(scope="module")
def doc() -> dict:
    coolcnn = load_coolcnn()
    graph = torchatlas.trace(coolcnn.CoolCNN(), coolcnn.example_input())
    return json.loads(graph.to_json())


def test_header_and_meta(doc: dict) -> None:
    assert doc["format"] == "torchatlas-graph" and doc["version"] == 1
    meta = doc["meta"]
    assert meta["model"] == "torchatlas._example.CoolCNN"
    assert meta["level"] == "python"
    assert meta["torch"] == torch.__version__
    params = {p["path"]: p for p in meta["parameters"]}
    assert params["initial_conv.weight"] == {
        "path": "initial_conv.weight", "shape": [16, 3, 3, 3], "dtype": "float32",
        "requires_grad": True, "shared_with": [],
    }
    assert len(params) == 10 and meta["buffers"] == []


def test_scopes(doc: dict) -> None:
    by_id = {s["id"]: s for s in doc["scopes"]}
    got = [
        (s["path"], s["class"], s["call"], None if s["parent"] is None else by_id[s["parent"]]["path"])
        for s in doc["scopes"]
    ]
    assert got == COOLCNN_SCOPES
    assert [s["id"] for s in doc["scopes"]] == [f"s{i}" for i in range(len(COOLCNN_SCOPES))]


def test_nodes_and_wiring(doc: dict) -> None:
    scope_path = {s["id"]: s["path"] for s in doc["scopes"]}
    got = [(n["kind"], n.get("target") or n.get("path"), scope_path[n["scope"]]) for n in doc["nodes"]]
    assert got == COOLCNN_NODES
    index = {n["id"]: k for k, n in enumerate(doc["nodes"])}
    edges = sorted((index[i], k, pos) for k, n in enumerate(doc["nodes"]) for pos, i in enumerate(n["inputs"]))
    assert edges == COOLCNN_EDGES
    assert all(n["input_slots"] == [0] * len(n["inputs"]) for n in doc["nodes"])


def test_scope_outputs_point_at_the_returned_values(doc: dict) -> None:
    by_id = {n["id"]: n for n in doc["nodes"]}
    for scope in doc["scopes"][1:]:
        [out] = scope["outputs"]
        assert by_id[out]["scope"] == scope["id"], scope["path"]
    assert doc["scopes"][0]["outputs"] == [doc["nodes"][25]["id"]]


def test_op_arguments_are_encoded(doc: dict) -> None:
    conv = doc["nodes"][3]
    assert conv["args"] == [{"tensor": 0}, {"tensor": 1}, {"tensor": 2}, [1, 1], [1, 1], [1, 1], 1]
    view = doc["nodes"][18]
    assert view["args"] == [{"tensor": 0}, -1, 2048]
    assert view["outputs"] == [{"shape": [1, 2048], "dtype": "float32", "device": "cpu"}]
    assert view["source"]["code"] == "x = x.view(-1, 32 * 8 * 8)"
    assert view["source"]["file"].endswith(("coolcnn.py", "_example.py"))
    assert doc["nodes"][5]["name"] == "main_path" and doc["nodes"][10]["name"] == "parallel_path"


def test_save_and_load_round_trip(tmp_path) -> None:
    coolcnn = load_coolcnn()
    graph = torchatlas.trace(coolcnn.CoolCNN(), coolcnn.example_input())
    path = tmp_path / "g.json"
    graph.save(path)
    loaded = torchatlas.load(path)
    assert loaded.to_dict() == graph.to_dict()
    assert loaded.tree(ascii=False) == graph.tree(ascii=False)


def test_same_model_and_input_give_the_same_document() -> None:
    coolcnn = load_coolcnn()
    model, x = coolcnn.CoolCNN(), coolcnn.example_input()
    assert torchatlas.trace(model, x).to_json() == torchatlas.trace(model, x).to_json()


class Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(2, 2)
        self.b = nn.Linear(2, 2)
        self.b.weight = self.a.weight
        self.register_buffer("scale", torch.ones(2))

    def forward(self, x):
        return self.b(self.a(x)) * self.scale


def test_parameter_table_lists_shared_parameters_once() -> None:
    meta = torchatlas.trace(Tied(), torch.randn(1, 2)).ir.meta
    params = {p["path"]: p["shared_with"] for p in meta["parameters"]}
    assert params == {"a.weight": ["b.weight"], "a.bias": [], "b.bias": []}
    assert [b["path"] for b in meta["buffers"]] == ["scale"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"format": "torchatlas-graph", "version": 1, "scopes": [', "not valid JSON"),
        ('{"format": "other", "version": 1, "scopes": [], "nodes": []}', "not a torchatlas graph"),
        ('{"format": "torchatlas-graph", "version": 99, "scopes": [], "nodes": []}', "version 99"),
        (
            '{"format": "torchatlas-graph", "version": 1, "scopes": [{"id": "s0", "parent": null, "path": "",'
            ' "class": "M", "call": 0}], "nodes": [{"id": "n0", "kind": "op", "scope": "s0", "inputs": ["n9"]}]}',
            "not an earlier node",
        ),
        (
            '{"format": "torchatlas-graph", "version": 1, "scopes": [{"id": "s0", "parent": null, "path": "",'
            ' "class": "M", "call": 0}], "nodes": [{"id": "n0", "kind": "bogus", "scope": "s0", "inputs": []}]}',
            "unknown kind",
        ),
    ],
)
def test_malformed_documents_raise_a_format_error(tmp_path, text: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(torchatlas.GraphFormatError, match=message):
        torchatlas.load(path)
