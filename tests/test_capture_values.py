"""Inputs and outputs inside containers, non-tensor arguments, shapes, dtypes and devices."""

from __future__ import annotations

import collections
import dataclasses

import pytest
import torch
import torch.nn as nn
from _capture_helpers import outputs, wiring

import torchatlas

T = "torch.Tensor."


@dataclasses.dataclass
class Pair:
    p: torch.Tensor
    q: list


Point = collections.namedtuple("Point", "u w")


class Containers(nn.Module):
    def forward(self, tup, lst, dct, pair, point, *, kw):
        return {
            "a": tup[0] + lst[1],
            "b": [dct["k"] * pair.p, point.w],
            "c": Pair(kw["z"] + 1, [pair.q[0]]),
            "d": Point(point.u, kw["z"]),
        }


def test_tensors_in_tuples_lists_dicts_dataclasses_namedtuples_and_kwargs() -> None:
    t = lambda: torch.randn(2)  # noqa: E731
    args = ((t(), t()), [t(), t()], {"k": t()}, Pair(t(), [t()]), Point(t(), t()))
    ir = torchatlas.trace(Containers(), args, {"kw": {"z": t()}}).ir
    assert [n.path for n in ir.nodes if n.kind == "input"] == [
        "args[0][0]", "args[0][1]", "args[1][0]", "args[1][1]", "args[2]['k']",
        "args[3].p", "args[3].q[0]", "args[4].u", "args[4].w", "kwargs['kw']['z']",
    ]
    assert wiring(ir) == [
        (T + "__add__", ("input:args[0][0]", "input:args[1][1]")),
        (T + "__mul__", ("input:args[2]['k']", "input:args[3].p")),
        (T + "__add__", ("input:kwargs['kw']['z']",)),
    ]
    assert outputs(ir) == {
        "output['a']": "op0",
        "output['b'][0]": "op1",
        "output['b'][1]": "input:args[4].w",
        "output['c'].p": "op2",
        "output['c'].q[0]": "input:args[3].q[0]",
        "output['d'].u": "input:args[4].u",
        "output['d'].w": "input:kwargs['kw']['z']",
    }


def test_transformers_model_output_fields_are_outputs() -> None:
    modeling_outputs = pytest.importorskip("transformers.modeling_outputs")

    class Head(nn.Module):
        def forward(self, x):
            return modeling_outputs.BaseModelOutput(last_hidden_state=x * 2, hidden_states=(x, x + 1))

    ir = torchatlas.trace(Head(), torch.randn(2, 3)).ir
    assert outputs(ir) == {
        "output['last_hidden_state']": "op0",
        "output['hidden_states'][0]": "input:args[0]",
        "output['hidden_states'][1]": "op1",
    }


def test_transformers_model_output_in_inputs_and_kwargs() -> None:
    modeling_outputs = pytest.importorskip("transformers.modeling_outputs")

    class Consumer(nn.Module):
        def forward(self, encoded, *, past):
            return encoded.last_hidden_state @ past["logits"]

    encoded = modeling_outputs.BaseModelOutput(last_hidden_state=torch.randn(2, 3))
    past = modeling_outputs.CausalLMOutput(logits=torch.randn(3, 2))
    ir = torchatlas.trace(Consumer(), (encoded,), {"past": past}).ir
    assert wiring(ir) == [
        (T + "__matmul__", ("input:args[0]['last_hidden_state']", "input:kwargs['past']['logits']"))
    ]


class Consts(nn.Module):
    def forward(self, x, scale, mode="reflect"):
        y = torch.nn.functional.pad(x, (1, 1), value=scale)
        z = y.to(torch.float64)
        w = z[..., ::2, None]
        return w.sum(dim=-1, keepdim=True)


def test_non_tensor_arguments_are_kept_as_constants() -> None:
    ir = torchatlas.trace(Consts(), (torch.randn(2, 3), 2.5)).ir
    pad, to, getitem, total = ir.ops()
    assert pad.args == [{"tensor": 0}, [1, 1]] and pad.kwargs == {"mode": "constant", "value": 2.5}
    assert to.args == [{"tensor": 0}, {"dtype": "float64"}]
    assert getitem.args == [{"tensor": 0}, [{"ellipsis": True}, {"slice": [None, None, 2]}, None]]
    assert total.kwargs == {"dim": -1, "keepdim": True}
    assert [n.kind for n in ir.nodes] == ["input", "op", "op", "op", "op", "output"]


def test_output_shapes_dtypes_and_devices() -> None:
    ir = torchatlas.trace(Consts(), (torch.randn(2, 3), 2.5)).ir
    metas = [(tuple(n.outputs[0].shape), n.outputs[0].dtype, n.outputs[0].device) for n in ir.nodes]
    assert metas == [
        ((2, 3), "float32", "cpu"),
        ((2, 5), "float32", "cpu"),
        ((2, 5), "float64", "cpu"),
        ((2, 3, 1), "float64", "cpu"),
        ((2, 3, 1), "float64", "cpu"),
        ((2, 3, 1), "float64", "cpu"),
    ]


class Tensorish(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.table = torch.arange(4.0)  # a plain attribute, not a buffer

    def forward(self, idx):
        return self.table[idx] + torch.tensor(1.0)


def test_unregistered_tensors_are_constants() -> None:
    ir = torchatlas.trace(Tensorish(), torch.tensor([0, 2])).ir
    assert wiring(ir) == [
        (T + "__getitem__", ("constant", "input:args[0]")),
        ("torch.tensor", ()),
        (T + "__add__", ("op0", "op1")),
    ]
    table = next(n for n in ir.nodes if n.kind == "constant")
    assert table.path == "table"
    assert ir.ops().__next__().outputs[0].dtype == "float32"
    assert [m.dtype for n in ir.nodes if n.kind == "input" for m in n.outputs] == ["int64"]


class _KVCache:
    """A cache object as transformers passes one: tensors in attributes, updated by forward."""

    def __init__(self, keys: torch.Tensor) -> None:
        self.keys = keys
        self.owner = self  # objects may refer to themselves
        self._private = torch.zeros(1)  # underscore attributes are an object's own business


class AppendsToCache(torch.nn.Module):
    def forward(self, x: torch.Tensor, cache: _KVCache) -> tuple[torch.Tensor, _KVCache]:
        cache.keys = torch.cat([cache.keys, x], dim=0)
        return cache.keys.sum(0), cache


def test_tensors_held_by_plain_objects_passed_in_are_inputs() -> None:
    graph = torchatlas.trace(AppendsToCache(), (torch.randn(1, 4), _KVCache(torch.randn(3, 4))))
    inputs = {n.path: n.outputs[0].shape for n in graph.ir.nodes if n.kind == "input"}
    assert inputs == {"args[0]": (1, 4), "args[1].keys": (3, 4)}
    # the object handed back is state for the next call, not listed: its tensor is where cat made it
    outputs = {n.path: n.outputs[0].shape for n in graph.ir.nodes if n.kind == "output"}
    assert outputs == {"output[0]": (4,)}
    cat = next(n for n in graph.ir.ops() if n.target == "torch.cat")
    assert {graph.ir.node(r).path for r in cat.inputs} == {"args[0]", "args[1].keys"}


def test_a_transformers_cache_passed_in_is_read_as_inputs() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.AutoConfig.for_model("gpt2", n_layer=2, n_embd=32, n_head=2, vocab_size=100)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    ids = torch.randint(0, 100, (1, 4))
    with torch.no_grad():
        cache = model(ids, use_cache=True).past_key_values
        graph = torchatlas.trace(model, ids[:, :1], {"past_key_values": cache, "use_cache": True})
    inputs = [n.path for n in graph.ir.nodes if n.kind == "input"]
    assert inputs[0] == "args[0]" and len(inputs) == 5  # the token, and two layers' keys and values
    assert all(p.startswith("kwargs['past_key_values'].") for p in inputs[1:])
    # the attention reads the past keys: none of them is an anonymous constant
    assert not [n for n in graph.ir.nodes if n.kind == "constant" and len(n.outputs[0].shape) == 4]
    assert [n.path for n in graph.ir.nodes if n.kind == "output"] == ["output['logits']"]
