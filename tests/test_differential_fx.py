"""Differential: on FX-traceable models the captured ops and edges equal torch.fx's.

The tracer descends into every module (``is_leaf_module`` is False) so FX records the
same torch-level calls the capture sees. Targets are compared as the callables they
name: FX's ``operator.add`` is ``Tensor.__add__``, ``call_method view`` is ``Tensor.view``.
"""

from __future__ import annotations

import importlib
import operator

import pytest
import torch
import torch.fx as fx
import torch.nn as nn
from _capture_helpers import load_coolcnn

import torchatlas

OPERATORS = {
    operator.add: "__add__", operator.sub: "__sub__", operator.mul: "__mul__", operator.truediv: "__truediv__",
    operator.floordiv: "__floordiv__", operator.matmul: "__matmul__", operator.neg: "__neg__",
    operator.pow: "__pow__", operator.mod: "__mod__", operator.getitem: "__getitem__",
    operator.iadd: "__iadd__", operator.imul: "__imul__",
}


class DescendingTracer(fx.Tracer):
    proxy_buffer_attributes = True  # so that BatchNorm's num_batches_tracked.add_(1) is recorded

    def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
        return False


def resolve(target: str):
    """``torch.nn.functional.linear`` -> that callable."""
    module_name, _, attr = target.rpartition(".")
    if module_name == "torch.Tensor":
        return getattr(torch.Tensor, attr)
    return getattr(importlib.import_module(module_name), attr)


def fx_callable(node: fx.Node):
    if node.op == "call_method":
        return getattr(torch.Tensor, node.target)
    if node.target in OPERATORS:
        return getattr(torch.Tensor, OPERATORS[node.target])
    return node.target


def fx_ops(model: nn.Module) -> list[tuple[object, tuple[str, ...], str]]:
    """(callable, labels of tensor inputs, innermost module path) for each FX call node."""
    graph = DescendingTracer().trace(model)
    params = {name for name, _ in model.named_parameters()}
    labels: dict[fx.Node, str] = {}
    placeholders = 0
    ops = []
    for node in graph.nodes:
        if node.op == "placeholder":
            labels[node] = f"input:args[{placeholders}]"
            placeholders += 1
        elif node.op == "get_attr":
            labels[node] = ("param:" if node.target in params else "buffer:") + node.target
        elif node.op in ("call_function", "call_method"):
            reads: list[str] = []
            fx.node.map_arg((node.args, node.kwargs), lambda n: reads.append(labels[n]))  # noqa: B023 (called at once)
            stack = node.meta.get("nn_module_stack") or {}
            path = list(stack.values())[-1][0] if stack else ""
            labels[node] = f"op{len(ops)}"
            ops.append((fx_callable(node), tuple(reads), path))
    return ops


def captured_ops(model: nn.Module, x: torch.Tensor) -> list[tuple[object, tuple[str, ...], str]]:
    ir = torchatlas.trace(model, x).ir
    index = {n.id: k for k, n in enumerate(ir.ops())}

    def label(node_id: str, slot: int) -> str:
        node = ir.node(node_id)
        if node.kind == "op":
            return f"op{index[node_id]}" + (f".{slot}" if slot else "")
        return f"{node.kind}:{node.path}"

    return [
        (resolve(n.target), tuple(label(i, s) for i, s in n.inputs), ir.scope(n.scope).path)
        for n in ir.ops()
    ]


class ResidualMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(8)
        self.up = nn.Linear(8, 16)
        self.act = nn.GELU()
        self.down = nn.Linear(16, 8)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        h = self.down(self.act(self.up(self.norm(x))))
        x = x + h
        return self.head(x).softmax(dim=-1)


class BatchNorm2d(nn.BatchNorm2d):
    """BatchNorm2d without its input-rank check, the one line FX cannot trace through."""

    def _check_input_dim(self, input: torch.Tensor) -> None:
        pass


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), BatchNorm2d(8), nn.ReLU(),
            nn.Conv2d(8, 8, 3, padding=1), BatchNorm2d(8), nn.ReLU(),
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        x = self.features(x)
        x = torch.flatten(self.pool(x), 1)
        return self.fc(x)


MODELS = {
    "coolcnn": (lambda: load_coolcnn().CoolCNN(), (1, 3, 32, 32)),
    "residual_mlp": (ResidualMLP, (2, 8)),
    "small_cnn_eval": (lambda: SmallCNN().eval(), (2, 3, 8, 8)),
    "small_cnn_train": (lambda: SmallCNN().train(), (2, 3, 8, 8)),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_ops_and_edges_equal_torch_fx(name: str) -> None:
    make, shape = MODELS[name]
    torch.manual_seed(0)
    model = make()
    expected = fx_ops(model)
    got = captured_ops(model, torch.randn(shape))
    assert len(got) == len(expected)
    for k, (g, e) in enumerate(zip(got, expected)):
        assert g == e, f"op {k}"


def test_the_comparison_sees_a_wrong_edge() -> None:
    """The FX side is a real oracle: a model that differs in one edge compares unequal."""

    class Swapped(ResidualMLP):
        def forward(self, x):
            h = self.down(self.act(self.up(self.norm(x))))
            x = h + h
            return self.head(x).softmax(dim=-1)

    torch.manual_seed(0)
    assert fx_ops(Swapped()) != captured_ops(ResidualMLP(), torch.randn(2, 8))
