"""The op-level diff on pairs of real models with one known difference each: the marks exactly."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from torch import nn

import torchatlas


class Block(nn.Module):
    def __init__(self, width: int = 16, act: str = "relu", skip: bool = True, passthrough: bool = False) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, width)
        self.fc2 = nn.Linear(width, 8)
        self.act, self.skip = act, skip
        self.keep = nn.Identity() if passthrough else None

    def forward(self, x):
        h = getattr(torch, self.act)(self.fc1(x))
        if self.keep is not None:
            h = self.keep(h)
        y = self.fc2(h)
        return y + x if self.skip else y + y


class Net(nn.Module):
    def __init__(self, layers: int = 2, head: str = "head", **block: object) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(**block) for _ in range(layers))  # type: ignore[arg-type]
        self.add_module(head, nn.Linear(8, 4))
        self.head_name = head

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return getattr(self, self.head_name)(x)


X = torch.randn(3, 8)


def _net(**kw: object) -> Net:
    torch.manual_seed(0)
    return Net(**kw).eval()  # type: ignore[arg-type]


def _diff(**kw: object) -> torchatlas.GraphDiff:
    return torchatlas.diff(torchatlas.trace(_net(), X), torchatlas.trace(_net(**kw), X))


def _fields(d: torchatlas.GraphDiff) -> set[tuple[str, str, str, str]]:
    return {(c.scope, c.field, c.before, c.after) for c in d.changed}


def test_relu_to_tanh_is_an_op_change_in_both_folded_blocks() -> None:
    d = _diff(act="tanh")
    assert not d.equal
    assert _fields(d) == {(f"blocks.{i} (Block)", "op", "torch.relu", "torch.tanh") for i in (0, 1)}
    assert d.tree() == "\n".join([
        "~ <root> (Net)",
        "~   blocks.0–1 (Block) ×2  op torch.relu → torch.tanh",
        "      blocks.0.fc1 (Linear)",
        "      blocks.0.fc2 (Linear)",
        "    head (Linear)",
    ])


def test_a_resized_linear_changes_its_parameters_shapes_and_flops() -> None:
    d = _diff(width=32)
    fields = _fields(d)
    assert ("blocks.0.fc1 (Linear)", "parameter shapes", "weight 16×8, bias 16", "weight 32×8, bias 32") in fields
    assert ("blocks.0.fc1 (Linear)", "op shapes", "linear(3×8, 16×8, 16): 3×16", "linear(3×8, 32×8, 32): 3×32") in fields
    assert ("blocks.0 (Block)", "parameters", 280, 552) in fields  # the containing call's totals
    assert ("blocks.0.fc2 (Linear)", "input shapes", ((3, 16),), ((3, 32),)) in fields
    assert not any(c.scope.startswith("head") for c in d.changed)
    assert [line.split("  params")[0] for line in d.tree().splitlines()] == [
        "~ <root> (Net)",
        "~   blocks.0–1 (Block) ×2",
        "~     blocks.0.fc1 (Linear)",
        "~     blocks.0.fc2 (Linear)",
        "    head (Linear)",
    ]
    assert "params 280 → 552, FLOPs 1.6K → 3.2K" in d.tree().splitlines()[1]


def test_an_added_layer_is_one_line() -> None:
    d = _diff(layers=3)
    assert d.added == ["blocks.2 (Block)", "blocks.2.fc1 (Linear)", "blocks.2.fc2 (Linear)"]
    assert d.tree() == "\n".join([
        "~ <root> (Net)  params 596 → 876, FLOPs 3.4K → 5.0K",
        "    blocks.0–1 (Block) ×2",
        "+   blocks.2 (Block)  params 280, FLOPs 1.6K",
        "    head (Linear)",
    ])
    added_ops = [n for n in d.nodes if n.status == "added"]
    assert len(added_ops) == 4 + 4  # linear, relu, linear, add, and the new layer's parameters


def test_a_removed_skip_connection_is_a_data_flow_change_only() -> None:
    d = _diff(skip=False)
    assert {c.field for c in d.changed} == {"data flow"}
    assert ("blocks.0 (Block)", "data flow", "add ← linear in blocks.0.fc2, input args[0]",
            "add ← linear in blocks.0.fc2, linear in blocks.0.fc2") in _fields(d)
    assert not d.equal and not d.totals
    assert [n.status for n in d.nodes].count("changed") == 2  # the two adds


def test_a_renamed_module_computes_the_same() -> None:
    d = _diff(head="classifier")
    assert d.equal
    assert _fields(d) == {("classifier (Linear)", "path", "head (Linear)", "classifier (Linear)")}
    assert "~   classifier (Linear)  path head (Linear) → classifier (Linear)" in d.tree().splitlines()


def test_an_inserted_pass_through_computes_the_same() -> None:
    d = _diff(passthrough=True)
    assert d.equal and not d
    assert [c.label for c in d.calls if c.status == "pass-through"] == ["blocks.0.keep (Identity)", "blocks.1.keep (Identity)"]
    assert {n.status for n in d.nodes if n.a is None} == {"pass-through"}


@pytest.mark.parametrize("make", [_net, lambda: torchatlas._example.CoolCNN().eval()], ids=["net", "coolcnn"])
def test_eager_and_export_of_one_model_are_equal(make) -> None:
    import torchatlas._example  # noqa: F401  (the bundled CNN)

    model = make()
    x = X if isinstance(model, Net) else torch.randn(1, 3, 32, 32)
    eager = torchatlas.trace(model, x)
    exported = torchatlas.from_export(torch.export.export(model, (x,)))
    d = torchatlas.diff(eager, exported)
    assert d.equal, d.tree()
    assert {n.status for n in d.nodes} <= {"same", "pass-through", "unread"}


class Mixed(nn.Module):
    """Conv, BatchNorm (its num_batches_tracked unread), a residual, LayerNorm, GELU and a
    MultiheadAttention, which a trace records as one op and an export as 20-odd."""

    def __init__(self) -> None:
        super().__init__()
        self.c, self.bn = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.c2, self.bn2 = nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.pool, self.fc, self.ln, self.gelu = nn.AdaptiveAvgPool2d(1), nn.Linear(8, 4), nn.LayerNorm(8), nn.GELU()
        self.mha = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x):
        h = torch.relu(self.bn(self.c(x)))
        h = h + self.bn2(self.c2(h))
        t = self.pool(h).flatten(1).unsqueeze(1).repeat(1, 3, 1)
        t = t + self.mha(t, t, t, need_weights=False)[0]
        return torch.softmax(self.fc(self.gelu(self.ln(t.mean(1)))), -1)


def test_eager_and_export_line_up_a_decomposed_attention() -> None:
    torch.manual_seed(0)
    model, x = Mixed().eval(), torch.randn(2, 3, 8, 8)
    d = torchatlas.diff(torchatlas.trace(model, x), torchatlas.from_export(torch.export.export(model, (x,))))
    assert d.equal, d.tree()
    assert [n.status for n in d.nodes].count("unread") == 2  # the two num_batches_tracked


def test_an_op_spelled_out_differently_is_not_taken_for_a_decomposition() -> None:
    class Relu(nn.Module):
        def forward(self, x):
            return torch.relu(x) + 1

    class SiluByHand(nn.Module):
        def forward(self, x):
            return torch.sigmoid(x) * x + 1

    x = torch.randn(2, 4)
    d = torchatlas.diff(torchatlas.trace(Relu(), x), torchatlas.trace(SiluByHand(), x))
    assert not d.equal
    assert {(c.field, c.before, c.after) for c in d.changed if c.field.startswith("op")} == {
        ("op", "torch.relu", "torch.sigmoid"), ("op added", "—", "mul(2×4, 2×4): 2×4"),
    }


def test_only_a_full_slice_is_read_through() -> None:
    class Full(nn.Module):
        def forward(self, x):
            return x[:, :] + 1

    class Reordered(nn.Module):
        def forward(self, x):
            return x[[1, 0]] + 1

    class Plain(nn.Module):
        def forward(self, x):
            return x + 1

    x = torch.randn(2, 4)
    plain = torchatlas.trace(Plain(), x)
    assert torchatlas.diff(torchatlas.trace(Full(), x), plain).equal
    assert not torchatlas.diff(torchatlas.trace(Reordered(), x), plain).equal  # same shape, rows swapped


def test_eager_against_export_compares_the_numbers_an_op_was_given() -> None:
    class Scale(nn.Module):
        def __init__(self, by: float) -> None:
            super().__init__()
            self.by = by

        def forward(self, x):
            return torch.softmax(x * self.by, dim=-1)

    x = torch.randn(2, 4)
    exported = torchatlas.from_export(torch.export.export(Scale(0.25), (x,)))
    d = torchatlas.diff(torchatlas.trace(Scale(0.5), x), exported)
    assert _fields(d) == {("<root> (Scale)", "op arguments", "mul(0.5)", "mul(0.25)")}
    assert torchatlas.diff(torchatlas.trace(Scale(0.25), x), exported).equal


def test_eager_against_an_export_of_another_model_finds_the_change() -> None:
    exported = torchatlas.from_export(torch.export.export(_net(act="tanh"), (X,)))
    d = torchatlas.diff(torchatlas.trace(_net(), X), exported)
    assert not d.equal
    assert _fields(d) == {(f"blocks.{i} (Block)", "op", "torch.relu", "aten.tanh.default") for i in (0, 1)}


def test_every_node_of_a_is_accounted_for() -> None:
    a, b = torchatlas.trace(_net(), X), torchatlas.trace(_net(layers=1, width=12), X)
    d = torchatlas.diff(a, b)
    assert [n.a for n in d.nodes if n.a is not None] == [n.id for n in a.ir.nodes]
    assert all(n.reason for n in d.nodes if n.status in ("removed", "added", "pass-through"))
    assert sorted(n.b for n in d.nodes if n.b is not None and n.a is None) == sorted(
        set(n.id for n in b.ir.nodes) - {n.b for n in d.nodes if n.a is not None}
    )


# -- one known mutation of a random model --------------------------------------------

UNARY = ("relu", "tanh", "sigmoid")
WRITES = frozenset({"add_", "mul_", "relu_", "iadd", "setitem", "slice_mul_", "act_inplace"})


@st.composite
def mutated(draw: st.DrawFn):
    from _randmodels import Program, Step, programs

    program: Program = draw(programs())
    spots = [i for i, s in enumerate(program.steps) if s.kind in UNARY]
    if not spots:
        program = Program((Step("relu", (0,)), *program.steps), program.returned)
        spots = [0]
    at = draw(st.sampled_from(spots))
    old = program.steps[at]
    new = draw(st.sampled_from([k for k in UNARY if k != old.kind]))
    steps = list(program.steps)
    steps[at] = Step(new, old.operands, old.choice)
    return program, Program(tuple(steps), program.returned), old.kind, new


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_one_swapped_activation_is_exactly_the_change_found(case) -> None:
    from _randmodels import build

    before, after, old, new = case
    a, b = build(before), build(after)
    d = torchatlas.diff(torchatlas.trace(a.module, a.args), torchatlas.trace(b.module, b.args))
    assert [(c.field, c.before, c.after) for c in d.changed] == [("op", f"torch.{old}", f"torch.{new}")], a.source
    assert not d.equal and not d.added and not d.removed
    assert [n.status for n in d.nodes].count("changed") == 1


# Programs that write are skipped: depending on the draws, most of a run's may write (filter_too_much).
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.data())
def test_a_pass_through_call_added_at_the_end_computes_the_same(data) -> None:
    from _randmodels import Program, Step, build, programs

    program: Program = data.draw(programs())
    # A read after a write into part of a tensor records the updated tensor as a node (torchatlas.updated):
    # reading it only to hand it on would add that node. Programs here write nowhere.
    assume(not any(s.kind in WRITES for s in program.steps))
    kind = data.draw(st.sampled_from(["identity", "dropout_eval"]))
    operand = data.draw(st.integers(0, 2))  # one of the inputs, read again and handed on unused
    longer = Program((*program.steps, Step(kind, (operand,))), program.returned)
    a, b = build(program), build(longer)
    d = torchatlas.diff(torchatlas.trace(a.module, a.args), torchatlas.trace(b.module, b.args))
    assert d.equal and not d.changed and not d.added, (a.source, d.tree())
    assert [c.status for c in d.calls].count("pass-through") == 1


# -- a Llama pair ------------------------------------------------------------------------


def test_llama_with_wider_mlps_and_a_layer_more() -> None:
    transformers = pytest.importorskip("transformers")

    def llama(layers: int, intermediate: int) -> torchatlas.Graph:
        config = transformers.LlamaConfig(
            hidden_size=32, intermediate_size=intermediate, num_hidden_layers=layers, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=50,
        )
        torch.manual_seed(0)
        return torchatlas.trace(transformers.LlamaForCausalLM(config).eval(), torch.randint(0, 50, (1, 6)))

    d = torchatlas.diff(llama(2, 128), llama(3, 256))
    lines = d.tree().splitlines()
    layer = next(line for line in lines if "layers.0" in line)
    assert layer.startswith("~     model.layers.0–1 (LlamaDecoderLayer) ×2  params 15.4K → 27.7K, FLOPs 193.4K → 342.4K")
    assert "+     model.layers.2 (LlamaDecoderLayer)  params 27.7K, FLOPs 342.4K" in lines
    mlp = next(line for line in lines if line.lstrip("~ ").startswith("model.layers.0.mlp (LlamaMLP)"))
    assert "params 12.3K → 24.6K" in mlp
    assert ("model.layers.0.mlp (LlamaMLP)", "parameters", 12288, 24576) in _fields(d)
    summary = d.summary().splitlines()
    assert any("model.layers.0–1 (LlamaDecoderLayer) ×2" in row and "15.4K → 27.7K" in row for row in summary)
    assert not any("self_attn" in line for line in lines if line.startswith("~"))  # attention is unchanged


def test_cli_diffs_two_model_specs_and_prints_the_tree(capsys, tmp_path) -> None:
    from torchatlas._cli import main

    page = tmp_path / "diff.html"
    assert main(["diff", "torchatlas._example:CoolCNN", "torchatlas._example:CoolCNN", "-o", str(page)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == ["  <root> (CoolCNN)", "A and B compute the same (up to naming)"]
    assert page.is_file()
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    torchatlas.trace(_net(), X).save(a)
    torchatlas.trace(_net(act="tanh"), X).save(b)
    assert main(["diff", str(a), str(b), "-f", "summary"]) == 1  # they differ
    summary = capsys.readouterr().out
    assert "~    blocks.0–1 (Block) ×2" in summary and "op" in summary


class Loop(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        for _ in range(3):
            x = torch.relu(self.fc(x))
        return x


def test_aten_level_trace_and_export_and_fx_line_up() -> None:
    model, x = Loop().eval(), torch.randn(2, 4)
    eager = torchatlas.trace(model, x)
    aten = torchatlas.trace(model, x, level="aten")  # linear recorded as t(w) + addmm
    exported = torchatlas.from_export(torch.export.export(model, (x,)))
    fx = torchatlas.from_fx(torch.fx.symbolic_trace(model))  # no shapes, input named x
    assert torchatlas.diff(aten, exported).equal
    assert torchatlas.diff(eager, aten).equal
    assert torchatlas.diff(eager, fx).equal


def test_dtype_and_argument_changes() -> None:
    x = torch.randn(2, 4)
    torch.manual_seed(0)
    d = torchatlas.diff(torchatlas.trace(nn.Linear(4, 4), x), torchatlas.trace(nn.Linear(4, 4).double(), x.double()))
    assert ("<root> (Linear)", "op dtypes", "linear float32", "linear float64") in _fields(d) and not d.equal

    class Softmax(nn.Module):
        def __init__(self, dim: int) -> None:
            super().__init__()
            self.dim = dim

        def forward(self, x):
            return torch.softmax(x, dim=self.dim)

    d = torchatlas.diff(torchatlas.trace(Softmax(0), x), torchatlas.trace(Softmax(1), x))
    assert _fields(d) == {("<root> (Softmax)", "op arguments", "softmax(dim=0)", "softmax(dim=1)")}
