"""FLOPs and MACs: per-op formulas on hand-built graphs, totals against FlopCounterMode on real models."""

from __future__ import annotations

import pytest
import torch
from _passes_builder import IRBuilder, linear_layer

import torchatlas
from torchatlas._passes import flops
from torchatlas._passes._flops import CONTRACTION_CATEGORIES


def _one_op(target: str, in_shapes: list[tuple[int, ...]], out: tuple[int, ...], args=None, kwargs=None) -> dict:
    b = IRBuilder()
    ins = [b.input(s, path=f"args[{i}]") for i, s in enumerate(in_shapes)]
    y = b.op(target, ins, out, args=args, kwargs=kwargs)
    b.output(y)
    return flops(b.build()).node(y).meta


def test_conv2d_counts_every_output_against_its_kernel():
    meta = _one_op("torch.conv2d", [(2, 3, 32, 32), (16, 3, 3, 3), (16,)], (2, 16, 32, 32))
    assert meta["macs"] == 2 * 16 * 32 * 32 * 3 * 3 * 3
    assert meta["flops"] == 2 * meta["macs"]
    assert meta["flop_category"] == "conv"


def test_grouped_conv_uses_channels_per_group():
    # groups=4: weight is (C_out, C_in / 4, k, k)
    args = [{"tensor": 0}, {"tensor": 1}, None, [1], [1], [1], 4]
    meta = _one_op("torch.nn.functional.conv1d", [(1, 8, 10), (8, 2, 3)], (1, 8, 10), args=args)
    assert meta["macs"] == 8 * 10 * 2 * 3


def test_transposed_conv_counts_input_positions():
    meta = _one_op("torch.conv_transpose2d", [(1, 4, 5, 5), (4, 6, 3, 3)], (1, 6, 7, 7))
    assert meta["macs"] == 4 * 5 * 5 * 6 * 3 * 3


def test_linear_ignores_bias_like_flop_counter():
    meta = _one_op("torch.nn.functional.linear", [(2, 7, 64), (32, 64), (32,)], (2, 7, 32))
    assert meta["macs"] == 2 * 7 * 32 * 64
    assert meta["flops"] == 2 * 2 * 7 * 32 * 64


@pytest.mark.parametrize(
    ("target", "shapes", "out", "macs"),
    [
        ("torch.matmul", [(4, 5, 6), (6, 7)], (4, 5, 7), 4 * 5 * 7 * 6),
        ("torch.Tensor.__matmul__", [(3, 8), (8, 2)], (3, 2), 3 * 2 * 8),
        ("torch.bmm", [(3, 4, 5), (3, 5, 6)], (3, 4, 6), 3 * 4 * 6 * 5),
        ("torch.addmm", [(6,), (4, 5), (5, 6)], (4, 6), 4 * 6 * 5),
        ("torch.baddbmm", [(3, 4, 6), (3, 4, 5), (3, 5, 6)], (3, 4, 6), 3 * 4 * 6 * 5),
        ("torch.mv", [(4, 5), (5,)], (4,), 4 * 5),
        ("torch.dot", [(9,), (9,)], (), 9),
    ],
)
def test_matmul_family(target, shapes, out, macs):
    meta = _one_op(target, shapes, out)
    assert (meta["macs"], meta["flops"], meta["flop_category"]) == (macs, 2 * macs, "matmul")


def test_reflected_matmul_takes_the_inner_size_from_the_left_operand():
    # ``a @ b`` reaching the mode as ``b.__rmatmul__(a)``: self (b) comes first
    meta = _one_op("torch.Tensor.__rmatmul__", [(8, 2), (3, 8)], (3, 2))
    assert meta["macs"] == 3 * 2 * 8


@pytest.mark.parametrize(
    ("equation", "shapes", "out", "macs"),
    [
        ("bij,bjk->bik", [(3, 4, 5), (3, 5, 6)], (3, 4, 6), 3 * 4 * 5 * 6),
        ("...ij,...jk->...ik", [(2, 3, 4, 5), (1, 3, 5, 6)], (2, 3, 4, 6), 2 * 3 * 4 * 5 * 6),
        ("i,j->ij", [(4,), (5,)], (4, 5), 20),
    ],
)
def test_einsum_two_operands(equation, shapes, out, macs):
    args = [equation, {"tensor": 0}, {"tensor": 1}]
    meta = _one_op("torch.einsum", shapes, out, args=args)
    assert meta["macs"] == macs


def test_einsum_with_operand_list_and_three_operands():
    listed = _one_op("torch.einsum", [(3, 4), (4, 5)], (3, 5), args=["ij,jk->ik", [{"tensor": 0}, {"tensor": 1}]])
    assert listed["macs"] == 60
    three = _one_op("torch.einsum", [(3, 4), (4, 5), (5, 6)], (3, 6), args=["ij,jk,kl->il", {"tensor": 0}, {"tensor": 1}, {"tensor": 2}])
    assert three["flops"] is None


def test_attention_matches_torch_formula():
    flop_counter = pytest.importorskip("torch.utils.flop_counter")
    q, k, v = (2, 4, 16, 8), (2, 4, 24, 8), (2, 4, 24, 12)
    meta = _one_op("torch.nn.functional.scaled_dot_product_attention", [q, k, v], (2, 4, 16, 12))
    assert meta["flops"] == flop_counter.sdpa_flop_count(q, k, v)
    assert meta["flop_category"] == "attention"


def test_norms_pools_elementwise_embedding():
    b = IRBuilder()
    x = b.input((2, 8, 4, 4))
    w, bias = b.param("bn.weight", (8,)), b.param("bn.bias", (8,))
    mean, var = b.param("bn.running_mean", (8,), kind="buffer"), b.param("bn.running_var", (8,), kind="buffer")
    bn = b.op("torch.nn.functional.batch_norm", [x, mean, var, w, bias], (2, 8, 4, 4))
    ln = b.op("torch.nn.functional.layer_norm", [x], (2, 8, 4, 4), args=[{"tensor": 0}, [4]])
    pool = b.op("torch.nn.functional.max_pool2d", [x], (2, 8, 2, 2), args=[{"tensor": 0}, 2])
    pool3 = b.op("torch.nn.functional.avg_pool2d", [x], (2, 8, 2, 2), args=[{"tensor": 0}, [3, 1]])
    relu = b.op("torch.relu", [x], (2, 8, 4, 4))
    add = b.op("torch.Tensor.__iadd__", [x, relu], (2, 8, 4, 4), inplace=True)
    total = b.op("torch.Tensor.sum", [x], ())
    ids = b.input((2, 5), dtype="int64", path="args[1]")
    table = b.param("emb.weight", (100, 16))
    emb = b.op("torch.nn.functional.embedding", [ids, table], (2, 5, 16))
    view = b.op("torch.Tensor.view", [x], (2, 128), args=[{"tensor": 0}, 2, 128])
    ir = flops(b.build())
    n = 2 * 8 * 4 * 4
    expected = {
        bn: (7 * n, "norm"),  # 5 per element + weight + bias
        ln: (5 * n, "norm"),  # no affine tensors passed
        pool: (2 * 8 * 2 * 2 * 4, "pool"),
        pool3: (2 * 8 * 2 * 2 * 3, "pool"),
        relu: (n, "elementwise"),
        add: (n, "elementwise"),
        total: (n, "reduction"),
        emb: (0, "embedding"),
        view: (0, "data"),
    }
    for nid, (count, category) in expected.items():
        meta = ir.node(nid).meta
        assert (meta["flops"], meta["flop_category"], meta["macs"]) == (count, category, 0), ir.node(nid).target


def test_dropout_is_free_unless_training():
    train = _one_op("torch.nn.functional.dropout", [(4, 4)], (4, 4), args=[{"tensor": 0}, 0.1, True])
    evaluation = _one_op("torch.nn.functional.dropout", [(4, 4)], (4, 4), args=[{"tensor": 0}, 0.1, False])
    assert (train["flops"], evaluation["flops"]) == (16, 0)


def test_unknown_op_is_none_and_counted_not_zero():
    b = IRBuilder()
    x = b.input((4, 4))
    known = b.op("torch.relu", [x], (4, 4))
    mystery = b.op("mylib.frobnicate", [known], (4, 4))
    b.output(mystery)
    ir = flops(b.build())
    assert ir.node(mystery).meta["flops"] is None and ir.node(mystery).meta["macs"] is None
    assert ir.meta["flops_unknown_ops"] == 1
    assert ir.meta["flops_unknown_targets"] == {"mylib.frobnicate": 1}
    assert ir.scopes[0].meta["flops_unknown"] == 1
    assert ir.meta["flops"] == 16


def test_scope_totals_include_children_and_input_is_not_mutated():
    b = IRBuilder()
    x = b.input((2, 10))
    block = b.scope("block", "m.Block")
    h = linear_layer(b, x, "block.fc1", 10, 20, parent=block)
    h = b.op("torch.relu", [h], (2, 20), block)
    y = linear_layer(b, h, "block.fc2", 20, 5, parent=block)
    b.output(y)
    ir = b.build()
    out = flops(ir)
    assert all(not n.meta for n in ir.nodes) and all(not s.meta for s in ir.scopes)
    fc1, fc2 = 2 * 2 * 10 * 20, 2 * 2 * 20 * 5
    assert out.scope("s2").meta["flops"] == fc1
    assert out.scope(block).meta["flops"] == fc1 + fc2 + 40
    assert out.scope(block).meta["macs"] == (fc1 + fc2) // 2
    assert out.scopes[0].meta["flops"] == out.meta["flops"] == fc1 + fc2 + 40


# -- real captures -------------------------------------------------------------


def _contraction_flops(ir) -> int:
    return sum(n.meta["flops"] for n in ir.ops() if n.meta.get("flop_category") in CONTRACTION_CATEGORIES)


def _compare_with_flop_counter(model, args, skip_categories=frozenset()):
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    import torchatlas

    with torch.no_grad():
        ir = flops(torchatlas.trace(model, args).ir)
        with FlopCounterMode(display=False) as counter:
            model(*args)
    ours = sum(
        n.meta["flops"]
        for n in ir.ops()
        if n.meta.get("flop_category") in CONTRACTION_CATEGORIES - skip_categories
    )
    theirs = counter.get_total_flops()
    assert theirs > 0
    assert abs(ours - theirs) <= 0.01 * theirs, (ours, theirs)
    return ir


def test_cnn_matches_flop_counter():
    torch = pytest.importorskip("torch")
    from torch import nn

    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Conv2d(8, 16, 3, stride=2, groups=2),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(16 * 7 * 7, 10),
    ).eval()
    ir = _compare_with_flop_counter(model, (torch.randn(2, 3, 32, 32),))
    assert ir.meta["flops_unknown_ops"] == 0


def _hf_model(kind: str, attn: str, **extra):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.AutoConfig.for_model(kind, **extra)
    cfg._attn_implementation = attn
    return transformers.AutoModel.from_config(cfg).eval()


_HF_CONFIGS = {
    "bert": dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4, vocab_size=1000),
    "gpt2": dict(n_layer=2, n_embd=64, n_head=4, vocab_size=1000, n_positions=64),
    "llama": dict(
        num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=1000,
    ),
}


@pytest.mark.parametrize("kind", sorted(_HF_CONFIGS))
def test_transformers_match_flop_counter(kind):
    torch = pytest.importorskip("torch")
    ids = torch.randint(0, 1000, (2, 12))
    # eager attention is plain matmuls, which FlopCounterMode counts on CPU too
    ir = _compare_with_flop_counter(_hf_model(kind, "eager", **_HF_CONFIGS[kind]), (ids,))
    assert ir.meta["flops_unknown_ops"] == 0, ir.meta["flops_unknown_targets"]


@pytest.mark.parametrize("kind", sorted(_HF_CONFIGS))
def test_transformers_with_sdpa(kind):
    torch = pytest.importorskip("torch")
    ids = torch.randint(0, 1000, (2, 12))
    # FlopCounterMode does not count CPU's fused attention kernel, so compare the rest
    ir = _compare_with_flop_counter(_hf_model(kind, "sdpa", **_HF_CONFIGS[kind]), (ids,), frozenset({"attention"}))
    attention = [n for n in ir.ops() if n.meta.get("flop_category") == "attention"]
    assert len(attention) == 2 and all(n.meta["flops"] > 0 for n in attention)


@pytest.mark.parametrize(
    "make",
    [
        lambda nn, torch: (nn.MultiheadAttention(16, 2, batch_first=True), torch.randn(3, 4, 16), torch.randn(3, 5, 16), torch.randn(3, 5, 16)),
        lambda nn, torch: (nn.MultiheadAttention(16, 2, kdim=8, vdim=12), torch.randn(4, 3, 16), torch.randn(5, 3, 8), torch.randn(5, 3, 12)),
        lambda nn, torch: (nn.GRU(8, 16, 2, bidirectional=True), torch.randn(5, 3, 8)),
        lambda nn, torch: (nn.RNN(8, 16), torch.randn(5, 3, 8)),
        lambda nn, torch: (nn.LSTM(8, 16, proj_size=4, batch_first=True), torch.randn(3, 5, 8)),
        lambda nn, torch: (nn.GRU(8, 16), nn.utils.rnn.pack_padded_sequence(torch.randn(5, 3, 8), [5, 4, 2])),
    ],
    ids=["mha", "mha-kdim-vdim", "gru-bidirectional", "rnn", "lstm-proj", "gru-packed"],
)
@pytest.mark.filterwarnings("ignore:LSTM with projections is not supported")
def test_fused_attention_and_recurrent_modules_match_flop_counter(make):
    torch = pytest.importorskip("torch")
    model, *args = make(torch.nn, torch)
    ir = _compare_with_flop_counter(model.eval(), tuple(args))
    assert ir.meta["flops_unknown_ops"] == 0


@pytest.mark.parametrize("kind", ["cnn", "llama"])
def test_aten_level_capture_matches_flop_counter(kind):
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    from torchatlas import _capture

    if kind == "cnn":
        from torch import nn

        model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(32, 4))
        args = (torch.randn(2, 3, 16, 16),)
    else:
        model = _hf_model("llama", "sdpa", **_HF_CONFIGS["llama"])
        args = (torch.randint(0, 1000, (2, 12)),)
    model.eval()
    ir = flops(_capture.capture(model, args, {}, level="aten").ir)
    assert all(n.target.startswith("aten.") for n in ir.ops())
    with FlopCounterMode(display=False) as counter:
        model(*args)
    # CPU's fused attention kernel is invisible to FlopCounterMode
    ours = sum(n.meta["flops"] for n in ir.ops() if n.meta.get("flop_category") in {"conv", "matmul"})
    assert ours == counter.get_total_flops()
    assert ir.meta["flops_unknown_ops"] == 0, ir.meta["flops_unknown_targets"]
    assert {n.meta["flop_category"] for n in ir.ops()} >= ({"conv", "norm", "pool"} if kind == "cnn" else {"attention", "matmul"})


def test_a_call_that_returned_its_input_costs_nothing():
    # nn.Identity, eval-mode drop_path: the call's node must not make its callers' totals unknown
    meta = _one_op("torchatlas.identity", [(2, 8)], (2, 8), args=[{"tensor": 0}])
    assert (meta["flops"], meta["macs"]) == (0, 0)


def test_operands_passed_by_keyword_count_as_positional_ones() -> None:
    class ByKeyword(torch.nn.Module):  # BLOOM calls alibi.baddbmm(batch1=..., batch2=..., beta=..., alpha=...)
        def forward(self, bias, q, k, x, w):
            return (
                bias.baddbmm(q, k), bias.baddbmm(batch1=q, batch2=k, beta=1.0, alpha=0.5),
                torch.matmul(x, w), torch.matmul(input=x, other=w),
                torch.addmm(x[0, :1], x, w), torch.addmm(x[0, :1], mat1=x, mat2=w),
                torch.addmv(x[:, 0], x, vec=w[:, 0]),
            )

    args = (torch.randn(2, 3, 5), torch.randn(2, 3, 4), torch.randn(2, 4, 5), torch.randn(3, 4), torch.randn(4, 4))
    counted = [n.meta["flops"] for n in flops(torchatlas.trace(ByKeyword(), args).ir).ops() if n.meta["flop_category"] == "matmul"]
    assert counted == [2 * 2 * 3 * 4 * 5] * 2 + [2 * 3 * 4 * 4] * 4 + [2 * 3 * 4]


def test_grouped_mm_of_moe_experts_counts_each_row_against_its_groups_weights() -> None:
    class Experts(torch.nn.Module):  # transformers 5's MoE layers run their experts this way
        def forward(self, tokens, weights, offsets):
            return torch._grouped_mm(tokens, weights, offs=offsets)

    args = (torch.randn(10, 16), torch.randn(3, 16, 8), torch.tensor([3, 7, 10], dtype=torch.int32))
    (op,) = flops(torchatlas.trace(Experts(), args).ir).ops()
    assert (op.meta["flops"], op.meta["macs"]) == (2 * 10 * 16 * 8, 10 * 16 * 8)  # FlopCounterMode says 0
