"""Dead code: ops whose results reach no output."""

from __future__ import annotations

import pytest
from _passes_builder import IRBuilder

from torchatlas._ir import Node, Ref
from torchatlas._passes import dead_code


def test_unused_branch_is_dead_and_used_chain_is_live():
    b = IRBuilder()
    x = b.input((4,))
    used = b.op("torch.relu", [x], (4,))
    unused = b.op("torch.sigmoid", [x], (4,))
    unused_child = b.op("torch.tanh", [unused], (4,))
    b.output(used)
    ir = dead_code(b.build())
    assert {n.id: n.meta["dead"] for n in ir.ops()} == {used: False, unused: True, unused_child: True}
    assert ir.meta["dead_op_count"] == 2
    assert "dead" not in ir.node(x).meta


def test_inplace_write_is_live_only_if_a_later_live_op_reads_it():
    b = IRBuilder()
    x = b.input((4,))
    a = b.op("torch.relu", [x], (4,))
    write = b.op("torch.Tensor.add_", [a, x], (4,), inplace=True)
    read = b.op("torch.Tensor.__mul__", [write, x], (4,))
    lost = b.op("torch.Tensor.mul_", [read, x], (4,), inplace=True)  # nobody reads this write
    b.output(read)
    ir = dead_code(b.build())
    assert not ir.node(write).meta["dead"]
    assert not ir.node(a).meta["dead"]
    assert ir.node(lost).meta["dead"]


def test_writes_into_model_state_are_live():
    b = IRBuilder()
    x = b.input((4,))
    stat = b.param("bn.running_mean", (4,), kind="buffer")
    update = b.op("torch.Tensor.add_", [stat, x], (4,), inplace=True)
    b.output(b.op("torch.relu", [x], (4,)))
    ir = dead_code(b.build())
    assert not ir.node(update).meta["dead"]


def test_failed_capture_is_not_judged():
    b = IRBuilder()
    x = b.input((4,))
    b.op("torch.relu", [x], (4,))
    b.nodes.append(Node("n2", "op", b.root, inputs=[Ref(x)], target="torch.bad", meta={"error": "boom"}))
    ir = dead_code(b.build())
    assert ir.meta["dead_op_count"] is None
    assert all("dead" not in n.meta for n in ir.nodes)


def test_real_model_with_unused_computation():
    torch = pytest.importorskip("torch")
    from torch import nn

    import torchatlas

    class Wasteful(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            y = self.fc(x)
            _ = torch.sigmoid(y) * 2  # computed, never used
            return torch.relu(y)

    ir = dead_code(torchatlas.trace(Wasteful(), (torch.randn(2, 4),)).ir)
    dead = sorted(n.target for n in ir.ops() if n.meta["dead"])
    assert dead == ["torch.Tensor.__mul__", "torch.sigmoid"]
