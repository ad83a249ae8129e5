"""Models whose graph breaks are known: each break line carries a ``# BREAK`` marker."""

from __future__ import annotations

import sys

import torch
from torch import nn


class _Base(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 8)
        self.fc2 = nn.Linear(8, 4)


class PrintInForward(_Base):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(x))
        print("forward ran")  # BREAK
        return self.fc2(h) * 2


class ItemControlFlow(_Base):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(x))
        if h.mean().item() > 0.5:  # BREAK
            h = h * 2
        return self.fc2(h)


class UnsupportedBuiltin(_Base):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(x))
        h = h + sys.getrefcount(h) % 1  # BREAK
        return self.fc2(h)


class DataDependentBranch(_Base):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(x))
        if h.sum() > 0:  # BREAK
            h = h - 1
        return self.fc2(h)


class DynamicShapeOp(_Base):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(x))
        h = h[torch.nonzero(h > 0, as_tuple=True)].sum() + h  # BREAK
        return self.fc2(h)


class NoBreak(_Base):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(x))
        return torch.softmax(self.fc2(h), dim=-1)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x).relu()
        print("block")  # BREAK
        return h + x


class TwoBreaks(nn.Module):
    """Two breaks: a print inside a submodule, and ``.item()`` in the model's own forward."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(8, 8)
        self.block = Block()
        self.head = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.block(torch.tanh(self.embed(x)))
        scale = h.abs().max().item()  # BREAK
        return self.head(h / scale)


class BlockLoop(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(3)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x * 2
        for block in self.blocks:
            x = block(x)
        return x.sum(-1)


def break_lines(cls: type) -> list[int]:
    """The lines of ``cls``'s source file marked ``# BREAK`` inside its forward (and its blocks')."""
    import inspect

    lines, start = inspect.getsourcelines(cls)
    return [start + i for i, line in enumerate(lines) if line.rstrip().endswith("# BREAK")]


class BreakAtAnUnusedOp(_Base):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, int]:
        h = torch.relu(self.fc1(x))
        idx = torch.nonzero(h > 0)  # BREAK
        return self.fc2(h), idx.shape[0]  # only its size (a count) is used: no op reads idx
