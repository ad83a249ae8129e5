"""Edge cases where export's graph departs from what eager ran for reasons of export's own,
and the reference (``_oracle``) must read it so: each disagrees without the rule it names."""

from __future__ import annotations

import contextlib

import torch
from torch import nn

from .edge import Built, _x, case


class SineCode(nn.Module):
    """DAB-DETR's position embedding: a fresh ``arange`` scaled in place, then read."""

    def forward(self, x):
        dim = torch.arange(x.shape[-1], dtype=x.dtype)
        dim //= 2
        dim.mul_(0.5)
        return x * dim


@case
def inplace_on_a_temporary_of_an_unread_call() -> Built:
    """Every call writes into a tensor it made, but only the last call's result is read: export
    drops the others, in-place ops and all, and so must the reference torchatlas is held to."""

    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.code, self.a = SineCode(), nn.Linear(4, 4)

        def forward(self, x):
            codes = [self.code(h) for h in (x, x * 2, x * 3)]
            return self.a(codes[-1])

    return M(), _x(2, 4), {}


class Router(nn.Module):
    """Splits its input by how many rows the gate sends each way, a size Python reads, and
    scales the result by the gate (so the gate's call reaches the output either way)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate, self.out = nn.Linear(4, 2), nn.Linear(4, 4)

    def forward(self, x):
        logits = self.gate(x)
        way = logits.argmax(-1)
        sizes = torch.stack([(way == 0).sum(), (way == 1).sum()]).tolist()
        for size in sizes:
            torch._check(size >= 0)
        torch._check(sizes[0] + sizes[1] == x.shape[0])
        first, second = x.split(sizes)
        return (self.out(first).sum(0) + self.out(second).sum(0)) * logits.mean()


@case
def sizes_python_read() -> Built:
    """JetMoE's ``expert_size.tolist()``: export carries the values Python read as an edge from
    the gate into the split they size; torchatlas records the read. Named, never a pass."""
    return Router(), _x(6, 4), {}


@case
def reshape_as_another_tensor() -> Built:
    """LeViT's ``self.bn(x.flatten(0, 1)).reshape_as(x)``: torchatlas records the read of
    ``x``'s shape, export writes the sizes into a view and has no edge from ``x``. The reference
    reads a ``*_as`` view as reading only the tensor it views."""

    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b, self.out = nn.Linear(4, 4), nn.Linear(8, 8), nn.Linear(4, 4)

        def forward(self, x):
            h = self.a(x)
            y = self.b(x.reshape(1, 8)).reshape_as(h)
            return self.out(y) + h

    return M(), _x(2, 4), {}


@case
def cycles_under_no_grad() -> Built:
    """HRM's reasoning cycles: one block called in a loop, the early calls under
    ``torch.no_grad()``. Export wraps those in a higher-order op whose ops lose their module
    stack once decomposed, so their leaf calls are missing there: named, never a pass."""

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin, self.norm = nn.Linear(4, 4), nn.LayerNorm(4)

        def forward(self, x):
            return self.norm(x + self.lin(x))

    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.block, self.head = Block(), nn.Linear(4, 2)

        def forward(self, x):
            h = x
            for turn in range(3):
                with torch.no_grad() if turn < 2 else contextlib.nullcontext():
                    h = self.block(h + x)
            return self.head(h)

    return M(), _x(2, 4), {}
