"""The ATen-level capture: what reaches the dispatcher, with module scopes and Python-op links."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from _capture_helpers import computed_wiring, load_coolcnn, outputs, targets, wiring
from _fx_compare import make_fx_wiring
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from torchatlas._capture import capture
from torchatlas._ir import GraphIR, Ref


def aten(model, *args, **kwargs) -> GraphIR:
    return capture(model, args, kwargs, level="aten").ir


def input_paths(ir: GraphIR) -> list[str]:
    return [n.path for n in ir.nodes if n.kind == "input"]


def scope_path(ir: GraphIR, node) -> str:
    return ir.scope(node.scope).path


# -- the same graph make_fx records -----------------------------------------------


def test_coolcnn_equals_make_fx_op_for_op_and_edge_for_edge():
    torch.manual_seed(0)
    coolcnn = load_coolcnn()
    model, x = coolcnn.CoolCNN(), coolcnn.example_input()
    ir = aten(model, x)
    expected = make_fx_wiring(lambda x: model(x), (x,), model, input_paths(ir))
    assert wiring(ir) == expected
    assert targets(ir)[:4] == [
        "aten.convolution.default", "aten.relu.default", "aten.detach.default", "aten.max_pool2d_with_indices.default",
    ]


def _tiny(kind: str, **config):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.AutoConfig.for_model(kind, **config)
    return transformers.AutoModel.from_config(cfg).eval()


@pytest.mark.slow
def test_bert_equals_make_fx_with_real_tensors():
    model = _tiny("bert", num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4, vocab_size=1000)
    ids = torch.randint(0, 1000, (1, 8))
    ir = aten(model, ids, use_cache=False)
    expected = make_fx_wiring(lambda ids: model(ids, use_cache=False).last_hidden_state, (ids,), model, input_paths(ir))
    assert len(expected) > 50
    assert computed_wiring(ir) == expected
    assert targets(ir).count("torchatlas.identity") == 5  # eval dropouts: embeddings, then attention and output per layer


# GPT-2 and Llama masks check their position ids with ``.all()`` on real tensors,
# which make_fx cannot trace; with fake tensors transformers skips that check, so
# both sides run under FakeTensorMode.
@pytest.mark.slow
@pytest.mark.parametrize(
    "kind, config",
    [
        ("gpt2", dict(n_layer=2, n_embd=64, n_head=4, vocab_size=1000)),
        ("llama", dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                       num_key_value_heads=4, vocab_size=1000)),
    ],
)
def test_decoder_equals_make_fx_under_fake_tensors(kind, config):
    model = _tiny(kind, **config)
    ids = torch.randint(0, 1000, (1, 8))
    with FakeTensorMode(allow_non_fake_inputs=True) as fake:
        ir = aten(model, fake.from_tensor(ids), use_cache=False)
    expected = make_fx_wiring(
        lambda ids: model(ids, use_cache=False).last_hidden_state, (ids,), model, input_paths(ir),
        tracing_mode="fake", _allow_non_fake_inputs=True,
    )
    assert len(expected) > 100
    assert computed_wiring(ir) == expected
    assert {o.device for n in ir.ops() for o in n.outputs} == {"cpu"}


# -- scopes and links to the Python level ------------------------------------------


def test_each_aten_op_keeps_its_module_scope_and_python_op():
    torch.manual_seed(0)
    coolcnn = load_coolcnn()
    model, x = coolcnn.CoolCNN(), coolcnn.example_input()
    ir = aten(model, x)
    python = capture(model, (x,), {}).ir
    fc1 = [n for n in ir.ops() if scope_path(ir, n) == "fully_connected1"]
    assert [n.target for n in fc1] == ["aten.t.default", "aten.addmm.default"]
    links = [n.meta["python_op"] for n in fc1]
    assert links[0] == links[1]
    assert links[0]["target"] == "torch.nn.functional.linear"
    # The index names the same op in the Python-level graph of the same run.
    python_op = python.nodes[links[0]["index"]]
    assert python_op.target == "torch.nn.functional.linear"
    assert python.scope(python_op.scope).path == "fully_connected1"
    for node in ir.ops():
        linked = python.nodes[node.meta["python_op"]["index"]]
        assert python.scope(linked.scope).path == scope_path(ir, node)
    assert ir.meta["level"] == "aten"
    assert {n.meta["phase"] for n in ir.ops()} == {"forward"}
    # Module calls return ATen-level nodes.
    fc1_scope = next(s for s in ir.scopes if s.path == "fully_connected1")
    assert fc1_scope.outputs == [Ref(fc1[1].id)]


def test_operator_name_survives_in_the_python_link():
    ir = aten(lambda a, b: a + b, torch.ones(2), torch.ones(2))
    (add,) = ir.ops()
    assert add.target == "aten.add.Tensor"
    assert add.meta["python_op"]["target"] == "torch.Tensor.__add__"


def test_source_lines_and_variable_names_point_at_user_code():
    def f(x):
        hidden = torch.tanh(x)
        return hidden * 2

    ir = aten(f, torch.ones(3))
    tanh = next(n for n in ir.ops() if n.target == "aten.tanh.default")
    assert tanh.source is not None and tanh.source.code == "hidden = torch.tanh(x)"
    assert tanh.name == "hidden"


# -- mutation, views, several outputs, non-tensor results -----------------------------


def test_inplace_op_is_the_last_writer_for_later_reads():
    def f(x):
        y = x * 2
        y.add_(1)
        return y + 0

    ir = aten(f, torch.ones(3))
    assert wiring(ir) == [
        ("aten.mul.Tensor", ("input:args[0]",)),
        ("aten.add_.Tensor", ("op0",)),
        ("aten.add.Tensor", ("op1",)),
    ]
    assert [n.inplace for n in ir.ops()] == [False, True, False]


def test_view_read_after_write_to_its_base_reads_it_updated():
    def f(x):
        y = x * 2
        v = y.view(-1)
        y.mul_(3)
        return v + 1

    ir = aten(f, torch.ones(2, 2))
    assert wiring(ir) == [
        ("aten.mul.Tensor", ("input:args[0]",)),
        ("aten.view.default", ("op0",)),
        ("aten.mul_.Tensor", ("op0",)),
        ("torchatlas.updated", ("op1", "op2")),  # v as y.mul_(3) left it
        ("aten.add.Tensor", ("op3",)),
    ]


def test_out_variant_writes_without_reading_its_out_argument():
    def f(a, b):
        buf = torch.empty(3)
        torch.add(a, b, out=buf)
        return buf * 1

    ir = aten(f, torch.ones(3), torch.ones(3))
    assert wiring(ir) == [
        ("aten.empty.memory_format", ()),
        ("aten.add.out", ("input:args[0]", "input:args[1]")),
        ("aten.mul.Tensor", ("op1",)),
    ]
    assert next(n for n in ir.ops() if n.target == "aten.add.out").inplace


def test_op_with_several_outputs_has_one_slot_per_tensor():
    ir = aten(lambda x: torch.max(x, dim=1).indices + 0, torch.randn(2, 3))
    maxed = ir.ops().__next__()
    assert maxed.target == "aten.max.dim"
    assert [o.dtype for o in maxed.outputs] == ["float32", "int64"]
    assert wiring(ir)[1] == ("aten.add.Tensor", ("op0.1",))


def test_ops_returning_non_tensors_are_recorded_with_their_value():
    def f(x):
        s = x.sum().item()
        same = torch.equal(x, x)
        return x * s if same else x

    ir = aten(f, torch.full((2,), 2.0))
    by_target = {n.target: n for n in ir.ops()}
    scalar = by_target["aten._local_scalar_dense.default"]
    assert scalar.outputs == [] and scalar.meta["returns"] == 4.0
    assert by_target["aten.equal.default"].meta["returns"] is True
    assert scalar.inputs == [Ref(by_target["aten.sum.default"].id)]


def test_outputs_and_json_round_trip():
    coolcnn = load_coolcnn()
    ir = aten(coolcnn.CoolCNN(), coolcnn.example_input())
    assert outputs(ir) == {"output": f"op{len(targets(ir)) - 1}"}
    again = GraphIR.from_dict(ir.to_dict())
    assert wiring(again) == wiring(ir)
    assert again.meta["level"] == "aten"


# -- other tensors: meta device, FakeTensorMode ----------------------------------------


def test_meta_device_records_the_same_ops_as_cpu():
    coolcnn = load_coolcnn()
    cpu = aten(coolcnn.CoolCNN(), coolcnn.example_input())
    with torch.device("meta"):
        model = coolcnn.CoolCNN()
    meta = aten(model, torch.empty(1, 3, 32, 32, device="meta"))
    assert wiring(meta) == wiring(cpu)
    assert {o.device for n in meta.ops() for o in n.outputs} == {"meta"}


def test_fake_tensor_mode_records_the_same_ops_as_real_tensors():
    coolcnn = load_coolcnn()
    model = coolcnn.CoolCNN()
    real = aten(model, coolcnn.example_input())
    with FakeTensorMode(allow_non_fake_inputs=True) as fake:
        faked = aten(model, fake.from_tensor(coolcnn.example_input()))
    assert wiring(faked) == wiring(real)  # no prim.device or other metadata queries


# -- failures and hygiene ------------------------------------------------------------------


class Broken(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return F.linear(self.fc(x), torch.ones(3, 5))


def test_failure_propagates_with_a_note_and_partial_keeps_the_graph():
    with pytest.raises(RuntimeError) as info:
        aten(Broken(), torch.ones(2, 4))
    assert any("torchatlas: forward failed" in n for n in getattr(info.value, "__notes__", []))
    result = capture(Broken(), (torch.ones(2, 4),), {}, level="aten", partial=True)
    ir, error = result.ir, result.error
    assert isinstance(error, RuntimeError)
    failed = [n for n in ir.ops() if "error" in n.meta]
    assert failed and failed[-1].target.startswith("aten.")
    assert ir.meta["failure"]["target"] == "torch.nn.functional.linear"


def test_nothing_stays_installed():
    from torch.overrides import _get_current_function_mode_stack
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    coolcnn = load_coolcnn()
    aten(coolcnn.CoolCNN(), coolcnn.example_input())
    with pytest.raises(RuntimeError):
        aten(Broken(), torch.ones(2, 4))
    assert _get_current_function_mode_stack() == []
    assert _get_current_dispatch_mode_stack() == []
    # A plain trace still works afterwards and records Python-level targets.
    assert targets(capture(lambda x: x + 1, (torch.ones(1),), {}).ir) == ["torch.Tensor.__add__"]


def test_tensor_attributes_the_model_does_not_register_keep_their_path():
    class WithTable(nn.Module):
        def __init__(self):
            super().__init__()
            self.table = torch.arange(4.0)  # a plain attribute: neither parameter nor buffer

        def forward(self, x):
            return x + self.table

    ir = aten(WithTable(), torch.ones(4))
    assert wiring(ir) == [("aten.add.Tensor", ("input:args[0]", "constant"))]
    assert [n.path for n in ir.nodes if n.kind == "constant"] == ["table"]


def test_written_arguments_that_are_not_returned_become_extra_outputs():
    class Norm(nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = nn.BatchNorm1d(3)

        def forward(self, x):
            return self.bn(x), self.bn.running_mean * 1

    ir = aten(Norm().train(), torch.randn(4, 3))
    norm = next(n for n in ir.ops() if "batch_norm" in n.target)
    assert norm.inplace
    # The running mean read after the call is the value batch norm wrote, not its result.
    read = next(n for n in ir.ops() if n.target == "aten.mul.Tensor")
    ((producer, slot),) = read.inputs
    assert producer == norm.id and slot >= 3
    assert norm.outputs[slot].shape == (3,)
