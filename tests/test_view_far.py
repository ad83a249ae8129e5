"""The one far-value rule (``_view._far``): a value read after several layers ran is a stand-in."""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest
import torch
from torch import nn

import torchatlas
from torchatlas._render._dot import DotOptions, diagram_size


class DenseLayer(nn.Module):
    def __init__(self, cin: int, growth: int = 8) -> None:
        super().__init__()
        self.norm, self.relu, self.conv = nn.BatchNorm2d(cin), nn.ReLU(), nn.Conv2d(cin, growth, 3, padding=1)

    def forward(self, inputs: list[torch.Tensor]) -> torch.Tensor:
        return self.conv(self.relu(self.norm(torch.cat(inputs, 1))))


class DenseBlock(nn.ModuleDict):
    """Each layer reads every earlier layer's output, as torchvision's DenseNet does."""

    def __init__(self, layers: int, cin: int, growth: int = 8) -> None:
        super().__init__({f"denselayer{i + 1}": DenseLayer(cin + i * growth, growth) for i in range(layers)})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = [x]
        for layer in self.values():
            features.append(layer(features))
        return torch.cat(features, 1)


class Dense(nn.Module):
    def __init__(self, layers: int = 24) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, padding=1)
        self.block = DenseBlock(layers, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(self.stem(x))


def test_dense_reads_become_stand_ins_and_near_reads_stay_edges() -> None:
    graph = torchatlas.trace(Dense(6), torch.randn(1, 3, 8, 8))
    dot = graph.to_dot()
    names = [line.split("↪ ", 1)[1].split("<", 1)[0] for line in dot.splitlines() if "label=<↪" in line]
    # the block's input, read after three or more layers ran
    assert names.count("stem") == 3
    assert "block.denselayer1.conv" in names  # layer 1's output, read by every later layer
    assert "block.denselayer4.conv" not in names and "block.denselayer5.conv" not in names  # read near: edges
    assert '"n0" -> "s1"' in dot  # the input into the stem: an edge


def test_a_residual_over_leaf_modules_stays_an_edge() -> None:
    class Residual(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1, self.bn1, self.relu = nn.Conv2d(4, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU()
            self.conv2, self.bn2 = nn.Conv2d(4, 4, 3, padding=1), nn.BatchNorm2d(4)

        def forward(self, x):
            return self.relu(self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x))))) + x)

    dot = torchatlas.trace(Residual().eval(), torch.randn(1, 4, 8, 8)).to_dot()
    assert "↪" not in dot


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz 'dot' is not installed")
@pytest.mark.graphviz
def test_a_densenet_sized_block_draws_in_seconds() -> None:
    graph = torchatlas.trace(Dense(24), torch.randn(1, 3, 8, 8))
    assert diagram_size(graph.ir, DotOptions()) < 1000
    start = time.perf_counter()
    subprocess.run(["dot", "-Tsvg", "-o", "/dev/null"], input=graph.to_dot().encode(), check=True, timeout=60)
    assert time.perf_counter() - start < 10  # 13 s with an edge from the block's input into every layer


def test_a_closed_call_read_near_keeps_its_edge_and_the_page_gets_the_rule_as_data() -> None:
    from torchatlas._render._html import viewer_document
    from torchatlas._view import stand_in_reads

    graph = torchatlas.trace(Dense(6), torch.randn(1, 3, 8, 8))
    # The closed block reads the stem near (its first layer) and far (its fourth): the nearest read
    # decides, so the block gets an edge, not a "↪ stem" beside it.
    closed = graph.to_dot(depth=1)
    assert "ref_" not in closed and '"s1" -> "s2"' in closed  # the stem into the block
    # the page: each node's `fr` lists exactly the reads the one rule draws as stand-ins
    ir = graph.ir
    page = viewer_document(ir)
    rule = stand_in_reads(ir, (), {"param", "buffer"})
    assert rule
    assert {(ir.nodes[i].id, j) for i, n in enumerate(page["nodes"]) for j in n.get("fr", [])} == rule
