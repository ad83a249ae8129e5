"""A model whose Python decides on tensor values: ``torchatlas examples/refiner.py:Refiner --input 2,8 --decisions``."""

import torch
from torch import nn


class Refiner(nn.Module):
    """Refines until the change is small (at most 10 steps), then widens a large result."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)  # the same weights, so the same path, on every run
        self.step = nn.Sequential(nn.Linear(8, 8), nn.Tanh())
        self.big = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x
        for _ in range(10):
            new = self.step(h)
            delta = new - h
            h = new
            if delta.abs().mean() < 0.2:
                break
        if h.norm() > 5:
            return self.big(h)
        return h
