"""What the run-time options leave behind on any device: once the graph is dropped, nothing
waits for Python's cyclic collection (on a GPU such a tensor holds device memory)."""

from __future__ import annotations

import gc

import pytest
import torch
import torch.nn as nn

import torchatlas


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(16, 64)
        self.down = nn.Linear(64, 16)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


def _tensors_alive() -> set[int]:
    return {id(o) for o in gc.get_objects() if type(o) is torch.Tensor}


@pytest.mark.parametrize("option", [{}, {"stats": True}, {"profile": True}, {"save": "up"}])
def test_a_dropped_graph_leaves_no_tensor_for_the_cyclic_collector(option) -> None:
    """On a GPU a tensor that waits for Python's cyclic collection holds device memory: once
    the graph is dropped, every activation, saved copy and timing pass output is freed at once."""
    model, x = Mlp(), torch.randn(4, 16)
    torchatlas.trace(model, x, **option)  # warm: first calls may cache
    gc.collect()
    gc.disable()
    try:
        before = _tensors_alive()
        graph = torchatlas.trace(model, x, **option)
        if "save" in option:
            assert graph.activation("up").shape == (4, 64)
        del graph
        left = _tensors_alive() - before
    finally:
        gc.enable()
    assert not left
