"""Models whose Python decides on tensor values: the reads ``test_decisions.py`` checks.

Line numbers matter to those tests: each model names the lines of its decisions
(``line_of``) rather than hard-coding them.
"""

from __future__ import annotations

import inspect

import numpy as np
import torch
from torch import nn


def line_of(cls: type, text: str) -> int:
    """The line number in this file of the first line of ``cls``'s source containing ``text``."""
    lines, start = inspect.getsourcelines(cls)
    return start + next(i for i, line in enumerate(lines) if text in line)


class EarlyExit(nn.Module):
    """Refines until the change is small: ``for ... if ...: break``, then an ``if`` on a norm."""

    def __init__(self, steps: int = 10) -> None:
        super().__init__()
        self.steps = steps
        self.step = nn.Sequential(nn.Linear(8, 8), nn.Tanh())
        self.big = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x
        for _ in range(self.steps):
            new = self.step(h)
            delta = new - h
            h = new
            if delta.abs().mean() < 0.2:
                break
        if h.norm() > 5:
            return self.big(h)
        return h


class NormGate(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        if h.norm() > 5:
            h = h / 2
        return h


class ShapeAssert(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        assert y.shape[-1] == 4
        return x + 1


class ItemScale(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = float(x.abs().max().item())
        return x / scale


class Halve(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x
        while h.norm() > 1:
            h = h / 2
        return h


class SizeOnly(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.sum(-1)
        return x.reshape(y.shape[0], -1)


class Nested(nn.Module):
    """Two loops, the inner one calling one block three times per outer step."""

    def __init__(self) -> None:
        super().__init__()
        self.block = nn.Sequential(nn.Linear(4, 4), nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(2):
            for _ in range(3):
                x = self.block(x)
            x = x * 0.5
        return x


class Uneven(nn.Module):
    """Every other iteration runs one more op: the iterations differ, so nothing folds."""

    def __init__(self) -> None:
        super().__init__()
        self.step = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i in range(4):
            x = self.step(x)
            if i % 2:
                x = x * 2
            x = torch.tanh(x)
        return x


class CountedLoop(nn.Module):
    """Calls one block until a counter reaches ``stop`` (an input), at most ``steps`` times."""

    def __init__(self, steps: int) -> None:
        super().__init__()
        self.steps = steps
        self.block = nn.Sequential(nn.Linear(4, 4), nn.ReLU())

    def forward(self, x: torch.Tensor, stop: torch.Tensor) -> torch.Tensor:
        count = torch.zeros(())
        for _ in range(self.steps):
            x = self.block(x)
            count = count + 1
            if count >= stop:
                break
        return x


class EveryRead(nn.Module):
    """A tensor's value reaches Python in every way Python has: each from its own op."""

    def __init__(self) -> None:
        super().__init__()
        self.f = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.f(x).detach()  # .numpy() refuses a tensor that requires grad
        found = 12345.0 in h.round()  # Tensor.__contains__
        total = h.abs().numpy().sum()  # .numpy()
        mean = np.asarray(h.exp()).mean()  # __array__
        listed = h.sin().tolist()  # .tolist()
        text = f"{h.cos().sum():.2f}"  # __format__
        twisted = complex(h.tanh().sum())  # __complex__
        pick = [0, 1, 2, 3][h.argmax(-1)[0]]  # __index__
        signs = [bool(v > 0) for v in h.sigmoid()[0]]  # iteration, then each element's truth
        return h * (float(total) + float(mean) + len(listed) + len(text) + twisted.real + pick + sum(signs) + found)


class ExitsBySyntax(nn.Module):
    """``break``/``continue`` ifs Python reads as such however their line is written."""

    def __init__(self) -> None:
        super().__init__()
        self.f = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(3):
            x = self.f(x)
            if x.abs().sum() < -1:  # never: a comment with a colon: and a ] bracket
                break
            if x[:, 0].abs().sum() < -1: continue
            if (x.abs().sum() < -2 or
                    x.abs().sum() > 1e9):
                break
        return x


class CountedValues(nn.Module):
    """Sizes decided by values (``nonzero``, a boolean mask) beside a size fixed by the shapes."""

    def __init__(self) -> None:
        super().__init__()
        self.f = nn.Linear(4, 4)
        self.g = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.f(x)
        k = len(torch.nonzero(h > 0))
        m = h[h.abs() > 0.5].shape[0]
        rows = self.g(x).shape[0]
        return h * (k + m + rows)


class SizedCall(nn.Module):
    """A module call (of several ops) only its result's size is read of."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.aux = nn.Sequential(nn.Linear(8, 5), nn.ReLU())
        self.gate = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x)
        n = self.aux(h).shape[-1]
        if self.gate(h[:1]):  # a call of one op, whose result decides an if
            return h
        return h[:, :n]


class Nests:
    class Decorated(nn.Module):
        """A decorated method of a nested class: its test spans two lines after non-ASCII text."""

        @torch.no_grad()
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            label = "é ü"  # two-byte letters before the test move its byte columns
            if label and x.sum() > 0 and not (x.max() >
                                              5):
                return x + 1
            return x
