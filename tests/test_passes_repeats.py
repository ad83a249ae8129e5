"""Repeated structure: identical consecutive sibling calls fold into groups."""

from __future__ import annotations

import pytest
from _passes_builder import IRBuilder, linear_layer

from torchatlas._passes import find_repeats, structural_hashes


def _block(b: IRBuilder, x: str, path: str, width: int = 8, call: int = 0, with_params: bool = True) -> str:
    """``Block``: fc -> relu -> + x. ``with_params=False`` mimics a later call of a shared layer."""
    s = b.scope(path, "m.Block", call=call)
    fc = b.scope(f"{path}.fc", "torch.nn.modules.linear.Linear", parent=s, call=call)
    if with_params:
        w, bias = b.param(f"{path}.fc.weight", (width, width), fc), b.param(f"{path}.fc.bias", (width,), fc)
    else:
        w = next(n.id for n in b.nodes if n.path == f"{path}.fc.weight")
        bias = next(n.id for n in b.nodes if n.path == f"{path}.fc.bias")
    h = b.op("torch.nn.functional.linear", [x, w, bias], (2, width), fc)
    b.returns(fc, h)
    h = b.op("torch.relu", [h], (2, width), s)
    y = b.op("torch.Tensor.__add__", [h, x], (2, width), s)
    b.returns(s, y)
    return y


def test_numbered_layers_fold_into_one_group():
    b = IRBuilder()
    x = b.input((2, 8))
    for i in range(4):
        x = _block(b, x, f"layers.{i}")
    b.output(x)
    ir = find_repeats(b.build())
    [group] = ir.meta["repeat_groups"]
    layers = [s for s in ir.scopes if s.cls == "m.Block"]
    assert group == {"group": "g0", "scopes": [s.id for s in layers], "count": 4, "label": "layers.0–3 (Block) ×4", "totals": {}}
    assert [s.meta["repeat"] for s in layers] == [{"group": "g0", "index": i, "count": 4} for i in range(4)]
    # the Linear calls inside are not siblings of each other, so they do not fold
    assert all("repeat" not in s.meta for s in ir.scopes if s.class_name == "Linear")


def test_a_shape_change_breaks_the_run():
    b = IRBuilder()
    x = b.input((2, 8))
    for i in range(3):
        x = _block(b, x, f"layers.{i}")
    x = linear_layer(b, x, "proj", 8, 16)
    x = _block(b, x, "wide.0", width=16)
    x = _block(b, x, "wide.1", width=16)
    b.output(x)
    ir = find_repeats(b.build())
    assert [g["count"] for g in ir.meta["repeat_groups"]] == [3, 2]
    assert ir.meta["repeat_groups"][1]["label"] == "wide.0–1 (Block) ×2"


def test_loop_calling_one_shared_module_folds():
    # Parameters are recorded only on the first call; the later calls must still match.
    b = IRBuilder()
    x = b.input((2, 8))
    for call in range(5):
        x = _block(b, x, "shared", call=call, with_params=call == 0)
    b.output(x)
    ir = find_repeats(b.build())
    [group] = ir.meta["repeat_groups"]
    assert group["count"] == 5 and group["label"] == "shared (Block) ×5"


@pytest.mark.parametrize("shared", [False, True])
def test_analyze_totals_each_run_once_for_every_output(shared: bool) -> None:
    """The repeats pass writes each run's totals: FLOPs and MACs summed over the calls,
    parameters once per module (a loop over one module owns one set); the page and the
    summary read them there."""
    from torchatlas._passes import analyze
    from torchatlas._render import SummaryOptions, summary
    from torchatlas._view import page_folds

    b = IRBuilder()
    x = b.input((2, 8))
    for i in range(4):
        x = _block(b, x, "shared" if shared else f"layers.{i}", call=i if shared else 0, with_params=not shared or i == 0)
    b.output(x)
    ir = analyze(b.build())
    [group] = ir.meta["repeat_groups"]
    members = [ir.scope(sid).meta for sid in group["scopes"]]
    totals = group["totals"]
    assert totals["flops"] == sum(m["flops"] for m in members) > 0
    assert totals["macs"] == sum(m["macs"] for m in members)
    assert totals["params"] == (1 if shared else 4) * (8 * 8 + 8) == members[0]["params"] * (1 if shared else 4)
    [fold] = page_folds(ir).values()
    assert (fold.totals["f"], fold.totals["params"]) == (totals["flops"], totals["params"])
    assert f"= {totals['flops'] / 1000:.2f}K" in summary(ir, SummaryOptions())


def test_lookalike_siblings_with_different_names_do_not_fold():
    b = IRBuilder()
    x = b.input((2, 8))
    linear_layer(b, x, "q_proj", 8, 8)
    linear_layer(b, x, "k_proj", 8, 8)
    ir = find_repeats(b.build())
    assert ir.meta["repeat_groups"] == []
    assert ir.scope("s1").meta["structure_hash"] == ir.scope("s2").meta["structure_hash"]


def test_hash_sees_wiring_not_just_op_sequence():
    def build(residual_from_input: bool) -> str:
        b = IRBuilder()
        x = b.input((2, 8))
        s = b.scope("blk", "m.Block")
        h = b.op("torch.relu", [x], (2, 8), s)
        h2 = b.op("torch.relu", [h], (2, 8), s)
        b.op("torch.Tensor.__add__", [h2, x if residual_from_input else h], (2, 8), s)
        return structural_hashes(b.build())[s]

    assert build(True) != build(False)


def _trace_ir(model, *args):
    import torchatlas

    return find_repeats(torchatlas.trace(model, args).ir)


def test_albert_shared_layer_calls_fold():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.AutoConfig.for_model(
        "albert", num_hidden_layers=6, hidden_size=64, intermediate_size=128, num_attention_heads=4,
        embedding_size=32, vocab_size=500,
    )
    model = transformers.AutoModel.from_config(cfg).eval()
    ir = _trace_ir(model, torch.randint(0, 500, (1, 8)))
    [group] = ir.meta["repeat_groups"]
    members = [ir.scope(sid) for sid in group["scopes"]]
    assert group["count"] == 6
    assert {m.path for m in members} == {"encoder.albert_layer_groups.0"}
    assert [m.call for m in members] == list(range(6))


def _llama_on_meta(seq: int, **config):
    """The repeat groups of a Llama config's capture, built and run on the meta device."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.AutoConfig.for_model("llama", **config)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    ir = _trace_ir(model, torch.zeros(1, seq, dtype=torch.long, device="meta"))
    return ir, ir.meta["repeat_groups"]


@pytest.mark.slow
def test_llama_80_layers_on_meta_device_fold_to_80():
    _, [group] = _llama_on_meta(
        16, num_hidden_layers=80, hidden_size=8192, intermediate_size=28672, num_attention_heads=64,
        num_key_value_heads=8, vocab_size=128256,
    )
    assert group["count"] == 80
    assert group["label"] == "model.layers.0–79 (LlamaDecoderLayer) ×80"


def test_small_llama_folds_all_layers():
    ir, [group] = _llama_on_meta(
        8, num_hidden_layers=6, hidden_size=32, intermediate_size=64, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=100,
    )
    assert group["count"] == 6
    assert [ir.scope(sid).path for sid in group["scopes"]] == [f"model.layers.{i}" for i in range(6)]


def test_calls_with_the_callers_ops_between_them_do_not_fold():
    torch = pytest.importorskip("torch")
    nn = torch.nn

    class MLP(nn.Module):  # for layer in layers: x = gelu(layer(x))
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList(nn.Linear(8, 8) for _ in range(4))

        def forward(self, x):
            for layer in self.layers:
                x = torch.nn.functional.gelu(layer(x))
            return x

    assert _trace_ir(MLP(), torch.randn(2, 8)).meta["repeat_groups"] == []


def test_calls_side_by_side_do_not_fold_but_a_chain_of_them_does():
    torch = pytest.importorskip("torch")
    nn = torch.nn

    class Siamese(nn.Module):  # one encoder on two inputs: two branches, not a chain
        def __init__(self) -> None:
            super().__init__()
            self.enc = nn.Sequential(nn.Linear(8, 8), nn.ReLU())

        def forward(self, a, b):
            return torch.nn.functional.cosine_similarity(self.enc(a), self.enc(b))

    class SharedTwice(nn.Module):  # fc -> relu -> fc: the relu sits between the calls
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x):
            return self.fc(torch.relu(self.fc(x)))

    class Chain(nn.Module):  # fc -> fc -> fc: each call reads the last one's output
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x):
            for _ in range(3):
                x = self.fc(x)
            return x

    x = torch.randn(2, 8)
    assert _trace_ir(Siamese(), x, x.clone()).meta["repeat_groups"] == []
    assert _trace_ir(SharedTwice(), x).meta["repeat_groups"] == []
    [group] = _trace_ir(Chain(), x).meta["repeat_groups"]
    assert group["count"] == 3 and group["label"] == "fc (Linear) ×3"
