"""Property: on random models whose graph is known, the capture records exactly that graph."""

from __future__ import annotations

import pytest
import torch
from _capture_helpers import outputs, wiring
from _randmodels import Program, Step, build, programs
from hypothesis import HealthCheck, given, settings

import torchatlas

SETTINGS = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def check(program: Program) -> None:
    model = build(program)
    ir = torchatlas.trace(model.module, model.args).ir
    context = "\n" + model.source
    assert wiring(ir) == model.truth.ops, context
    assert [n.inplace for n in ir.ops()] == model.truth.inplace, context
    assert [ir.scope(n.scope).path for n in ir.ops()] == model.truth.op_scopes, context
    assert [(s.path, s.call) for s in ir.scopes] == model.truth.scopes, context
    assert outputs(ir) == model.truth.outputs, context


@SETTINGS
@given(programs())
def test_random_models_are_captured_exactly(program: Program) -> None:
    check(program)


@SETTINGS
@given(programs())
def test_random_models_under_inference_mode(program: Program) -> None:
    with torch.inference_mode():
        check(program)


def test_every_step_kind_is_generated_and_checked() -> None:
    """Each step kind alone, so a kind the strategy rarely draws still gets a fixed check."""
    from _randmodels import KINDS

    for kind, (n_operands, n_new) in KINDS.items():
        step = Step(kind, tuple(range(n_operands)), 1)
        check(Program((step,), (2 + n_new, 0)))


@pytest.mark.parametrize("inference", [False, True], ids=["grad", "inference_mode"])
def test_a_write_through_a_slice_becomes_an_update_in_the_call_that_next_reads_it(inference: bool) -> None:
    """Found by hypothesis: ``v0[0:2].mul_(2.0)``, ``v0`` appended to a tuple, then
    ``self.act(v0)``. The update of ``v0`` is made when ReLU reads it, inside ``act``;
    appending to a tuple reads nothing (the model of the truth once made it there)."""
    steps = (Step("slice_mul_", (0,)), Step("accumulate", (0,)), Step("act_inplace", (0,)))
    with torch.inference_mode(inference):
        check(Program(steps, (4,)))
    model = build(Program(steps, (4,)))
    assert model.truth.ops[2][0] == "torchatlas.updated" and model.truth.op_scopes[2] == "act"


def test_the_result_returned_through_a_tuple_is_the_pass_through_appended() -> None:
    """Found by hypothesis: ``v3 = drop(v0)``, ``v4 = drop(v0)``, ``acc = acc + (v3,)``,
    ``return acc[-1]``: the model returns the first Dropout's result, not the latest one."""
    steps = (Step("dropout_eval", (0,)), Step("dropout_eval", (0,)), Step("accumulate", (3,)))
    check(Program(steps, (5,)))


@pytest.mark.parametrize(
    "steps, returned",
    [
        # v3 = drop(v0); v4 = v0 @ v3; return v4, v0: v4 is another tensor, v0 what drop was given
        ((Step("dropout_eval", (0,)), Step("matmul", (0, 3))), (4, 0)),
        # v3 = drop(v0); v4 = v3 * 0.5; v5 = v0 + v4: the add reads v0 as it was given, not via v4
        ((Step("dropout_eval", (0,)), Step("scale", (3,)), Step("add", (0, 4))), (5,)),
    ],
    ids=["returned beside", "read beside"],
)
def test_arithmetic_on_a_pass_through_result_makes_another_tensor(steps: tuple[Step, ...], returned: tuple[int, ...]) -> None:
    """Found by hypothesis: a variable computed from the result by an operator does not hold it,
    so a reader (or a return) that loads it beside the original reads the original."""
    check(Program(steps, returned))


def test_writes_through_aliases_reach_later_readers() -> None:
    steps = (
        Step("linear", (0,), 0),      # v3
        Step("t", (3,)),              # v4 = v3.t()
        Step("setitem", (4, 1), 0),   # v4[:, 0:2] = v1[:, 0:2]  (writes v3 too)
        Step("add", (3, 2)),          # v5 reads v3 after the write
        Step("slice_mul_", (3,), 1),  # v3[1:3].mul_(2.0)
        Step("mixer", (4, 5)),        # reads v4 after that write
    )
    check(Program(steps, (7, 3, 4)))


def test_pass_through_results_passed_on_through_a_tuple_and_a_returned_module() -> None:
    """Issue 38's shapes: a Dropout's result appended to a tuple and read back, the original
    appended instead, and a module whose last call is the Dropout returning its result."""
    through = (Step("dropout_eval", (1,)), Step("accumulate", (3,)), Step("relu", (4,)), Step("add", (4, 1)))
    check(Program(through, (6, 5)))
    before = (Step("dropout_eval", (1,)), Step("accumulate", (1,)), Step("relu", (4,)), Step("relu", (3,)))
    check(Program(before, (5, 6)))
    tail = (Step("dropout_last", (0,)), Step("accumulate", (3,)), Step("linear", (4,), 1), Step("add", (3, 0)))
    check(Program(tail, (5, 6)))
