"""Module calls: shared modules, loops, unregistered and forward-made submodules, control flow."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from _capture_helpers import targets, wiring

import torchatlas
from torchatlas import Ref

LINEAR = "torch.nn.functional.linear"


class Shared(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.acts = nn.ModuleList([nn.ReLU(), nn.Tanh()])

    def forward(self, x):
        for _ in range(3):
            x = self.fc(x)
        for act in self.acts:
            x = act(x)
        return x


def test_a_module_called_in_a_loop_gets_one_scope_per_call() -> None:
    ir = torchatlas.trace(Shared(), torch.randn(2, 4)).ir
    assert [(s.path, s.call, s.parent) for s in ir.scopes] == [
        ("", 0, None), ("fc", 0, "s0"), ("fc", 1, "s0"), ("fc", 2, "s0"), ("acts.0", 0, "s0"), ("acts.1", 0, "s0"),
    ]
    assert wiring(ir) == [
        (LINEAR, ("input:args[0]", "param:fc.weight", "param:fc.bias")),
        (LINEAR, ("op0", "param:fc.weight", "param:fc.bias")),
        (LINEAR, ("op1", "param:fc.weight", "param:fc.bias")),
        ("torch.nn.functional.relu", ("op2",)),
        ("torch.tanh", ("op3",)),
    ]
    # one node per parameter, made at its first read
    assert [n.path for n in ir.nodes if n.kind == "param"] == ["fc.weight", "fc.bias"]
    assert [s.label for s in ir.scopes[1:4]] == ["fc (Linear)", "fc#1 (Linear)", "fc#2 (Linear)"]


class TiedWeights(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids):
        return self.head(self.embed(ids))


def test_tied_weights_are_one_parameter_node() -> None:
    ir = torchatlas.trace(TiedWeights(), torch.tensor([[1, 2]])).ir
    assert wiring(ir) == [
        ("torch.nn.functional.embedding", ("input:args[0]", "param:embed.weight")),
        (LINEAR, ("op0", "param:embed.weight")),
    ]


class PlainList(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = [nn.Linear(4, 4), nn.Linear(4, 4)]  # not registered as submodules

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


def test_submodules_in_a_plain_list_are_recorded_as_module_calls() -> None:
    ir = torchatlas.trace(PlainList(), torch.randn(2, 4)).ir
    assert [s.class_name for s in ir.scopes] == ["PlainList", "Linear", "Linear"]
    assert [n.scope for n in ir.ops()] == ["s1", "s2"]
    assert [w[1][0] for w in wiring(ir)] == ["input:args[0]", "op0"]


def test_distinct_unregistered_modules_are_not_taken_for_one_module_called_twice() -> None:
    ir = torchatlas.trace(PlainList(), torch.randn(2, 4)).ir
    # Scope.call counts earlier calls of the same module: each of these was called once
    assert [s.call for s in ir.scopes] == [0, 0, 0]


def test_parameters_of_unregistered_modules_are_parameters() -> None:
    ir = torchatlas.trace(PlainList(), torch.randn(2, 4)).ir
    first, second = (tuple(ir.node(i).path for i in n.inputs[1:]) for n in ir.ops())
    assert [ir.node(i).kind for n in ir.ops() for i in n.inputs[1:]] == ["param"] * 4
    assert len(set(first + second)) == 4  # each module's own parameters


class MadeInForward(nn.Module):
    def forward(self, x):
        x = x * 2
        head = nn.Linear(4, 2)
        return head(x)


def test_a_submodule_created_inside_forward_is_a_scope_reading_the_previous_op() -> None:
    ir = torchatlas.trace(MadeInForward(), torch.randn(3, 4)).ir
    assert [s.class_name for s in ir.scopes] == ["MadeInForward", "Linear"]
    linear = next(n for n in ir.ops() if n.target == LINEAR)
    assert linear.scope == "s1"
    mul = next(n for n in ir.ops() if n.target == "torch.Tensor.__mul__")
    assert linear.inputs[0] == Ref(mul.id)
    assert tuple(linear.outputs[0].shape) == (3, 2)


class Branchy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pos = nn.Linear(3, 3)
        self.neg = nn.Linear(3, 3)

    def forward(self, x):
        if x.sum() > 0:
            return self.pos(x)
        return -self.neg(x)


@pytest.mark.parametrize(("sign", "taken"), [(1.0, "pos"), (-1.0, "neg")])
def test_data_dependent_control_flow_records_the_path_taken(sign: float, taken: str) -> None:
    ir = torchatlas.trace(Branchy(), torch.full((2, 3), sign)).ir
    assert [s.path for s in ir.scopes] == ["", taken]
    expected = ["torch.Tensor.sum", "torch.Tensor.__gt__", LINEAR] + (["torch.Tensor.__neg__"] if taken == "neg" else [])
    assert targets(ir) == expected
    assert [n.path for n in ir.nodes if n.kind == "param"] == [f"{taken}.weight", f"{taken}.bias"]


class Recursive(nn.Module):
    def __init__(self, depth: int) -> None:
        super().__init__()
        self.fc = nn.Linear(2, 2)
        self.inner = Recursive(depth - 1) if depth > 1 else None

    def forward(self, x):
        x = self.fc(x)
        return self.inner(x) if self.inner is not None else x


def test_nested_scopes_have_their_caller_as_parent() -> None:
    ir = torchatlas.trace(Recursive(3), torch.randn(1, 2)).ir
    by_id = {s.id: s for s in ir.scopes}
    assert [(s.path, by_id[s.parent].path if s.parent else None) for s in ir.scopes] == [
        ("", None), ("fc", ""), ("inner", ""), ("inner.fc", "inner"), ("inner.inner", "inner"),
        ("inner.inner.fc", "inner.inner"),
    ]
    assert [ir.scope(n.scope).path for n in ir.ops()] == ["fc", "inner.fc", "inner.inner.fc"]
    assert ir.scope("s2").outputs == ir.scope("s4").outputs == [Ref(list(ir.ops())[-1].id)]


def test_a_plain_function_is_traced_under_a_root_scope() -> None:
    def double(x):
        return x * 2

    ir = torchatlas.trace(double, torch.randn(2)).ir
    assert len(ir.scopes) == 1 and ir.scopes[0].cls.endswith("double")
    assert wiring(ir) == [("torch.Tensor.__mul__", ("input:args[0]",))]


class Experts(nn.Module):
    def forward(self, hidden, index, weights):
        w = weights.reshape(-1)  # reads its third argument first
        i = index.reshape(-1)
        h = hidden[i // 2]
        return (h * w[:, None]).view(4, 2, 8).sum(1)


class RoutedBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gate = nn.Linear(8, 2)
        self.experts = Experts()

    def forward(self, x):
        vals, idx = self.gate(x).topk(2)
        return self.experts(x, idx, vals)


def test_a_calls_inputs_are_what_it_was_given_in_argument_order_not_as_first_read() -> None:
    ir = torchatlas.trace(RoutedBlock(), torch.randn(4, 8)).ir
    experts = next(s for s in ir.scopes if s.path == "experts")
    topk = next(n for n in ir.ops() if n.target == "torch.Tensor.topk")
    assert experts.inputs == [Ref("n0", 0), Ref(topk.id, 1), Ref(topk.id, 0)]  # (x, idx, vals)
    assert experts.meta["input_shapes"] == [[4, 8], [4, 2], [4, 2]]
    loaded = torchatlas.GraphIR.from_dict(ir.to_dict())
    assert next(s for s in loaded.scopes if s.path == "experts").inputs == experts.inputs
    assert "experts (Experts)  (4×8, 4×2 int64, 4×2) → 4×8" in torchatlas.trace(RoutedBlock(), torch.randn(4, 8)).tree()
