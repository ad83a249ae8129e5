"""Formats people paste: Mermaid (the diagram's boxes and folds) and GraphML / networkx (every node)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

import torchatlas
from torchatlas import _example

ROOT = Path(__file__).resolve().parents[1]
NODE = re.compile(r'^\s*(u\d+)\["([^"]*)"\]$')
EDGE = re.compile(r'^\s*(u\d+) (-->|-\.->)(?:\|"([^"]*)"\|)? (u\d+)$')
SUBGRAPH = re.compile(r'^\s*subgraph (c\d+)\["([^"]*)"\]$')
STYLE = re.compile(r"^\s*style (u\d+) fill:#[0-9a-f]{6}$")


def parse_mermaid(text: str) -> tuple[dict[str, str], list[tuple[str, str]], list[str]]:
    """A strict reader of the flowchart subset torchatlas writes: every line is a header, a box, an
    edge between defined boxes, a subgraph (balanced by ``end``) or a style; labels quoted, with no
    raw quote, bracket or pipe inside."""
    lines = text.strip().splitlines()
    assert lines[0] in ("flowchart TB", "flowchart LR")
    boxes: dict[str, str] = {}
    edges: list[tuple[str, str]] = []
    subgraphs: list[str] = []
    depth = 0
    for line in lines[1:]:
        if m := NODE.match(line):
            assert m.group(1) not in boxes
            boxes[m.group(1)] = m.group(2)
        elif m := SUBGRAPH.match(line):
            subgraphs.append(m.group(2))
            depth += 1
        elif line.strip() == "end":
            depth -= 1
            assert depth >= 0
        elif m := EDGE.match(line):
            assert m.group(1) in boxes and m.group(4) in boxes, line
            edges.append((m.group(1), m.group(4)))
        else:
            assert STYLE.match(line), line
    assert depth == 0
    return boxes, edges, subgraphs


def _llama() -> torchatlas.Graph:
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
    )
    torch.manual_seed(0)
    return torchatlas.trace(transformers.LlamaForCausalLM(config).eval(), torch.randint(0, 64, (1, 8)))


def test_mermaid_draws_the_diagrams_boxes_and_folds() -> None:
    graph = _llama()
    for depth in (1, 2, 3):
        boxes, edges, subgraphs = parse_mermaid(graph.to_mermaid(depth=depth))
        dot = graph.to_dot(depth=depth)
        assert len(boxes) == len(re.findall(r"^\s*\"[^\"]+\" \[label=", dot, re.M))  # one box per diagram node
        assert len(edges) == dot.count(" -> ") - dot.count("style=invis")
    boxes, _, subgraphs = parse_mermaid(graph.to_mermaid(depth=2))
    assert "layers.0–2 (LlamaDecoderLayer) ×3" in boxes.values()  # folded as the diagram folds
    assert subgraphs == ["model (LlamaModel)"]
    names = set(parse_mermaid(graph.to_mermaid())[0].values())
    assert "q_proj (Linear)" in names and "lm_head (Linear)" in names


def test_mermaid_quotes_what_its_syntax_uses_and_shows_overlays() -> None:
    graph = torchatlas.trace(_example.CoolCNN(), _example.example_input())
    graph.overlay("ms", {"initial_conv": 2.5, "output_layer": 0.25}, scale="log")
    text = graph.to_mermaid(depth=1)
    boxes, _, _ = parse_mermaid(text)
    assert "max_pool#35;1 (MaxPool2d)" in boxes.values()  # "#" written as its entity
    assert "x<br/>1×3×32×32" in boxes.values()  # forward's parameter, as the diagram names it
    assert "initial_conv (Conv2d)<br/>ms 2.5" in boxes.values()
    assert text.count("style ") == 2
    assert torchatlas.FORMATS["mermaid"].file_name == "graph.mmd"


def test_graphml_reads_back_with_networkx_and_matches_to_networkx(tmp_path) -> None:
    networkx = pytest.importorskip("networkx")
    graph = torchatlas.trace(_example.CoolCNN(), _example.example_input())
    graph.overlay("ms", {"n3": 1.5})
    path = graph.to_graphml(tmp_path / "g.graphml")
    read = networkx.read_graphml(path)
    made = graph.to_networkx()
    assert set(read.nodes) == {n.id for n in graph.ir.nodes} == set(made.nodes)
    assert read.number_of_edges() == sum(len(n.inputs) for n in graph.ir.nodes) == made.number_of_edges()
    conv = read.nodes["n3"]
    assert conv["target"] == "torch.conv2d" and conv["module"] == "initial_conv" and conv["flops"] == graph.ir.node("n3").meta["flops"]
    assert conv["overlay: ms"] == 1.5 and conv["shapes"] == "1×16×32×32"
    assert dict(made.nodes["n3"]) == conv
    with pytest.raises(ValueError, match="cannot honour depth"):
        graph.view("graphml", depth=1)


def _mermaid_package() -> Path | None:
    """An installed ``mermaid`` npm package: ``$TORCHATLAS_MERMAID`` (its folder) or web/node_modules/mermaid."""
    for where in (os.environ.get("TORCHATLAS_MERMAID"), ROOT / "web" / "node_modules" / "mermaid"):
        if where and (Path(where) / "dist" / "chunks" / "mermaid.core").is_dir():
            return Path(where)
    return None


def test_mermaid_own_parser_reads_every_flowchart(tmp_path) -> None:
    package, node = _mermaid_package(), shutil.which("node")
    if package is None or node is None:
        pytest.skip("needs node and the mermaid npm package (npm install mermaid; TORCHATLAS_MERMAID=<its folder>)")
    graph = _llama()
    graph.overlay("rank", {"lm_head": "last", "model.embed_tokens": "first"}, kind="category")
    files = []
    for depth in (None, 1, 2):
        path = tmp_path / f"depth{depth}.mmd"
        path.write_text(graph.to_mermaid(depth=depth))
        files.append((path, parse_mermaid(path.read_text())))
    broken = tmp_path / "broken.mmd"
    broken.write_text('flowchart TB\n  u0["a"] -->\n  subgraph\n')
    script = Path(__file__).with_name("_mermaid_parse.mjs")
    run = subprocess.run([node, str(script), str(package), *(str(p) for p, _ in files), str(broken)],
                         capture_output=True, text=True, timeout=120)
    results = [json.loads(line) for line in run.stdout.splitlines()]
    assert [r["ok"] for r in results] == [True, True, True, False], run.stdout + run.stderr
    for result, (_, (boxes, edges, subgraphs)) in zip(results, files):
        assert (result["vertices"], result["edges"], result["subgraphs"]) == (len(boxes), len(edges), len(subgraphs))
