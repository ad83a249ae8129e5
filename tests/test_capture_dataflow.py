"""Exact data flow: views, in-place ops, writes through views, multi-output ops."""

from __future__ import annotations

import torch
import torch.nn as nn
from _capture_helpers import outputs, wiring

import torchatlas
from torchatlas import Ref

T = "torch.Tensor."


class Views(nn.Module):
    def forward(self, x):
        a = x.view(2, 6)
        b = a.reshape(3, 4)
        c = b[:, 1:3]
        d = c.transpose(0, 1)
        return torch.flatten(d)


def test_views_and_reshapes_each_read_the_previous_value() -> None:
    ir = torchatlas.trace(Views(), torch.randn(3, 4)).ir
    assert wiring(ir) == [
        (T + "view", ("input:args[0]",)),
        (T + "reshape", ("op0",)),
        (T + "__getitem__", ("op1",)),
        (T + "transpose", ("op2",)),
        ("torch.flatten", ("op3",)),
    ]
    getitem = list(ir.ops())[2]
    assert getitem.args == [{"tensor": 0}, [{"slice": [None, None, None]}, {"slice": [1, 3, None]}]]
    assert [tuple(n.outputs[0].shape) for n in ir.ops()] == [(2, 6), (3, 4), (3, 2), (2, 3), (6,)]


class InPlace(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.act = nn.ReLU(inplace=True)

    def forward(self, x):
        y = x * 2
        y.add_(1)
        y = self.act(y)
        y += 3
        return y - x


def test_in_place_ops_chain_through_the_last_writer() -> None:
    ir = torchatlas.trace(InPlace(), torch.randn(3, 4)).ir
    assert wiring(ir) == [
        (T + "__mul__", ("input:args[0]",)),
        (T + "add_", ("op0",)),
        ("torch.nn.functional.relu", ("op1",)),
        (T + "__iadd__", ("op2",)),
        (T + "__sub__", ("op3", "input:args[0]")),
    ]
    assert [n.inplace for n in ir.ops()] == [False, True, True, True, False]
    relu = list(ir.ops())[2]
    assert ir.scope(relu.scope).path == "act"


def test_relu_not_in_place_is_not_marked() -> None:
    ir = torchatlas.trace(nn.ReLU(), torch.randn(3)).ir
    assert [n.inplace for n in ir.ops()] == [False]


class WritesThroughViews(nn.Module):
    def forward(self, x, z, w):
        y = x * 2
        v = y[:, 1:]
        y[:, :2] = z
        a = v + 1
        y.view(-1).add_(w)
        b = y * 3
        c = v * 4
        return a, b, c


def test_readers_of_a_written_tensor_or_its_views_read_it_updated_by_the_write() -> None:
    ir = torchatlas.trace(WritesThroughViews(), (torch.randn(3, 4), torch.randn(3, 2), torch.randn(12))).ir
    U = "torchatlas.updated"
    assert wiring(ir) == [
        (T + "__mul__", ("input:args[0]",)),
        (T + "__getitem__", ("op0",)),
        (T + "__setitem__", ("op0", "input:args[1]")),
        (U, ("op1", "op2")),  # v, as y[:, :2] = z left it
        (T + "__add__", ("op3",)),
        (T + "view", ("op2",)),
        (T + "add_", ("op5", "input:args[2]")),
        (U, ("op2", "op6")),  # y, written through its view
        (T + "__mul__", ("op7",)),
        (U, ("op3", "op6")),  # and v again
        (T + "__mul__", ("op9",)),
    ]
    assert [n.inplace for n in ir.ops()] == [False, False, True, False, False, False, True, False, False, False, False]
    # each updated value has the shape of the tensor read, not of the view written
    assert [tuple(n.outputs[0].shape) for n in ir.ops() if n.target == U] == [(3, 3), (3, 4), (3, 3)]
    assert outputs(ir) == {"output[0]": "op4", "output[1]": "op8", "output[2]": "op10"}


class WriteThroughAView(nn.Module):
    def forward(self, x):
        y = torch.relu(x)
        y[:, :2].mul_(0.5)
        return y


class ReadsAWrittenSubmodule(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.s = WriteThroughAView()
        self.fc = nn.Linear(8, 2)

    def forward(self, x):
        return self.fc(self.s(x))


def test_a_module_returning_a_tensor_written_through_its_view_returns_it_whole() -> None:
    ir = torchatlas.trace(ReadsAWrittenSubmodule(), torch.randn(3, 8)).ir
    s = next(scope for scope in ir.scopes if scope.path == "s")
    (out,) = s.outputs
    updated = ir.node(out)
    assert updated.target == "torchatlas.updated" and updated.scope == s.id
    assert tuple(updated.outputs[0].shape) == (3, 8)
    assert [ir.node(r).target for r in updated.inputs] == ["torch.relu", T + "mul_"]
    linear = next(n for n in ir.ops() if n.target == "torch.nn.functional.linear")
    assert ir.node(linear.inputs[0]) is updated


class ReadBeforeWrite(nn.Module):
    def forward(self, x):
        y = x + 0
        before = y * 2
        y.mul_(3)
        after = y * 2
        return before, after


def test_a_reader_before_the_write_keeps_the_old_producer() -> None:
    ir = torchatlas.trace(ReadBeforeWrite(), torch.randn(3)).ir
    assert wiring(ir) == [
        (T + "__add__", ("input:args[0]",)),
        (T + "__mul__", ("op0",)),
        (T + "mul_", ("op0",)),
        (T + "__mul__", ("op2",)),
    ]


class WriteIntoInput(nn.Module):
    def forward(self, x):
        x.mul_(2)
        return x + 1


def test_a_write_into_an_input_is_an_op_later_readers_depend_on() -> None:
    ir = torchatlas.trace(WriteIntoInput(), torch.randn(3)).ir
    assert wiring(ir) == [(T + "mul_", ("input:args[0]",)), (T + "__add__", ("op0",))]


class OutArgument(nn.Module):
    def forward(self, x):
        buf = torch.empty(3)
        torch.add(x, 1, out=buf)
        return buf * 2


def test_out_argument_counts_as_a_write() -> None:
    ir = torchatlas.trace(OutArgument(), torch.randn(3)).ir
    assert wiring(ir) == [
        ("torch.empty", ()),
        ("torch.add", ("input:args[0]",)),
        (T + "__mul__", ("op1",)),
    ]
    assert list(ir.ops())[1].inplace


class MultiOutput(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(4, 5, batch_first=True)

    def forward(self, x):
        a, b = x.chunk(2, dim=1)
        c, d = torch.split(x, [1, 3], dim=1)
        v, i = x.topk(2)
        o, (h, cc) = self.lstm(x.unsqueeze(0))
        return b * 2, d + c.sum(), v, i, o, h, cc


def test_multi_output_ops_record_which_output_each_reader_took() -> None:
    ir = torchatlas.trace(MultiOutput(), torch.randn(3, 4)).ir
    ops = list(ir.ops())
    by_target = {n.target: n for n in ops}
    assert [tuple(m.shape) for m in by_target[T + "chunk"].outputs] == [(3, 2), (3, 2)]
    assert [tuple(m.shape) for m in by_target["torch.split"].outputs] == [(3, 1), (3, 3)]
    assert [m.dtype for m in by_target[T + "topk"].outputs] == ["float32", "int64"]
    lstm = by_target["torch.lstm"]
    assert [tuple(m.shape) for m in lstm.outputs] == [(1, 3, 5), (1, 1, 5), (1, 1, 5)]
    assert ir.scope(lstm.scope).path == "lstm"
    got = dict(wiring(ir)[k] for k in range(len(ops)) if ops[k].target.startswith(T + "__"))
    k = {n.target: idx for idx, n in enumerate(ops)}
    assert got[T + "__mul__"] == (f"op{k[T + 'chunk']}.1",)
    assert got[T + "__add__"] == (f"op{k['torch.split']}.1", f"op{k[T + 'sum']}")
    assert wiring(ir)[k[T + "sum"]] == (T + "sum", (f"op{k['torch.split']}",))
    assert outputs(ir) == {
        "output[0]": f"op{k[T + '__mul__']}",
        "output[1]": f"op{k[T + '__add__']}",
        "output[2]": f"op{k[T + 'topk']}",
        "output[3]": f"op{k[T + 'topk']}.1",
        "output[4]": f"op{k['torch.lstm']}",
        "output[5]": f"op{k['torch.lstm']}.1",
        "output[6]": f"op{k['torch.lstm']}.2",
    }
    # The LSTM call returns (output, (h, c)): three values of one op, each with its slot.
    assert ir.scope(lstm.scope).outputs == [Ref(lstm.id, 0), Ref(lstm.id, 1), Ref(lstm.id, 2)]


class WritesThroughData(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        with torch.no_grad():
            self.fc.weight.data.mul_(0.5)
        y = x * 2
        y.data.mul_(3)
        return self.fc(y)


def test_writes_through_data_reach_later_readers() -> None:
    ir = torchatlas.trace(WritesThroughData(), torch.randn(2, 4)).ir
    assert wiring(ir) == [
        (T + "data", ("param:fc.weight",)),
        (T + "mul_", ("op0",)),
        (T + "__mul__", ("input:args[0]",)),
        (T + "data", ("op2",)),
        (T + "mul_", ("op3",)),
        ("torch.nn.functional.linear", ("op4", "op1", "param:fc.bias")),
    ]


def test_batch_norm_in_training_writes_its_running_statistics() -> None:
    class ReadsStats(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bn = nn.BatchNorm1d(4)

        def forward(self, x):
            y = self.bn(x)
            return y, self.bn.running_mean * 1

    ir = torchatlas.trace(ReadsStats().train(), torch.randn(3, 4)).ir
    bn = next(n for n in ir.ops() if n.target == "torch.nn.functional.batch_norm")
    assert bn.inplace and [tuple(m.shape) for m in bn.outputs] == [(3, 4), (4,), (4,)]
    reader = next(n for n in ir.ops() if n.target == "torch.Tensor.__mul__")
    assert reader.inputs == [Ref(bn.id, 1)]  # the updated running_mean
    ir_eval = torchatlas.trace(ReadsStats().eval(), torch.randn(3, 4)).ir
    bn_eval = next(n for n in ir_eval.ops() if n.target == "torch.nn.functional.batch_norm")
    assert not bn_eval.inplace and len(bn_eval.outputs) == 1
