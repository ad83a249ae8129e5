"""Activation memory: bytes per value, storage shared by views and in-place writes, peak in execution order."""

from __future__ import annotations

import pytest
from _passes_builder import IRBuilder, param_entry

from torchatlas._passes import memory
from torchatlas._passes._common import dtype_bytes


@pytest.mark.parametrize(
    ("dtype", "size"),
    [("float32", 4), ("float16", 2), ("bfloat16", 2), ("int64", 8), ("bool", 1), ("complex64", 8), ("float8_e4m3fn", 1)],
)
def test_element_sizes(dtype, size):
    assert dtype_bytes(dtype) == size


def test_node_bytes_and_unknown_dtype():
    b = IRBuilder()
    x = b.input((3, 5), dtype="float16")
    y = b.op("torch.relu", [x], (3, 5), dtype="weird_dtype")
    b.output(y)
    ir = memory(b.build())
    assert ir.node(x).meta["bytes"] == 30
    assert ir.node(y).meta["bytes"] == 0
    assert ir.meta["bytes_unknown"] == 2  # the op and the output node that repeats its value


def test_peak_frees_values_after_their_last_use():
    # x(4K) -> a(4K) -> b(4K) -> c(4K): at most two of the chain are alive at once,
    # plus x until a has been computed.
    b = IRBuilder()
    x = b.input((1024,))
    a = b.op("torch.relu", [x], (1024,))
    c1 = b.op("torch.sigmoid", [a], (1024,))
    c2 = b.op("torch.tanh", [c1], (1024,))
    b.output(c2)
    ir = memory(b.build())
    assert ir.meta["peak_activation_bytes"] == 2 * 4096
    assert ir.meta["activation_bytes"] == 4 * 4096


def test_long_lived_value_raises_the_peak():
    b = IRBuilder()
    x = b.input((1024,))
    a = b.op("torch.relu", [x], (1024,))
    c1 = b.op("torch.sigmoid", [a], (1024,))
    c2 = b.op("torch.tanh", [c1], (1024,))
    skip = b.op("torch.Tensor.__add__", [c2, x], (1024,))  # x stays alive to the end
    b.output(skip)
    ir = memory(b.build())
    assert ir.meta["peak_activation_bytes"] == 3 * 4096
    assert ir.meta["peak_activation_node"] == c1  # first reached there: x, a and c1 alive


def test_views_and_inplace_writes_share_storage_and_extend_its_life():
    b = IRBuilder()
    x = b.input((1024,))
    a = b.op("torch.relu", [x], (1024,))
    v = b.op("torch.Tensor.view", [a], (32, 32), args=[{"tensor": 0}, 32, 32])
    w = b.op("torch.Tensor.add_", [v, v], (32, 32), inplace=True)
    big = b.op("torch.zeros", [], (4096,))
    out = b.op("torch.Tensor.__mul__", [w, w], (32, 32))
    b.output(out)
    b.output(big, "output[1]")
    ir = memory(b.build())
    assert ir.node(v).meta["bytes"] == 4096  # the value's size is still reported
    # x freed after relu; a's storage (read through v and w) lives until ``out``
    assert ir.meta["activation_bytes"] == 4096 * 3 + 16384
    assert ir.meta["peak_activation_bytes"] == 4096 + 16384 + 4096
    assert ir.meta["peak_activation_node"] == out


def test_scope_activation_bytes_are_inclusive_and_state_bytes_reported():
    b = IRBuilder()
    x = b.input((10,))
    block = b.scope("block", "m.Block")
    inner = b.scope("block.inner", "m.Inner", parent=block)
    y = b.op("torch.relu", [x], (10,), inner)
    z = b.op("torch.relu", [y], (10,), block)
    b.output(z)
    b.meta["parameters"] = [param_entry("block.w", (10, 10)), param_entry("block.h", (4,), dtype="float16")]
    b.meta["buffers"] = [param_entry("block.stat", (3,), requires_grad=False, dtype="int64")]
    ir = memory(b.build())
    assert ir.scope(inner).meta["activation_bytes"] == 40
    assert ir.scope(block).meta["activation_bytes"] == 80
    assert ir.meta["param_bytes"] == 408
    assert ir.meta["buffer_bytes"] == 24


def test_real_capture_peak_is_bounded_by_total():
    torch = pytest.importorskip("torch")
    from torch import nn

    import torchatlas

    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))
    ir = memory(torchatlas.trace(model, (torch.randn(4, 16),)).ir)
    assert ir.meta["param_bytes"] == sum(p.numel() * 4 for p in model.parameters())
    assert 0 < ir.meta["peak_activation_bytes"] <= ir.meta["activation_bytes"]
    # input 4x16, hidden 4x32 twice (linear, relu), output 4x8, all float32
    assert ir.meta["activation_bytes"] == 4 * (64 + 128 + 128 + 32)


def test_an_eval_dropout_allocates_nothing_as_identity() -> None:
    """Both return their input (capture marks the call's node ``passthrough``): 0 B each."""
    import torch

    import torchatlas

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.1), torch.nn.Identity()).eval()
    ir = torchatlas.trace(model, torch.randn(2, 4)).ir
    assert [s.meta["activation_bytes"] for s in ir.scopes if s.path in ("1", "2")] == [0, 0]
    assert ir.meta["activation_bytes"] == 2 * 32  # the input and the linear's output
