"""graph.overlay: the user's own numbers and categories per op or per call, in every output and the saved JSON."""

from __future__ import annotations

import json

import pytest
import torch

import torchatlas
from torchatlas._view import page_document, to_json


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(4, 8), torch.nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


@pytest.fixture
def graph() -> torchatlas.Graph:
    g = torchatlas.trace(Net(), torch.randn(3, 4))
    relu = next(n for n in g.ir.ops() if n.target and n.target.endswith("relu"))
    g.overlay("latency", [("fc1", 12.5), ("fc2", 3.25), (relu, 0.5)], kind="number", scale="log")
    g.overlay("scheme", {"fc1": "int8", "fc2": "fp16"}, kind="category")
    return g


def test_every_text_output_shows_the_overlay(graph: torchatlas.Graph) -> None:
    tree = graph.tree(ascii=False)
    assert "fc1 (Linear)  3×4 → 3×8  [latency 12.5, int8]" in tree
    assert "[latency 0.5]" in tree  # the relu op's own value
    assert "[latency 12.5, int8]" in graph.tree(depth=0, ascii=False)  # the root: its calls' largest, first category
    summary = graph.summary(format="text")
    header = summary.splitlines()[0]
    assert "latency" in header and "scheme" in header
    fc2 = next(line for line in summary.splitlines() if line.strip().startswith("fc2"))
    assert fc2.split()[-2:] == ["3.25", "fp16"]


def test_the_diagram_fills_by_the_first_number_overlay_with_a_legend(graph: torchatlas.Graph) -> None:
    dot = graph.to_dot()
    fc1 = next(line for line in dot.splitlines() if "latency 12.5" in line)
    assert 'fillcolor="#5a9bd0"' in fc1.split("tooltip")[-1]  # the largest: the last step, given last
    assert "fill:" in dot and "(log scale)" in dot
    by_scheme = graph.to_dot(fill="scheme")
    assert "int8" in by_scheme and "fp16" in by_scheme.split("fill:")[-1]
    with pytest.raises(ValueError, match="no overlay 'nope'"):
        graph.to_dot(fill="nope")


def test_the_page_and_model_explorer_carry_the_values(graph: torchatlas.Graph) -> None:
    doc = to_json(page_document(graph.ir))
    assert ["ov:latency", "latency", ""] in doc["metrics"]
    fc1 = next(s for s in doc["scopes"] if s["path"] == "fc1")
    assert fc1["ov"] == {"latency": 12.5, "scheme": "int8"} and fc1["ovw"] == {"latency": "12.5", "scheme": "int8"}
    me = graph.to_model_explorer()
    relu = next(n for n in me["graphs"][0]["nodes"] if n["label"].startswith("relu"))
    assert {"key": "overlay: latency", "value": "0.5"} in relu["attrs"]
    data = graph.to_model_explorer_node_data()
    (results,) = data.values()
    assert list(results["results"].values()) == [{"value": 0.5}]  # per-op values: Model Explorer's nodes are ops
    assert results["gradient"][0]["stop"] == 0


def test_overlays_round_trip_through_the_saved_json(graph: torchatlas.Graph, tmp_path) -> None:
    loaded = torchatlas.load(graph.save(tmp_path / "g.json"))
    assert loaded.ir.meta["overlays"] == graph.ir.meta["overlays"]
    assert loaded.tree(ascii=False) == graph.tree(ascii=False)
    doc = json.loads((tmp_path / "g.json").read_text())
    doc["meta"]["overlays"]["latency"]["values"]["n999"] = 1.0
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    with pytest.raises(torchatlas.GraphFormatError, match="n999"):
        torchatlas.load(tmp_path / "bad.json")


def test_bad_overlays_are_refused_in_one_line(graph: torchatlas.Graph) -> None:
    with pytest.raises(ValueError, match="'nowhere' is no op"):
        graph.overlay("x", {"nowhere": 1.0})
    with pytest.raises(ValueError, match="finite number"):
        graph.overlay("x", {"fc1": float("nan")})
    with pytest.raises(ValueError, match="kind must be"):
        graph.overlay("x", {"fc1": 1.0}, kind="colour")
    with pytest.raises(ValueError, match="a category has no scale"):
        graph.overlay("x", {"fc1": "a"}, kind="category", scale="log")
    assert "x" not in graph.ir.meta["overlays"]
