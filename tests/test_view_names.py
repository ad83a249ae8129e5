"""Names at the reading site (``_view._names``): a value read across module calls is called what
its reader calls it, never a name that means something else there."""

from __future__ import annotations

import pytest
import torch

import torchatlas
from torchatlas._ir import Scope, Source
from torchatlas._view import assigned_names

transformers = pytest.importorskip("transformers")


def _t5() -> torchatlas.Graph:
    cfg = transformers.AutoConfig.for_model(
        "t5", num_layers=2, num_decoder_layers=2, d_model=32, d_ff=64, num_heads=2, d_kv=16, vocab_size=100
    )
    torch.manual_seed(0)
    ids = torch.randint(0, 100, (1, 8))
    return torchatlas.trace(transformers.T5Model(cfg).eval(), kwargs={"input_ids": ids, "decoder_input_ids": ids[:, :4]})


def test_t5_cross_attention_reads_the_encoder_output_by_its_call_site_name() -> None:
    graph = _t5()
    lines = graph.tree(fold_repeats=False).splitlines()
    k = [line for line in lines if "── k (Linear)" in line and "← " in line]  # below its attention: the self-attention's read no side value
    assert len(k) == sum(s.path.endswith("EncDecAttention.k") for s in graph.ir.scopes)
    assert all(line.endswith("← key_value_states") for line in k)
    decoder = next(line for line in lines if "decoder (T5Stack)" in line)
    assert decoder.endswith("← decoder_input_ids, encoder_hidden_states")
    # the position bias is read as position_bias, never as the 'values' of the projection beside it
    reads = [line.rsplit("← ", 1)[1] for line in lines if "← " in line]
    assert "position_bias" in " ".join(reads) and "values" not in reads


def test_a_call_records_the_parameter_each_input_was_passed_as() -> None:
    graph = _t5()
    cross = next(s for s in graph.ir.scopes if s.path == "decoder.block.0.layer.1.EncDecAttention")
    assert "key_value_states" in cross.meta["input_names"]
    assert len(cross.meta["input_names"]) == len(cross.inputs)


def test_t5_position_bias_is_not_called_values_beside_the_value_cache() -> None:
    # compute_bias returns its local `values`; the decoder's self-attention also holds the value
    # cache's `values`: the bias takes the name its caller bound it to
    graph = _t5()
    attention = next(s for s in graph.ir.scopes if s.path == "decoder.block.0.layer.0.SelfAttention")
    named = [n for n in graph.ir.nodes if n.scope == attention.id and n.name in ("values", "position_bias")]
    bias = [n for n in named if n.outputs and len(n.outputs[0].shape) == 4 and n.outputs[0].shape[1] == 2 and n.outputs[0].shape[-1] == 4]
    assert bias and all(n.name == "position_bias" for n in bias)
    assert any(n.name == "values" and "cat" in (n.target or "") for n in named)  # the cache keeps its name


def test_resnet_shortcut_is_the_residual_it_is_assigned_to() -> None:
    cfg = transformers.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], layer_type="basic")
    torch.manual_seed(0)
    tree = torchatlas.trace(transformers.ResNetModel(cfg).eval(), torch.randn(1, 3, 32, 32)).tree()
    joins = [line.split("= ", 1)[1] for line in tree.splitlines() if "add (+=)" in line]
    assert joins and all(j.startswith("add (+=) (hidden_state, residual)") for j in joins)


@pytest.mark.parametrize(
    ("code", "names"),
    [
        ("residual = self.shortcut(residual)", ["residual"]),
        ("attn_output, _ = self.attn(", ["attn_output", "_"]),
        ("hidden_states = inputs_embeds + self.embed_positions(all_positions)", []),  # names the sum
        ("y = self.a(h) * 2", []),
        ("if x == self.f(y):", []),
    ],
)
def test_a_call_lines_assigned_names(code: str, names: list[str]) -> None:
    assert assigned_names(Scope("s1", "s0", "a", "m.A", 0, Source("m.py", 1, code))) == names
