"""A model that torch.compile breaks twice: ``torchatlas examples/graph_breaks.py:Gated --input 4,16 --compile-breaks``."""

import torch
from torch import nn


class Gated(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 32))
        self.gate = nn.Linear(32, 1)
        self.head = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.encoder(x)
        print(f"encoded {tuple(h.shape)}")
        if torch.sigmoid(self.gate(h)).mean().item() > 0.5:
            h = h * 2
        return self.head(h).softmax(-1)
