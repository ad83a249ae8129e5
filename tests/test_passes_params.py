"""Parameter counts per module call; shared parameters counted once."""

from __future__ import annotations

import pytest
from _passes_builder import IRBuilder, linear_layer, param_entry

from torchatlas._passes import parameters


def _two_layer_ir():
    b = IRBuilder()
    x = b.input((2, 4))
    enc = b.scope("enc", "m.Enc")
    h = linear_layer(b, x, "enc.fc", 4, 8, parent=enc)
    y = linear_layer(b, h, "head", 8, 4)
    b.output(y)
    return b


def test_scope_owns_parameters_under_its_path():
    b = _two_layer_ir()
    b.meta["parameters"] = [
        param_entry("enc.fc.weight", (8, 4)),
        param_entry("enc.fc.bias", (8,)),
        param_entry("head.weight", (4, 8), requires_grad=False),
        param_entry("head.bias", (4,), dtype="float16"),
        param_entry("unused.weight", (100,)),  # never called, still the model's
    ]
    ir = parameters(b.build())
    root, enc, fc, head = ir.scopes
    assert (fc.meta["params"], fc.meta["trainable_params"], fc.meta["param_bytes"]) == (40, 40, 160)
    assert enc.meta["params"] == 40
    assert (head.meta["params"], head.meta["trainable_params"], head.meta["param_bytes"]) == (36, 4, 136)
    assert root.meta["params"] == ir.meta["param_count"] == 176
    assert ir.meta["trainable_param_count"] == 144
    assert ir.meta["shared_param_count"] == 0


def test_prefix_is_a_whole_path_component():
    b = IRBuilder()
    b.scope("fc", "m.Linear")
    b.scope("fc2", "m.Linear")
    b.meta["parameters"] = [param_entry("fc.weight", (3,)), param_entry("fc2.weight", (5,))]
    ir = parameters(b.build())
    assert [s.meta["params"] for s in ir.scopes] == [8, 3, 5]


def test_shared_parameter_counts_once_in_total_and_in_each_user():
    b = _two_layer_ir()
    b.meta["parameters"] = [
        param_entry("enc.fc.weight", (8, 4), shared_with=["head.weight"]),
        param_entry("enc.fc.bias", (8,)),
    ]
    ir = parameters(b.build())
    root, enc, fc, head = ir.scopes
    assert ir.meta["param_count"] == root.meta["params"] == 40
    assert ir.meta["shared_param_count"] == 1
    assert fc.meta["params"] == 40 and head.meta["params"] == 32


def test_without_a_parameter_list_falls_back_to_parameter_nodes():
    ir = parameters(_two_layer_ir().build())
    assert ir.meta["param_count"] == 8 * 4 + 8 + 4 * 8 + 4
    assert ir.scope("s2").meta["params"] == 40


def test_repeated_calls_report_the_same_parameters():
    b = IRBuilder()
    x = b.input((2, 4))
    s0 = b.scope("layer", "m.Layer", call=0)
    s1 = b.scope("layer", "m.Layer", call=1)
    b.meta["parameters"] = [param_entry("layer.weight", (4, 4))]
    b.op("torch.relu", [x], (2, 4), s0)
    ir = parameters(b.build())
    assert ir.scope(s0).meta["params"] == ir.scope(s1).meta["params"] == 16
    assert ir.meta["param_count"] == 16


def test_gpt2_tied_embeddings_match_model_parameters():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    import torchatlas

    cfg = transformers.AutoConfig.for_model("gpt2", n_layer=2, n_embd=32, n_head=2, vocab_size=500, n_positions=32)
    model = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    model.transformer.h[0].ln_1.weight.requires_grad_(False)
    ir = parameters(torchatlas.trace(model, (torch.randint(0, 500, (1, 8)),)).ir)
    unique = {id(p): p for p in model.parameters()}.values()  # parameters() already deduplicates
    assert ir.meta["param_count"] == sum(p.numel() for p in unique)
    assert ir.meta["trainable_param_count"] == sum(p.numel() for p in unique if p.requires_grad)
    assert ir.meta["shared_param_count"] == 1  # lm_head.weight is wte.weight
    by_path = {(s.path, s.call): s.meta for s in ir.scopes}
    assert by_path[("lm_head", 0)]["params"] == 500 * 32
    block = model.transformer.h[1]
    assert by_path[("transformer.h.1", 0)]["params"] == sum(p.numel() for p in block.parameters())
