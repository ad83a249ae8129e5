"""User source lines (torch's frames skipped) and the variable names results were assigned to."""

from __future__ import annotations

import inspect
import weakref

import torch
import torch.nn as nn
from _capture_helpers import load_coolcnn

import torchatlas


def _line_of(obj, text: str) -> int:
    lines, start = inspect.getsourcelines(obj)
    return start + next(k for k, line in enumerate(lines) if text in line)


class Lines(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 3)
        self.norm = nn.LayerNorm(3)

    def forward(self, x):
        hidden = self.fc(x)
        gate = torch.sigmoid(hidden)
        out = self.norm(hidden * gate)
        return out


def test_ops_point_at_the_user_line_not_at_torch_internals() -> None:
    ir = torchatlas.trace(Lines(), torch.randn(2, 3)).ir
    fc_line = _line_of(Lines.forward, "hidden = self.fc(x)")
    got = [(n.target, n.source.file, n.source.line, n.source.code) for n in ir.ops()]
    assert got == [
        # ops inside torch.nn modules are attributed to the user line that called the module
        ("torch.nn.functional.linear", __file__, fc_line, "hidden = self.fc(x)"),
        ("torch.sigmoid", __file__, fc_line + 1, "gate = torch.sigmoid(hidden)"),
        ("torch.Tensor.__mul__", __file__, fc_line + 2, "out = self.norm(hidden * gate)"),
        ("torch.nn.functional.layer_norm", __file__, fc_line + 2, "out = self.norm(hidden * gate)"),
    ]
    assert [(s.path, s.source.line) for s in ir.scopes[1:]] == [("fc", fc_line), ("norm", fc_line + 2)]


def test_ops_are_named_after_the_variable_they_were_assigned_to() -> None:
    ir = torchatlas.trace(Lines(), torch.randn(2, 3)).ir
    assert [n.name for n in ir.ops()] == ["hidden", "gate", None, "out"]


def test_coolcnn_paths_are_named() -> None:
    coolcnn = load_coolcnn()
    ir = torchatlas.trace(coolcnn.CoolCNN(), coolcnn.example_input()).ir
    named = {n.name for n in ir.ops() if n.target == "torch.nn.functional.max_pool2d"}
    assert {"main_path", "parallel_path"} <= named
    for n in ir.ops():
        assert n.source is not None and n.source.file.endswith(("coolcnn.py", "_example.py")), n.target


class Unpack(nn.Module):
    def forward(self, x):
        first, second = x.chunk(2)
        return first * second


def test_tuple_assignment_names_a_multi_output_op() -> None:
    ir = torchatlas.trace(Unpack(), torch.randn(4)).ir
    assert [n.name for n in ir.ops()] == ["first, second", None]


class TwoStatements(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x):
        a = self.fc(x); b = a.sigmoid()  # noqa: E702
        c = b.relu()
        return c


def test_a_line_of_two_statements_names_nothing_rather_than_the_wrong_value() -> None:
    ir = torchatlas.trace(TwoStatements(), torch.randn(2, 3)).ir
    names = {n.target: n.name for n in ir.ops()}
    assert names == {"torch.nn.functional.linear": None, "torch.Tensor.sigmoid": None, "torch.Tensor.relu": "c"}


def _doubled(x):
    y = x * 2
    return y


class CallsAHelperTwice(nn.Module):
    def forward(self, a, b):
        first = _doubled(a)
        second = _doubled(b)
        return first + second


def test_each_call_of_a_helper_names_its_own_result() -> None:
    # The second call's frame often gets the first one's freed address; the two runs of the
    # helper's one assigning line must stay apart, or the first result goes unnamed.
    for _ in range(3):
        graph = torchatlas.trace(CallsAHelperTwice(), (torch.randn(2), torch.randn(2)))
        muls = [n for n in graph.ir.nodes if n.kind == "op" and n.target.endswith("__mul__")]
        assert [n.name for n in muls] == ["y", "y"]


def _sum_of_triple(x, made: list):
    big = x * 3
    made.append(weakref.ref(big))
    return big.sum()


class FreesAHelpersLocals(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.made: list = []
        self.alive_after_return: list[bool] = []

    def forward(self, x):
        total = _sum_of_triple(x, self.made)
        after = total + 1  # an op on the caller's line: the helper has returned
        self.alive_after_return.append(self.made[-1]() is not None)
        return after


def test_a_helpers_locals_are_freed_when_it_returns_not_when_the_trace_ends() -> None:
    # The trace holds the frames it has seen (so no address is reused under it), but lets a
    # frame go at its caller's next op: a helper's activations must not live to the end.
    model = FreesAHelpersLocals()
    torchatlas.trace(model, (torch.randn(1000),))
    assert model.alive_after_return == [False]


def _cache_update(cache: list, new):
    values = torch.cat([cache[0], new])
    cache[0] = values
    return values


class TwoFunctionsOneName(nn.Module):
    """One module call where two helpers each assign a variable called ``values``."""

    def compute_bias(self, n: int):
        positions = torch.arange(n)
        values = positions.float().unsqueeze(0)
        return values

    def forward(self, x):
        bias = self.compute_bias(x.shape[0])
        cached = _cache_update([torch.zeros(0)], x)
        return cached + bias


def test_a_name_two_functions_give_in_one_call_is_the_callers_for_the_returned_value() -> None:
    graph = torchatlas.trace(TwoFunctionsOneName(), (torch.randn(3),))
    names = {n.target.rsplit(".", 1)[-1]: n.name for n in graph.ir.nodes if n.kind == "op"}
    assert names["unsqueeze"] == "bias"  # compute_bias's `values`, bound to `bias` by its caller
    assert names["cat"] == "cached"  # the other `values`, bound to `cached`: no name is left for two values


def test_a_helpers_returned_name_stays_where_nothing_else_has_it() -> None:
    class OneHelper(nn.Module):
        compute_bias = TwoFunctionsOneName.compute_bias

        def forward(self, x):
            bias = self.compute_bias(x.shape[0])
            return x + bias

    graph = torchatlas.trace(OneHelper(), (torch.randn(3),))
    assert [n.name for n in graph.ir.nodes if n.kind == "op" and n.target.endswith("unsqueeze")] == ["values"]
