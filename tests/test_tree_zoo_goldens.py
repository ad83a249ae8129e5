"""Golden trees of the blocks whose flow is not series-parallel (issue 31), hand-made
equivalents of the real ones (``_zoo_blocks``): structure-level, (depth, label) per line.

Each golden is what a person draws: the call is broken at the values read in several
places, each later read named (``← gate_msa``, ``← q``), never a numbered listing. Each
fits in 60 lines. The real timm and diffusers blocks are checked in ``tests/test_zoo.py``.
"""

from __future__ import annotations

import pytest
from _zoo_blocks import blocks
from test_tree import UNICODE, parse_tree

import torchatlas
from torchatlas._view import relative_name

REXNET = [
    (0, 'LinearBottleneck  1×4×6×6 → 1×6×6×6'),
    (1, 'conv_exp (Sequential)  1×4×6×6 → 1×12×6×6'),
    (2, '0 (Conv2d)  1×4×6×6 → 1×12×6×6'),
    (2, '1 (BatchNorm2d)  1×12×6×6 → 1×12×6×6'),
    (1, 'conv_dw (Sequential)  1×12×6×6 → 1×12×6×6'),
    (2, '0 (Conv2d)  1×12×6×6 → 1×12×6×6'),
    (2, '1 (BatchNorm2d)  1×12×6×6 → 1×12×6×6'),
    (1, 'act_dw (ReLU6)  1×12×6×6 → 1×12×6×6'),
    (1, 'conv_pwl (Sequential)  1×12×6×6 → 1×6×6×6'),
    (2, '0 (Conv2d)  1×12×6×6 → 1×6×6×6'),
    (2, '1 (BatchNorm2d)  1×6×6×6 → 1×6×6×6'),
    (1, '┬ add (+)'),
    (2, 'getitem ([]) → 1×4×6×6'),
    (2, 'add (+) → 1×4×6×6  ← x'),
    (1, '┬ getitem ([]) → 1×2×6×6'),
    (1, 'x = cat → 1×6×6×6'),
]
DIT = [
    (0, 'DiTBlock  (2×5×8, 2×8) → 2×5×8'),
    (1, '┬ attn_output'),
    (2, 'norm1 (AdaNormZero)  (2×5×8, 2×8) → (2×5×8, 2×8 ×4)'),
    (3, '┬ shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp'),
    (4, 'silu (SiLU)  2×8 → 2×8  ← emb'),
    (4, 'linear (Linear)  2×8 → 2×48'),
    (4, 'shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = chunk → (2×8 ×6)'),
    (3, 'norm (LayerNorm)  2×5×8 → 2×5×8'),
    (3, '┬ add (+)'),
    (4, 'getitem ([]) → 2×1×8  ← scale_msa'),
    (4, 'add (+) → 2×1×8'),
    (3, 'mul (*) → 2×5×8'),
    (3, '┬ getitem ([]) → 2×1×8  ← shift_msa'),
    (3, 'x = add (+) → 2×5×8'),
    (2, 'attn1 (MultiheadAttention)  2×5×8 → 2×5×8'),
    (3, 'transpose → 5×2×8'),
    (3, 'multi_head_attention_forward → 5×2×8'),
    (3, 'attn_output = transpose → 2×5×8'),
    (2, '┬ unsqueeze → 2×1×8  ← gate_msa'),
    (2, 'attn_output = mul (*) → 2×5×8'),
    (1, '┬ (skip connection)'),
    (1, 'hidden_states = add (+) → 2×5×8'),
    (1, '┬ ff_output'),
    (2, 'norm2 (LayerNorm)  2×5×8 → 2×5×8'),
    (2, '┬ add (+)'),
    (3, 'getitem ([]) → 2×1×8  ← scale_mlp'),
    (3, 'add (+) → 2×1×8'),
    (2, 'mul (*) → 2×5×8'),
    (2, '┬ getitem ([]) → 2×1×8  ← shift_mlp'),
    (2, 'norm_hidden_states = add (+) → 2×5×8'),
    (2, 'ff (Sequential)  2×5×8 → 2×5×8'),
    (3, '0 (Linear)  2×5×8 → 2×5×16'),
    (3, '1 (GELU)  2×5×16 → 2×5×16'),
    (3, '2 (Linear)  2×5×16 → 2×5×8'),
    (2, '┬ unsqueeze → 2×1×8  ← gate_mlp'),
    (2, 'ff_output = mul (*) → 2×5×8'),
    (1, '┬ (skip connection)'),
    (1, 'hidden_states = add (+) (ff_output, hidden_states) → 2×5×8'),
]
DENSE = [
    (0, 'DenseBlock  1×4×6×6 → 1×12×6×6'),
    (1, 'layers.0 (DenseLayer)  1×4×6×6 → 1×2×6×6'),
    (2, 'x = cat → 1×4×6×6'),
    (2, 'norm (BatchNorm2d)  1×4×6×6 → 1×4×6×6'),
    (2, 'relu (ReLU)  1×4×6×6 → 1×4×6×6'),
    (2, 'conv (Conv2d)  1×4×6×6 → 1×2×6×6'),
    (1, 'layers.1 (DenseLayer)  (1×4×6×6, 1×2×6×6) → 1×2×6×6  ← features[0]'),
    (2, 'x = cat → 1×6×6×6'),
    (2, 'norm (BatchNorm2d)  1×6×6×6 → 1×6×6×6'),
    (2, 'relu (ReLU)  1×6×6×6 → 1×6×6×6'),
    (2, 'conv (Conv2d)  1×6×6×6 → 1×2×6×6'),
    (1, 'layers.2 (DenseLayer)  (1×4×6×6, 1×2×6×6, 1×2×6×6) → 1×2×6×6  ← features[0..1]'),
    (2, 'x = cat → 1×8×6×6'),
    (2, 'norm (BatchNorm2d)  1×8×6×6 → 1×8×6×6'),
    (2, 'relu (ReLU)  1×8×6×6 → 1×8×6×6'),
    (2, 'conv (Conv2d)  1×8×6×6 → 1×2×6×6'),
    (1, 'layers.3 (DenseLayer)  (1×4×6×6, 1×2×6×6 ×3) → 1×2×6×6  ← features[0..2]'),
    (2, 'x = cat → 1×10×6×6'),
    (2, 'norm (BatchNorm2d)  1×10×6×6 → 1×10×6×6'),
    (2, 'relu (ReLU)  1×10×6×6 → 1×10×6×6'),
    (2, 'conv (Conv2d)  1×10×6×6 → 1×2×6×6'),
    (1, 'cat → 1×12×6×6  ← features[0..3]'),
]
MOBILEONE = [
    (0, 'MobileOneBlock  1×4×6×6 → 1×4×6×6'),
    (1, '┬ identity (BatchNorm2d)  1×4×6×6 → 1×4×6×6'),
    (1, '┬ out'),
    (2, '┬ out'),
    (3, '┬ out'),
    (4, 'conv_scale (Sequential)  1×4×6×6 → 1×4×6×6'),
    (5, '0 (Conv2d)  1×4×6×6 → 1×4×6×6'),
    (5, '1 (BatchNorm2d)  1×4×6×6 → 1×4×6×6'),
    (3, '┬ conv_kxk.0'),
    (4, 'conv_kxk.0 (Sequential)  1×4×6×6 → 1×4×6×6'),
    (5, '0 (Conv2d)  1×4×6×6 → 1×4×6×6'),
    (5, '1 (BatchNorm2d)  1×4×6×6 → 1×4×6×6'),
    (3, 'add (+=) → 1×4×6×6  [in-place]'),
    (2, '┬ conv_kxk.1'),
    (3, 'conv_kxk.1 (Sequential)  1×4×6×6 → 1×4×6×6'),
    (4, '0 (Conv2d)  1×4×6×6 → 1×4×6×6'),
    (4, '1 (BatchNorm2d)  1×4×6×6 → 1×4×6×6'),
    (2, 'out = add (+=) → 1×4×6×6  [in-place]'),
    (2, 'drop_path (Identity)  1×4×6×6 → 1×4×6×6'),
    (1, 'out = add (+=) (out, identity_out) → 1×4×6×6  [in-place]'),
    (1, 'attn (Identity)  1×4×6×6 → 1×4×6×6'),
    (1, 'act (ReLU)  1×4×6×6 → 1×4×6×6'),
]
BOTNET = [
    (0, 'BotBlock  1×8×4×4 → 1×8×4×4'),
    (1, '┬ x'),
    (2, 'conv1_1x1 (Sequential)  1×8×4×4 → 1×8×4×4'),
    (3, '0 (Conv2d)  1×8×4×4 → 1×8×4×4'),
    (3, '1 (BatchNorm2d)  1×8×4×4 → 1×8×4×4'),
    (2, 'self_attn (BottleneckAttn)  1×8×4×4 → 1×8×4×4'),
    (3, 'qkv (Conv2d)  1×8×4×4 → 1×24×4×4'),
    (3, 'q, k, v = split → (1×8×4×4 ×3)'),
    (3, '┬ attn'),
    (4, '┬ q'),
    (5, 'reshape → 2×4×16'),
    (5, 'q = transpose → 2×16×4'),
    (4, '┬ k = reshape → 2×4×16'),
    (4, 'matmul (@) (q, k) → 2×16×16'),
    (4, 'attn = mul (*) → 2×16×16'),
    (4, '┬ pos_embed'),
    (5, 'pos_embed (RelPosBias)  2×16×4 → 2×16×16  ← q'),
    (6, 'mean → 2×16×1'),
    (6, 'mul (*) → 2×16×16'),
    (4, 'attn = add (+) → 2×16×16'),
    (4, 'attn = softmax → 2×16×16'),
    (3, '┬ v'),
    (4, 'reshape → 2×4×16'),
    (4, 'v = transpose → 2×16×4'),
    (3, 'matmul (@) (attn, v) → 2×16×4'),
    (3, 'transpose → 2×4×16'),
    (3, 'out = reshape → 1×8×4×4'),
    (2, 'post_attn (Sequential)  1×8×4×4 → 1×8×4×4'),
    (3, '0 (BatchNorm2d)  1×8×4×4 → 1×8×4×4'),
    (3, '1 (ReLU)  1×8×4×4 → 1×8×4×4'),
    (2, 'conv3_1x1 (Sequential)  1×8×4×4 → 1×8×4×4'),
    (3, '0 (Conv2d)  1×8×4×4 → 1×8×4×4'),
    (3, '1 (BatchNorm2d)  1×8×4×4 → 1×8×4×4'),
    (1, '┬ shortcut'),
    (2, 'shortcut (Sequential)  1×8×4×4 → 1×8×4×4'),
    (3, '0 (Conv2d)  1×8×4×4 → 1×8×4×4'),
    (3, '1 (BatchNorm2d)  1×8×4×4 → 1×8×4×4'),
    (1, 'x = add (+) → 1×8×4×4'),
    (1, 'act (ReLU)  1×8×4×4 → 1×8×4×4'),
]


GOLDENS = {"rexnet": REXNET, "dit": DIT, "dense": DENSE, "mobileone": MOBILEONE, "botnet": BOTNET}


def tree_of(name: str) -> str:
    model, args = blocks()[name]
    return torchatlas.trace(model, args).tree(depth=3)


@pytest.mark.parametrize("name", GOLDENS)
def test_block_tree_is_what_a_person_would_draw(name: str) -> None:
    assert parse_tree(tree_of(name), UNICODE) == GOLDENS[name]


@pytest.mark.parametrize("name", GOLDENS)
def test_block_golden_fits_in_60_lines_and_has_no_listing(name: str) -> None:
    assert len(GOLDENS[name]) <= 60
    assert not any(label.startswith("[") for _, label in GOLDENS[name])


def test_every_op_and_call_is_still_in_the_tree() -> None:
    """Breaking the flow moves no step out of sight: each op and module call has its line."""
    for name in GOLDENS:
        model, args = blocks()[name]
        graph = torchatlas.trace(model, args)
        text = graph.tree(fold_repeats=False)
        for scope in graph.ir.scopes[1:]:  # named below its caller
            label = relative_name(scope.label, graph.ir.scope(scope.parent).path)
            assert f"── {label}" in text or f"── ┬ {label}" in text, (name, label)
