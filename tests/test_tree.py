"""The text tree of a real capture, compared as (depth, label) structure."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from _capture_helpers import load_coolcnn

import torchatlas

UNICODE = ("├── ", "└── ", "│   ", "    ")
ASCII = ("|-- ", "`-- ", "|   ", "    ")

COOLCNN_TREE = [
    (0, "CoolCNN  1×3×32×32 → 1×10"),
    (1, "┬ main_path"),
    (2, "initial_conv (Conv2d)  1×3×32×32 → 1×16×32×32"),
    (2, "relu → 1×16×32×32"),
    (2, "max_pool (MaxPool2d)  1×16×32×32 → 1×16×16×16"),
    (1, "┬ parallel_path"),
    (2, "parallel_conv (Conv2d)  1×3×32×32 → 1×16×32×32"),
    (2, "relu → 1×16×32×32"),
    (2, "max_pool#1 (MaxPool2d)  1×16×32×32 → 1×16×16×16"),
    (1, "add (+) (main_path, parallel_path) → 1×16×16×16"),
    (1, "x = truediv (/) → 1×16×16×16"),
    (1, "secondary_conv (Conv2d)  1×16×16×16 → 1×32×16×16"),
    (1, "relu → 1×32×16×16"),
    (1, "max_pool#2 (MaxPool2d)  1×32×16×16 → 1×32×8×8"),
    (1, "x = view → 1×2048"),
    (1, "fully_connected1 (Linear)  1×2048 → 1×128"),
    (1, "x = relu → 1×128"),
    (1, "output_layer (Linear)  1×128 → 1×10"),
]


def parse_tree(text: str, guides: tuple[str, str, str, str]) -> list[tuple[int, str]]:
    """(depth, label) per line; also checks that exactly the last child of each parent uses the corner guide."""
    branch, last, pipe, space = guides
    lines = text.splitlines()
    parsed: list[tuple[int, str, bool]] = [(0, lines[0], True)]
    for line in lines[1:]:
        depth, rest = 1, line
        while rest.startswith((pipe, space)) and not rest.startswith((branch, last)):
            rest, depth = rest[4:], depth + 1
        assert rest.startswith((branch, last)), f"no guide in {line!r}"
        parsed.append((depth, rest[4:], rest.startswith(last)))
    for k, (_depth, label, is_last) in enumerate(parsed[1:], start=1):
        assert is_last == (not _has_next_sibling(parsed, k)), f"wrong corner guide on {label!r}"
    return [(d, label) for d, label, _ in parsed]


def _has_next_sibling(parsed: list[tuple[int, str, bool]], k: int) -> bool:
    depth = parsed[k][0]
    for d, _, _ in parsed[k + 1 :]:
        if d <= depth:
            return d == depth
    return False


@pytest.fixture(scope="module")
def coolcnn_graph() -> torchatlas.Graph:
    coolcnn = load_coolcnn()
    torch.manual_seed(0)
    return torchatlas.trace(coolcnn.CoolCNN(), coolcnn.example_input())


def test_coolcnn_tree_shows_two_branches_joining_at_the_add(coolcnn_graph: torchatlas.Graph) -> None:
    assert parse_tree(coolcnn_graph.tree(ascii=False), UNICODE) == COOLCNN_TREE


def test_ascii_tree_has_the_same_structure_in_pure_ascii(coolcnn_graph: torchatlas.Graph) -> None:
    text = coolcnn_graph.tree(ascii=True)
    assert text.isascii()
    ascii_golden = [
        (d, label.replace("×", "x").replace("→", "->").replace("┬", "+")) for d, label in COOLCNN_TREE
    ]
    assert parse_tree(text, ASCII) == ascii_golden


def test_depth_collapses_module_calls(coolcnn_graph: torchatlas.Graph) -> None:
    assert parse_tree(coolcnn_graph.tree(depth=0, ascii=False), UNICODE) == [COOLCNN_TREE[0]]


class Residual(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, 4)
        self.fc2 = nn.Linear(4, 4)

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        h = self.fc2(h)
        return x + h


def test_residual_shows_its_branch_beside_a_skip_connection() -> None:
    text = torchatlas.trace(Residual(), torch.randn(2, 4)).tree(ascii=False)
    assert parse_tree(text, UNICODE) == [
        (0, "Residual  2×4 → 2×4"),
        (1, "┬ h"),
        (2, "fc1 (Linear)  2×4 → 2×4"),
        (2, "h = relu → 2×4"),
        (2, "fc2 (Linear)  2×4 → 2×4"),
        (1, "┬ (skip connection)"),
        (1, "add (+) → 2×4"),
    ]


class Nested(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = nn.Sequential(nn.Linear(3, 3), nn.ReLU())

    def forward(self, x):
        return self.block(x) * 2


def test_nested_module_calls_nest_in_the_tree() -> None:
    text = torchatlas.trace(Nested(), torch.randn(1, 3)).tree(ascii=False)
    assert parse_tree(text, UNICODE) == [
        (0, "Nested  1×3 → 1×3"),
        (1, "block (Sequential)  1×3 → 1×3"),
        (2, "0 (Linear)  1×3 → 1×3"),
        (2, "1 (ReLU)  1×3 → 1×3"),
        (1, "mul (*) → 1×3"),
    ]


class Hostile(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.add_module("a\x1b[31mred\nline\u202e", nn.ReLU())

    def forward(self, x):
        return getattr(self, "a\x1b[31mred\nline\u202e")(x)


def test_control_characters_in_module_names_are_escaped() -> None:
    text = torchatlas.trace(Hostile(), torch.randn(2)).tree(ascii=False)
    assert "\x1b" not in text and "\u202e" not in text
    assert len(text.splitlines()) == 2
    assert "a\\x1b[31mred\\nline" in text


class NotSeriesParallel(nn.Module):
    def forward(self, x):
        a = torch.relu(x)
        b = torch.sigmoid(a)
        c = torch.tanh(a)
        d = b * c
        e = c + x
        return d, e


def test_flow_that_is_not_series_parallel_is_broken_at_a_value_read_twice() -> None:
    # c is read by d and by e: e reads it by name, and the rest nests (no numbered listing)
    text = torchatlas.trace(NotSeriesParallel(), torch.randn(3)).tree(ascii=False)
    assert parse_tree(text, UNICODE) == [
        (0, "NotSeriesParallel  3 → (3, 3)"),
        (1, "┬ d"),
        (2, "a = relu → 3"),
        (2, "┬ b = sigmoid → 3"),
        (2, "┬ c = tanh → 3"),
        (2, "d = mul (*) (b, c) → 3"),
        (1, "┬ e = add (+) → 3  ← c"),
    ]


class ReadsInsideAListing(nn.Module):
    def forward(self, x):
        a = x.relu()
        b = x.sigmoid()
        c = a * 2
        e = torch.stack([a, b, c]).sum(0)
        return e.exp() + c


def test_a_step_reading_a_value_from_inside_a_branch_names_it() -> None:
    # the final add reads exp (the step before it) and c, from inside the branch before stack:
    # no numbered listing, c is named where it is read
    text = torchatlas.trace(ReadsInsideAListing(), torch.randn(2, 3)).tree(ascii=False)
    parsed = parse_tree(text, UNICODE)
    assert not any(line.startswith("[") for _, line in parsed)
    assert parsed[-2:] == [(1, "exp → 2×3"), (1, "add (+) → 2×3  ← c")]


class TwoHeads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.h1 = nn.Linear(3, 2)
        self.h2 = nn.Linear(3, 2)

    def forward(self, x):
        x = torch.relu(x)
        return self.h1(x), self.h2(x)


def test_parallel_outputs_are_sibling_branches() -> None:
    text = torchatlas.trace(TwoHeads(), torch.randn(3)).tree(ascii=False)
    assert parse_tree(text, UNICODE) == [
        (0, "TwoHeads  3 → (2, 2)"),
        (1, "x = relu → 3"),
        (1, "┬ h1 (Linear)  3 → 2"),
        (1, "┬ h2 (Linear)  3 → 2"),
    ]


class ReadsMaskFirst(nn.Module):
    def forward(self, x, mask, unused):
        return x.masked_fill(mask, 0.0)


def test_the_models_line_lists_its_arguments_in_order_read_or_not() -> None:
    args = (torch.randn(2, 5), torch.zeros(2, 5, dtype=torch.bool), torch.randn(3))
    graph = torchatlas.trace(ReadsMaskFirst(), args)
    assert graph.tree(ascii=False).splitlines()[0] == "ReadsMaskFirst  (2×5, 2×5 bool, 3) → 2×5"
    assert graph.ir.scopes[0].meta["input_shapes"] == [[2, 5], [2, 5], [3]]


class Reassigns(nn.Module):
    def forward(self, hidden_states):
        hidden_states = hidden_states.relu()
        residual = hidden_states
        hidden_states = hidden_states.sigmoid()
        doubled = residual + residual
        return hidden_states + residual, doubled


def test_operands_are_named_only_when_each_name_is_one_value() -> None:
    lines = torchatlas.trace(Reassigns(), torch.randn(2, 3)).tree(ascii=False).splitlines()
    adds = [line.split("── ", 1)[-1].removeprefix("┬ ") for line in lines if "add (+)" in line]
    # the line names the operands (residual + residual: _view.operand_names); where it does not,
    # relu's and sigmoid's results were both called hidden_states: naming them would mislead
    assert adds == ["doubled = add (+) (residual, residual) → 2×3", "add (+) → 2×3"]


class UnpacksAChunk(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.w = nn.Parameter(torch.randn(4))

    def forward(self, x):
        h, gate = self.fc(x).chunk(2, dim=-1)
        scale = self.w.exp()
        y = h * scale
        return y * torch.sigmoid(gate)


def test_an_operand_unpacked_from_a_tuple_is_named_by_its_own_variable() -> None:
    lines = torchatlas.trace(UnpacksAChunk(), torch.randn(3, 8)).tree(ascii=False).splitlines()
    assert "h, gate = chunk → (3×4, 3×4)" in "\n".join(lines)
    (mul,) = [line.split("── ", 1)[-1] for line in lines if "y = mul" in line]
    assert mul == "y = mul (*) (h, scale) → 3×4"  # reads h only, not gate
