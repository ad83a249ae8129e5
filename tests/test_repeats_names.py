"""Which siblings fold, whatever their names, and what a folded loop's body shows: runs of
layers named with a stem and a number (torchvision's ``encoder_layer_0…11``) or held in one
``Sequential``/``ModuleList``/``ModuleDict`` fold in the tree, summary, diagram and page; the
ops a folded loop runs between its calls carry the loop's count."""

from __future__ import annotations

import re

import pytest
import torch
from torch import nn

import torchatlas
from torchatlas._render._html import viewer_document

torchvision = pytest.importorskip("torchvision")


def _tiny_vit() -> nn.Module:
    """torchvision's own VisionTransformer class, ViT-B/16's structure (12 layers named
    ``encoder_layer_0…11`` in one Sequential) at a tiny width."""
    torch.manual_seed(0)
    return torchvision.models.VisionTransformer(
        image_size=32, patch_size=16, num_layers=12, num_heads=2, hidden_dim=32, mlp_dim=64
    ).eval()


def _assert_vit_folds_everywhere(graph: torchatlas.Graph) -> None:
    fold = "encoder_layer_0–11 (EncoderBlock) ×12"
    tree = graph.tree()
    assert f"── {fold}" in tree and "encoder_layer_1 " not in tree
    assert fold in graph.summary(wide=True) and "encoder_layer_5" not in graph.summary(wide=True)
    for dot in (graph.to_dot(depth=3), graph.to_dot()):
        text = re.sub(r"<[^>]+>", "", dot)
        assert "encoder_layer_0–11" in text and "×12" in text and "encoder_layer_7" not in text
    page = viewer_document(graph.ir)
    [fold_box] = [f for f in page["folds"].values() if "encoder_layer" in f["name"]]
    assert fold_box["name"] == "encoder_layer_0–11"
    [group] = [g for g in graph.ir.meta["repeat_groups"] if g["count"] == 12]
    layers = [s.id for s in graph.ir.scopes if s.class_name == "EncoderBlock"]
    assert group["scopes"] == layers and len(layers) == 12


def test_torchvision_vit_layers_named_encoder_layer_n_fold_in_every_output() -> None:
    graph = torchatlas.trace(_tiny_vit(), torch.randn(1, 3, 32, 32))
    _assert_vit_folds_everywhere(graph)
    # unfolded, every layer is there
    assert "encoder_layer_11 (EncoderBlock)" in graph.tree(fold_repeats=False)


@pytest.mark.slow
def test_torchvision_vit_b_16_folds_its_12_encoder_layers() -> None:
    torch.manual_seed(0)
    graph = torchatlas.trace(torchvision.models.vit_b_16().eval(), torch.randn(1, 3, 224, 224))
    _assert_vit_folds_everywhere(graph)


class Stack(nn.Module):
    """The same block three times, held and named three ways."""

    def __init__(self, holder: str) -> None:
        super().__init__()
        self.holder = holder
        blocks = [nn.Sequential(nn.Linear(8, 8), nn.ReLU()) for _ in range(3)]
        if holder == "dict":
            self.blocks = nn.ModuleDict({"first": blocks[0], "middle": blocks[1], "last": blocks[2]})
        elif holder == "sequential":
            self.blocks = nn.Sequential()
            for name, block in zip(("first", "middle", "last"), blocks):
                self.blocks.add_module(name, block)
        else:  # plain attributes with a common stem and a number
            self.block1, self.block2, self.block3 = blocks

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.holder == "dict":
            for block in self.blocks.values():
                x = block(x)
            return x
        if self.holder == "sequential":
            return self.blocks(x)
        return self.block3(self.block2(self.block1(x)))


@pytest.mark.parametrize(
    "holder, label",
    [("dict", "blocks.first–last (Sequential) ×3"), ("sequential", "first–last (Sequential) ×3"),
     ("numbered", "block1–3 (Sequential) ×3")],
)
def test_one_containers_entries_or_numbered_names_fold(holder: str, label: str) -> None:
    graph = torchatlas.trace(Stack(holder), torch.randn(2, 8))
    [group] = graph.ir.meta["repeat_groups"]
    assert group["count"] == 3
    assert label in graph.tree() and label in graph.summary(wide=True)


class Named(nn.Module):
    """Two Linear layers in a chain under names with no common stem, outside any container."""

    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(8, 8)
        self.down = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.up(x))


def test_lookalike_attributes_without_a_common_numbered_name_do_not_fold() -> None:
    assert torchatlas.trace(Named(), torch.randn(2, 8)).ir.meta["repeat_groups"] == []


class ForRange(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(5):
            x = torch.relu(self.block(x))
        return x


def test_a_folded_loops_body_ops_carry_the_loops_count() -> None:
    graph = torchatlas.trace(ForRange(), torch.randn(2, 8))
    relus = [n for n in graph.ir.ops() if n.target.endswith("relu")]
    assert len(relus) == 5  # eager ground truth: relu ran once per iteration
    assert graph.tree() == "ForRange  2×8 → 2×8\n├── block#0–4 (Linear) ×5  2×8 → 2×8\n└── relu ×5 → 2×8"
    # the diagram's fold box holds the loop's relu too, and says so
    box = next(line for line in graph.to_dot().splitlines() if "×5" in line)
    assert "block#0–4" in box and "then relu each time" in box
    # unfolded, five of each, interleaved as they ran
    lines = graph.tree(fold_repeats=False).splitlines()[1:]
    assert [re.search(r"block(#\d)?|relu", line)[0] for line in lines] == ["block", "relu", "block#1", "relu", "block#2", "relu", "block#3", "relu", "block#4", "relu"]


class ContinueAtTwo(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i in range(4):
            x = self.fc(x)
            if i == 2:
                continue
            x = x.relu()
        return x


def test_a_continue_loops_root_lines_name_their_calls_in_execution_order() -> None:
    """Two folded runs of one module's calls are named by which calls they are (``fc#0–1``,
    ``fc#2–3``), never both ``fc``: the lines read in the order the calls ran."""
    tree = torchatlas.trace(ContinueAtTwo(), torch.randn(2, 8)).tree()
    assert tree.splitlines()[1:] == [
        "├── fc#0–1 (Linear) ×2  2×8 → 2×8",
        "├── x = relu ×2 → 2×8",
        "├── fc#2–3 (Linear) ×2  2×8 → 2×8",
        "└── x = relu → 2×8",
    ]
