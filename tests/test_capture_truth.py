"""The graph is what the model computed, on the cases real models hit (issue: "The truth on real
models"): pass-through module calls, outputs that keep their slot, names only where the line
bound them, opaque TorchScript calls, compiled submodules, shape-only reads and hidden writes."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as functional
from _capture_helpers import outputs, wiring
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import torchatlas
from torchatlas import Ref
from torchatlas._passes import flops

F = "torch.nn.functional."
T = "torch.Tensor."


def trace(model: nn.Module | object, *args: object) -> torchatlas.GraphIR:
    return torchatlas.trace(model, args).ir


def ops_by_scope(ir: torchatlas.GraphIR) -> list[tuple[str, str]]:
    return [(ir.scope(n.scope).path, n.target or "") for n in ir.ops()]


# -- 1. module calls that return their input --------------------------------------------------


class Chain(nn.Module):
    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.a, self.d, self.i, self.b = nn.Linear(4, 4), nn.Dropout(0.1, inplace=inplace), nn.Identity(), nn.Linear(4, 4)

    def forward(self, x):
        return self.b(self.i(self.d(self.a(x))))


def test_pass_through_calls_are_on_the_data_path() -> None:
    ir = trace(Chain().eval(), torch.randn(2, 4))
    assert ops_by_scope(ir) == [("a", F + "linear"), ("d", F + "dropout"), ("i", "torchatlas.identity"), ("b", F + "linear")]
    assert [reads[:1] for _, reads in wiring(ir)] == [("input:args[0]",), ("op0",), ("op1",), ("op2",)]
    assert [s.meta.get("passthrough", False) for s in ir.scopes] == [False, False, True, True, False]
    assert "d (Dropout)" in torchatlas.Graph(ir).tree() and "i (Identity)" in torchatlas.Graph(ir).tree()
    assert not any(n.inplace for n in ir.ops())


def test_eval_dropout_in_place_is_no_write() -> None:
    ir = trace(Chain(inplace=True).eval(), torch.randn(2, 4))
    assert [n.inplace for n in ir.ops()] == [False, False, False, False]
    assert wiring(ir)[3][1][0] == "op2"


def test_dropout_in_training_is_a_real_op() -> None:
    ir = trace(Chain().train(), torch.randn(2, 4))
    dropout = next(n for n in ir.ops() if n.target == F + "dropout")
    assert dropout.kwargs["training"] is True and not ir.scope(dropout.scope).meta.get("passthrough")


class Returns(nn.Module):
    def forward(self, x):
        return x


class UsesReturns(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.keep, self.fc = Returns(), nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(self.keep(x)) + x


def test_a_user_module_returning_its_argument_is_a_node_its_readers_read_through() -> None:
    ir = trace(UsesReturns(), torch.randn(2, 4))
    assert wiring(ir)[0] == ("torchatlas.identity", ("input:args[0]",))
    # x is the same tensor the call returned, but the add reads it from x, not from the call.
    assert wiring(ir)[1][1][0] == "op0"
    assert wiring(ir)[2] == (T + "__add__", ("op1", "input:args[0]"))


# -- 2. a module's outputs keep their slot ------------------------------------------------------


class SecondOfSplit(nn.Module):
    def forward(self, x):
        return torch.split(x, [2, 5], dim=1)[1]


class Indices(nn.Module):
    def forward(self, x):
        return x.max(-1).indices


class Outer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.split, self.argmax = SecondOfSplit(), Indices()

    def forward(self, x):
        return self.split(x), self.argmax(x)


def test_module_outputs_keep_their_slot_shape_and_dtype() -> None:
    ir = trace(Outer(), torch.randn(1, 7))
    split, argmax = (next(s for s in ir.scopes if s.path == p) for p in ("split", "argmax"))
    assert [r.slot for r in split.outputs] == [1] and split.meta["output_shapes"] == [[1, 5]]
    assert [ir.value_meta(r).dtype for r in argmax.outputs] == ["int64"]
    loaded = torchatlas.GraphIR.from_dict(ir.to_dict())
    assert next(s for s in loaded.scopes if s.path == "split").outputs == split.outputs
    assert "split (SecondOfSplit)  1×7 → 1×5" in torchatlas.Graph(ir).tree(ascii=False)


class Packed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(32, 32, batch_first=True)

    def forward(self, x, lengths):
        packed = pack_padded_sequence(x, lengths, batch_first=True)
        out, _ = self.lstm(packed)
        out, _ = pad_packed_sequence(out, batch_first=True)
        return out


def test_lstm_over_a_packed_sequence_reports_its_data_output() -> None:
    ir = trace(Packed(), torch.randn(3, 4, 32), torch.tensor([4, 4, 2]))
    lstm = next(s for s in ir.scopes if s.path == "lstm")
    assert lstm.meta["output_shapes"][0] == [10, 32]


# -- 3. names only where the user's line bound the value -----------------------------------------


def test_names_from_library_calls_go_only_to_the_value_the_line_bound() -> None:
    ir = trace(Packed(), torch.randn(3, 4, 32), torch.tensor([4, 4, 2]))
    named = {n.name: n for n in ir.ops() if n.name}
    assert "packed" not in named  # an internal op of pack_padded_sequence is not what `packed` holds
    assert all(n.outputs[0].dtype != "int64" for n in ir.ops() if n.name == "out")


# -- 4. smaller truths ------------------------------------------------------------------------------

MADE_BEFORE = torch.ones(3)


def returns_a_tensor_made_before(x):
    return x * 2, MADE_BEFORE


def test_a_function_returning_a_tensor_made_before_tracing_outputs_a_constant() -> None:
    ir = torchatlas.trace(returns_a_tensor_made_before, torch.randn(3)).ir
    out = {n.path: ir.node(n.inputs[0]) for n in ir.nodes if n.kind == "output"}
    assert out["output[0]"].kind == "op" and out["output[1]"].kind == "constant"


class DataWrites(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        y = x * 3
        z = torch.zeros_like(x)
        z.data = y
        self.fc.weight.data = torch.eye(4) * 2
        return self.fc(z) + z


def test_data_assignments_are_writes_later_readers_read_from() -> None:
    ir = trace(DataWrites(), torch.randn(2, 4))
    setters = [n for n in ir.ops() if n.target == T + "data.__set__"]
    assert len(setters) == 2 and all(n.inplace for n in setters)
    linear = next(n for n in ir.ops() if n.target == F + "linear")
    assert ir.node(linear.inputs[0]) is setters[0] and ir.node(linear.inputs[1]) is setters[1]
    assert ir.node(setters[0].inputs[0]).target == T + "__mul__"


def test_max_norm_embedding_writes_its_weight_and_the_second_call_reads_it() -> None:
    emb = nn.Embedding(10, 4, max_norm=1.0)

    class Twice(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = emb

        def forward(self, ids):
            return self.emb(ids) + self.emb(ids)

    ir = trace(Twice(), torch.tensor([1, 2, 3]))
    first, second = [n for n in ir.ops() if n.target == F + "embedding"]
    assert first.inplace and ir.node(second.inputs[1]) is first


# -- 5. calls we cannot see into, and shape-only reads -------------------------------------------


@torch.jit.script
def scripted_double(a: torch.Tensor) -> torch.Tensor:
    return a * 2 + 1


class Traceable(nn.Module):
    def forward(self, x):
        return x.relu() + 1


class WithTorchScript(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.traced = torch.jit.trace(Traceable(), torch.randn(2, 4))
        self.b = nn.Linear(4, 4)

    def forward(self, x):
        return self.b(self.traced(scripted_double(self.a(x))))


def test_torchscript_calls_are_one_opaque_op_each_and_the_flow_stays_connected() -> None:
    ir = trace(WithTorchScript(), torch.randn(2, 4))
    targets = [n.target for n in ir.ops()]
    assert targets == [F + "linear", scripted_double.qualified_name, "Traceable.forward", F + "linear"]
    assert [reads[0] for _, reads in wiring(ir)] == ["input:args[0]", "op0", "op1", "op2"]
    assert [n.meta.get("opaque") for n in ir.ops()] == [None, "torchscript", "torchscript", None]
    assert ir.scope(list(ir.ops())[2].scope).path == "traced"
    assert not [n for n in ir.nodes if n.kind == "constant"]


class WithCompiled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.block = torch.compile(nn.Sequential(nn.Linear(4, 4), nn.ReLU()), backend="eager")

    def forward(self, x):
        return self.block(self.a(x))


def test_a_compiled_submodule_is_traced_as_the_eager_module_it_wraps() -> None:
    model, x = WithCompiled(), torch.randn(2, 4)
    expected = model(x)
    graph = torchatlas.trace(model, x)
    assert [s.path for s in graph.ir.scopes] == ["", "a", "block", "block.0", "block.1"]
    assert [n.path for n in graph.ir.nodes if n.kind == "param"] == ["a.weight", "a.bias", "block.0.weight", "block.0.bias"]
    assert torch.equal(model(x), expected)


def test_a_submodule_compiled_in_place_is_traced_and_stays_compiled() -> None:
    model, x = WithCompiled(), torch.randn(2, 4)
    model.a.compile(backend="eager")
    compiled = model.a._compiled_call_impl
    expected = model(x)
    graph = torchatlas.trace(model, x)
    assert [s.path for s in graph.ir.scopes] == ["", "a", "block", "block.0", "block.1"]
    assert [n.target for n in graph.ir.ops()][0] == "torch.nn.functional.linear"
    assert model.a._compiled_call_impl is compiled
    assert torch.equal(model(x), expected)


class ShapeReads(nn.Module):
    def forward(self, x, y):
        a = x.reshape(-1).view_as(y)
        b = torch.zeros_like(y) + a
        return b.type_as(x).expand_as(y) + y.new_zeros(())


def test_shape_only_reads_are_kept_but_are_not_data_flow() -> None:
    ir = trace(ShapeReads(), torch.randn(2, 3), torch.randn(6).view(2, 3))
    by_target = {n.target: n for n in ir.ops()}
    view_as = by_target[T + "view_as"]
    assert [ir.node(r).target for r in view_as.inputs] == [T + "reshape"]
    assert [ir.node(r).path for r in view_as.shape_inputs] == ["args[1]"]
    assert by_target["torch.zeros_like"].inputs == [] and len(by_target["torch.zeros_like"].shape_inputs) == 1
    assert view_as.args == [{"tensor": 0}, {"shape_of": 0}]
    assert by_target[T + "new_zeros"].inputs == []
    loaded = torchatlas.GraphIR.from_dict(ir.to_dict())
    assert [n.shape_inputs for n in loaded.ops()] == [n.shape_inputs for n in ir.ops()]


def test_init_by_keyword_is_a_write_a_view_taken_before_reads() -> None:
    class Init(nn.Module):
        def forward(self, x):
            w = torch.empty(2, 2)
            v = w[0]
            nn.init.constant_(tensor=w, val=1.0)
            return v + x

    ir = trace(Init(), torch.randn(2))
    constant = next(n for n in ir.ops() if n.target.endswith("constant_"))
    assert constant.inplace
    add = next(n for n in ir.ops() if n.target == T + "__add__")
    updated = ir.node(add.inputs[0])  # v, as the write into w left it
    assert updated.target == "torchatlas.updated" and ir.node(updated.inputs[1]) is constant


def test_set_re_points_a_tensor_and_later_readers_read_from_it() -> None:
    class SetsStorage(nn.Module):
        def forward(self, x):
            y = x * 2
            z = torch.empty(0)
            z.set_(y)
            return z + 1

    ir = trace(SetsStorage(), torch.randn(3))
    set_ = next(n for n in ir.ops() if n.target == T + "set_")
    assert set_.inplace and ir.node(set_.inputs[0]).target == T + "__mul__"
    add = next(n for n in ir.ops() if n.target == T + "__add__")
    assert ir.node(add.inputs[0]) is set_
    assert not hasattr(torch.Tensor.__dict__, "set_") and "set_" not in torch.Tensor.__dict__


def test_direct_aten_calls_are_named_by_their_op() -> None:
    class Direct(nn.Module):
        def forward(self, x):
            return torch.ops.aten.relu(x) + torch.ops.aten.add.Tensor(x, x)

    ir = trace(Direct(), torch.randn(3))
    assert [n.target for n in ir.ops()][:2] == ["aten.relu", "aten.add.Tensor"]


def test_refs_round_trip_through_the_document() -> None:
    ir = trace(Outer(), torch.randn(1, 7))
    assert all(isinstance(r, Ref) for n in ir.nodes for r in n.inputs)
    assert torchatlas.GraphIR.from_dict(ir.to_dict()).to_dict() == ir.to_dict()
    assert outputs(ir)["output[0]"].endswith(".1")


class PaddedEncoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=True)

    def forward(self, x: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        return self.enc(x, src_key_padding_mask=pad)


def test_transformer_fast_paths_run_as_they_would_untraced() -> None:
    # Untraced, eval and no_grad, these modules run fused kernels over a nested tensor; a trace
    # must not push them onto their slow path, which computes other numbers at padded positions.
    torch.manual_seed(0)
    encoder, attention = PaddedEncoder().eval(), nn.MultiheadAttention(16, 4, batch_first=True).eval()
    x = torch.randn(2, 5, 16)
    pad = torch.tensor([[False] * 5, [False, False, False, True, True]])
    seen: dict[str, Any] = {}
    encoder.register_forward_hook(lambda module, args, out: seen.__setitem__("encoder", out))
    with torch.no_grad():
        expected = encoder(x, pad)
        graph = torchatlas.trace(encoder, (x, pad))
        assert torch.equal(seen["encoder"], expected)
        targets = [n.target for n in graph.ir.ops()]
        assert targets.count("torch._transformer_encoder_layer_fwd") == 2
        assert "torch._nested_tensor_from_mask" in targets and "torch.Tensor.to_padded_tensor" in targets
        nested = next(n for n in graph.ir.ops() if n.target == "torch._nested_tensor_from_mask")
        assert nested.outputs[0].shape == (2, "j", 16)  # a ragged dim has no size
        attention_targets = [n.target for n in torchatlas.trace(attention, (x, x, x)).ir.ops()]
        assert attention_targets == ["torch._native_multi_head_attention"]
    # with grad on, untraced and traced alike take the slow path, op by op
    assert "torch.nn.functional.multi_head_attention_forward" in [n.target for n in torchatlas.trace(attention, (x, x, x)).ir.ops()]


def test_ops_with_several_public_names_are_named_as_called() -> None:
    # torch.mm and torch.dsmm are one C function (they compare equal); F.threshold is F._threshold
    class Aliases(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.act = nn.Threshold(0.1, 0.0)

        def forward(self, a, b):
            c = torch.mm(a, b)
            return self.act(functional.threshold(c, 0.0, 1.0)), a.mm(b)

    ir = trace(Aliases(), torch.randn(3, 4), torch.randn(4, 3))
    assert [n.target for n in ir.ops()] == ["torch.mm", F + "threshold", F + "threshold", T + "mm"]
    assert all(n.meta["flops"] is not None for n in flops(ir).ops() if n.target.endswith("mm"))
