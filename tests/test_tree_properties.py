"""Property tests of the tree against models whose true nesting is known.

* Random series-parallel models (series, fork-join with ``stack``, residual ``add``):
  the tree is exactly their nesting.
* Random chains of blocks that read a side value computed once: every edge of the
  scope's flow appears once, as order (the main path), nesting (the side branch) or a
  named reference (``← side``) on exactly the blocks that read it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_tree import UNICODE, parse_tree
from torch import nn

import torchatlas

UNARY = ("relu", "tanh", "sigmoid", "neg", "exp", "sin", "cos")


@dataclass(frozen=True)
class Leaf:
    op: str


@dataclass(frozen=True)
class Series:
    parts: tuple[Leaf | Parallel | Residual, ...]


@dataclass(frozen=True)
class Parallel:
    branches: tuple[Series, ...]


@dataclass(frozen=True)
class Residual:
    body: Series


Expr = Leaf | Series | Parallel | Residual


def _series(children: st.SearchStrategy[Expr]) -> st.SearchStrategy[Series]:
    part = children.map(lambda e: e.parts if isinstance(e, Series) else (e,))
    return st.lists(part, min_size=1, max_size=3).map(lambda ps: Series(tuple(x for p in ps for x in p)))


def _extend(children: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
    series = _series(children)
    return st.one_of(
        series,
        st.lists(series, min_size=2, max_size=3).map(lambda bs: Parallel(tuple(bs))),
        series.map(Residual),
    )


EXPRS = st.recursive(st.sampled_from(UNARY).map(Leaf), _extend, max_leaves=10)


def run(expr: Expr, x: torch.Tensor) -> torch.Tensor:
    if isinstance(expr, Leaf):
        return getattr(torch, expr.op)(x)
    if isinstance(expr, Series):
        for part in expr.parts:
            x = run(part, x)
        return x
    if isinstance(expr, Parallel):
        return torch.stack([run(b, x) for b in expr.branches]).sum(0)
    return run(expr.body, x) + x


class Program(nn.Module):
    def __init__(self, expr: Expr) -> None:
        super().__init__()
        self.expr = expr

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return run(self.expr, x)


def expected(expr: Expr, depth: int) -> list[tuple[int, str]]:
    """(depth, token) per tree line: an op's name, ``┬`` for a branch of several lines,
    ``┬<op>`` for a one-op branch, ``┬skip`` for a skip connection."""
    if isinstance(expr, Leaf):
        return [(depth, expr.op)]
    if isinstance(expr, Series):
        return [line for part in expr.parts for line in expected(part, depth)]
    if isinstance(expr, Parallel):
        return [*(line for b in expr.branches for line in _branch(b, depth)), (depth, "stack"), (depth, "sum")]
    return [*_branch(expr.body, depth), (depth, "┬skip"), (depth, "add")]


def _branch(body: Series, depth: int) -> list[tuple[int, str]]:
    inner = expected(body, depth + 1)
    if len(inner) == 1:
        return [(depth, "┬" + inner[0][1])]
    return [(depth, "┬"), *inner]


def tokens(text: str) -> list[tuple[int, str]]:
    lines = parse_tree(text, UNICODE)[1:]
    out = []
    for k, (depth, label) in enumerate(lines):
        has_children = k + 1 < len(lines) and lines[k + 1][0] > depth
        if label == "┬ (skip connection)":
            out.append((depth, "┬skip"))
        elif label.startswith("┬ "):
            out.append((depth, "┬" if has_children else "┬" + _op(label[2:])))
        else:
            out.append((depth, _op(label)))
    return out


def _op(label: str) -> str:
    return label.split(" = ", 1)[-1].split(" ", 1)[0]


@settings(max_examples=60, deadline=None)
@given(EXPRS)
def test_series_parallel_models_nest_exactly(expr: Expr) -> None:
    graph = torchatlas.trace(Program(expr), torch.randn(2, 3))
    assert tokens(graph.tree()) == expected(expr, 1)


class Side(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sin(x) * 0.5


class Block(nn.Module):
    def __init__(self, reads_side: bool) -> None:
        super().__init__()
        self.reads_side = reads_side
        self.fc = nn.Linear(3, 3)

    def forward(self, h: torch.Tensor, side: torch.Tensor | None = None) -> torch.Tensor:
        h = self.fc(h)
        return h * side if side is not None else torch.relu(h)


class WithSide(nn.Module):
    def __init__(self, reads: list[bool]) -> None:
        super().__init__()
        self.side_of = Side()
        self.blocks = nn.ModuleList(Block(r) for r in reads)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        side = self.side_of(x)
        h = torch.tanh(x)
        for block in self.blocks:
            h = block(h, side) if block.reads_side else block(h)
        return h


@settings(max_examples=30, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=6).filter(any))
def test_side_values_are_computed_once_and_referenced_where_read(reads: list[bool]) -> None:
    text = torchatlas.trace(WithSide(reads), torch.randn(2, 3)).tree(depth=1, fold_repeats=False)
    lines = parse_tree(text, UNICODE)[1:]
    labels = [label for _, label in lines]
    # the side value: computed once, as a branch off the main path, before its first reader
    side = [lab for lab in labels if "side_of (Side)" in lab]
    assert len(side) == 1 and side[0].startswith("┬ ")
    # the main path: tanh, then every block in call order, one per line at depth 1
    blocks = [lab for lab in labels if lab.startswith("blocks.")]
    assert [lab.split(" ")[0] for lab in blocks] == [f"blocks.{i}" for i in range(len(reads))]
    assert labels.index(side[0]) < labels.index(blocks[reads.index(True)])
    # the reference edge: exactly on the blocks that read the side value
    assert [lab.endswith("← side") for lab in blocks] == reads
