"""Tracing leaves the model, torch and the caller's tensors exactly as they were."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
import torch.nn as nn
from _capture_helpers import load_coolcnn
from torch.nn.modules import module as nn_module

import torchatlas


def torch_global_state() -> dict:
    return {
        "forward_hooks": dict(nn_module._global_forward_hooks),
        "forward_pre_hooks": dict(nn_module._global_forward_pre_hooks),
        "always_called": dict(nn_module._global_forward_hooks_always_called),
        "function_modes": torch._C._len_torch_function_stack(),
        "dispatch_modes": torch._C._len_torch_dispatch_stack(),
        "grad": torch.is_grad_enabled(),
        "inference": torch.is_inference_mode_enabled(),
    }


def module_state(model: nn.Module) -> dict:
    return {
        name: (m.training, dict(m._forward_hooks), dict(m._forward_pre_hooks), type(m), m.forward)
        for name, m in model.named_modules()
    }


class Regularized(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.drop = nn.Dropout(0.3)
        self.bn = nn.BatchNorm1d(8)

    def forward(self, x):
        return self.bn(self.drop(torch.relu(self.fc(x)))).softmax(-1)


@pytest.mark.parametrize("make", [lambda: load_coolcnn().CoolCNN().eval(), lambda: Regularized().eval()])
def test_outputs_are_bit_identical_with_and_without_tracing(make) -> None:
    torch.manual_seed(0)
    model = make()
    x = torch.randn(4, 3, 32, 32) if isinstance(model, load_coolcnn().CoolCNN) else torch.randn(4, 8)
    expected = model(x)
    torchatlas.trace(model, x)
    assert torch.equal(model(x), expected)


def test_a_training_mode_trace_runs_forward_once_with_the_same_random_draws() -> None:
    model, x = Regularized().train(), torch.randn(4, 8)
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    torch.manual_seed(1)
    model(x)
    expected_state, expected_rng = model.state_dict(), torch.get_rng_state()
    expected_state = {k: v.clone() for k, v in expected_state.items()}
    model.load_state_dict(initial)
    torch.manual_seed(1)
    torchatlas.trace(model, x)
    assert torch.equal(torch.get_rng_state(), expected_rng)
    assert all(torch.equal(expected_state[k], v) for k, v in model.state_dict().items())


def test_nothing_is_left_installed_after_success() -> None:
    model, before_torch = Regularized(), torch_global_state()
    before_model = module_state(model)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    torchatlas.trace(model.eval(), torch.randn(2, 8))
    assert torch_global_state() == before_torch
    assert module_state(model) == {k: (False, *v[1:]) for k, v in before_model.items()}
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())


class Fails(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        y = self.fc(x)
        return y @ torch.ones(3, 3)


def test_an_exception_propagates_with_a_note_and_leaves_nothing_installed() -> None:
    before = torch_global_state()
    with pytest.raises(RuntimeError, match="cannot be multiplied") as info:
        torchatlas.trace(Fails(), torch.randn(2, 4))
    assert torch_global_state() == before
    [note] = info.value.__notes__
    line = Fails.forward.__code__.co_firstlineno + 2
    assert "\n" not in note
    assert "torch.Tensor.__matmul__" in note and f"{__file__}:{line}" in note


class FailsInSubmodule(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = Fails()

    def forward(self, x):
        return self.inner(x)


def test_an_exception_inside_a_nested_module_names_it_and_a_new_trace_works() -> None:
    with pytest.raises(RuntimeError) as info:
        torchatlas.trace(FailsInSubmodule(), torch.randn(2, 4))
    assert "'inner'" in info.value.__notes__[0]
    assert torchatlas.trace(Regularized().eval(), torch.randn(2, 8)).ir.scopes[0].class_name == "Regularized"


def test_python_errors_propagate_unchanged() -> None:
    class Broken(nn.Module):
        def forward(self, x):
            raise KeyError("missing")

    with pytest.raises(KeyError, match="missing"):
        torchatlas.trace(Broken(), torch.randn(2))
    assert torch_global_state()["function_modes"] == 0


def test_partial_trace_keeps_the_graph_up_to_the_failing_op() -> None:
    graph = torchatlas.trace(Fails(), torch.randn(2, 4), partial=True)
    assert isinstance(graph.error, RuntimeError)
    failed = list(graph.ir.ops())[-1]
    assert failed.target == "torch.Tensor.__matmul__" and "cannot be multiplied" in failed.meta["error"]
    assert torch_global_state()["function_modes"] == 0


class KeepsRef(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[weakref.ref] = []

    def forward(self, x):
        mid = torch.tanh(x * 2)
        self.seen.append(weakref.ref(mid))
        return mid.sum()


def test_no_activation_is_kept_alive_by_the_graph() -> None:
    model = KeepsRef()
    graph = torchatlas.trace(model, torch.randn(64))
    gc.collect()
    assert model.seen[0]() is None
    assert graph.ir.nodes  # the graph itself is still there


def test_inputs_are_not_modified() -> None:
    x = torch.randn(2, 8)
    copy = x.clone()
    torchatlas.trace(Regularized().eval(), x)
    assert torch.equal(x, copy) and x._version == 0


class Broken(nn.Module):
    def forward(self, x):
        return x @ torch.ones(5, 5)


class CatchesThenFails(nn.Module):
    def __init__(self, fail_later: bool) -> None:
        super().__init__()
        self.broken = Broken()
        self.fc = nn.Linear(4, 4)
        self.fail_later = fail_later

    def forward(self, x):
        try:
            y = self.broken(x)
        except RuntimeError:
            y = x * 2
        if self.fail_later:
            y = y[:, :3]
        return self.fc(y)


def test_an_error_caught_inside_forward_is_not_a_failure() -> None:
    ir = torchatlas.trace(CatchesThenFails(fail_later=False), torch.randn(2, 4)).ir
    assert "failure" not in ir.meta
    assert "failed" not in torchatlas.Graph(ir).tree(ascii=True)


def test_the_note_names_the_failure_that_escaped() -> None:
    with pytest.raises(RuntimeError) as info:
        torchatlas.trace(CatchesThenFails(fail_later=True), torch.randn(2, 4))
    [note] = info.value.__notes__
    assert "torch.nn.functional.linear" in note and "'fc'" in note


def test_a_failure_inside_a_torch_module_points_at_the_user_line_that_called_it() -> None:
    class WrongWidth(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(3, 4)

        def forward(self, x):
            return self.fc(x)

    with pytest.raises(RuntimeError) as info:
        torchatlas.trace(WrongWidth(), torch.randn(2, 4))
    [note] = info.value.__notes__
    line = WrongWidth.forward.__code__.co_firstlineno + 1
    assert "torch.nn.functional.linear" in note and "'fc' (Linear)" in note
    assert note.endswith(f"{__file__}:{line}")
