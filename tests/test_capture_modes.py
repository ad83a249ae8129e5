"""The same graph under no_grad and inference_mode, the right one in train and eval, and
captures that never touch real data (meta device, FakeTensorMode)."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from _capture_helpers import wiring
from torch._subclasses.fake_tensor import FakeTensorMode

import torchatlas


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.drop = nn.Dropout(0.5)
        self.bn = nn.BatchNorm1d(4)

    def forward(self, x):
        return self.bn(self.drop(self.fc(x))) + 1


TRAIN_WIRING = [
    ("torch.nn.functional.linear", ("input:args[0]", "param:fc.weight", "param:fc.bias")),
    ("torch.nn.functional.dropout", ("op0",)),
    ("torch.Tensor.add_", ("buffer:bn.num_batches_tracked",)),
    (
        "torch.nn.functional.batch_norm",
        ("op1", "buffer:bn.running_mean", "buffer:bn.running_var", "param:bn.weight", "param:bn.bias"),
    ),
    ("torch.Tensor.__add__", ("op3",)),
]

EVAL_WIRING = [
    ("torch.nn.functional.linear", ("input:args[0]", "param:fc.weight", "param:fc.bias")),
    # dropout in eval returns its input unchanged: the module call is still on the data path
    ("torch.nn.functional.dropout", ("op0",)),
    (
        "torch.nn.functional.batch_norm",
        ("op1", "buffer:bn.running_mean", "buffer:bn.running_var", "param:bn.weight", "param:bn.bias"),
    ),
    ("torch.Tensor.__add__", ("op2",)),
]


def test_train_mode_records_dropout_and_the_batch_counter() -> None:
    assert wiring(torchatlas.trace(Block().train(), torch.randn(3, 4)).ir) == TRAIN_WIRING


def test_eval_mode_records_the_path_eval_takes() -> None:
    ir = torchatlas.trace(Block().eval(), torch.randn(3, 4)).ir
    assert wiring(ir) == EVAL_WIRING
    assert [s.path for s in ir.scopes] == ["", "fc", "drop", "bn"]


@pytest.mark.parametrize("context", [torch.no_grad, torch.inference_mode, torch.enable_grad])
def test_grad_modes_give_the_same_graph(context) -> None:
    model, x = Block().eval(), torch.randn(3, 4)
    with context():
        graph = torchatlas.trace(model, x)
    assert wiring(graph.ir) == EVAL_WIRING
    assert torch.is_grad_enabled()


def test_inference_mode_in_train_mode_tracks_in_place_writes() -> None:
    with torch.inference_mode():
        ir = torchatlas.trace(Block().train(), torch.randn(3, 4)).ir
    assert wiring(ir) == TRAIN_WIRING


def test_meta_device_model_and_inputs() -> None:
    with torch.device("meta"):
        model = Block()
    ir = torchatlas.trace(model, torch.randn(3, 4, device="meta")).ir
    assert wiring(ir) == TRAIN_WIRING
    assert {m.device for n in ir.nodes for m in n.outputs} == {"meta"}
    assert tuple(ir.nodes[-1].outputs[0].shape) == (3, 4)


def test_fake_tensor_mode() -> None:
    with FakeTensorMode():
        model = Block()
        x = torch.randn(3, 4)
        ir = torchatlas.trace(model, x).ir
    assert wiring(ir) == TRAIN_WIRING
    # In training, batch_norm also writes its running mean and variance: two more outputs.
    assert [[tuple(m.shape) for m in n.outputs] for n in ir.ops()] == [
        [(3, 4)], [(3, 4)], [()], [(3, 4), (4,), (4,)], [(3, 4)]
    ]


def test_trace_shapes_on_meta() -> None:
    with torch.device("meta"):
        model = Block().eval()
    ir = torchatlas.trace_shapes(model, (5, 4)).ir
    assert wiring(ir) == EVAL_WIRING
    assert ir.nodes[0].outputs[0] == torchatlas.TensorMeta((5, 4), "float32", "meta")


def test_trace_shapes_takes_the_level_and_backward_of_trace() -> None:
    model = Block().eval()
    aten = torchatlas.trace_shapes(model, (5, 4), level="aten").ir
    assert aten.ops() and all(n.target.startswith(("aten.", "torchatlas.")) for n in aten.ops())
    both = torchatlas.trace_shapes(model, (5, 4), backward=True).ir
    assert {n.meta.get("phase") for n in both.ops()} >= {"backward"}
