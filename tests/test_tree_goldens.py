"""Golden trees of real models, at the level of structure: (depth, label) per line.

Each golden was written from what a person draws for the model (main path as one
sequence, side values computed once and named where read, skip connections only
where a bypassing value is joined back), then matched. Each fits in 40 lines.
"""

from __future__ import annotations

import warnings

import _tree_models as models
import pytest
import torch
from test_tree import UNICODE, parse_tree

import torchatlas

LLAMA = [
    (0, "LlamaForCausalLM  1×8 int64 → 1×8×100"),
    (1, "model (LlamaModel)  1×8 int64 → 1×8×64"),
    (2, "embed_tokens (Embedding)  1×8 int64 → 1×8×64"),
    (2, "┬ cos, sin"),
    (3, "arange → 8 int64"),
    (3, "position_ids = add (+) → 8 int64"),
    (3, "position_ids = unsqueeze → 1×8 int64"),
    (3, "rotary_emb (LlamaRotaryEmbedding)  1×8 int64 → (1×8×16, 1×8×16)"),
    (2, "layers.0–1 (LlamaDecoderLayer) ×2  (1×8×64, 1×8×16, 1×8×16) → 1×8×64  ← cos, sin"),
    (2, "norm (LlamaRMSNorm)  1×8×64 → 1×8×64"),
    (1, "getitem ([]) → 1×8×64"),
    (1, "lm_head (Linear)  1×8×64 → 1×8×100"),
]

LLAMA_DEPTH3 = [
    (0, "LlamaForCausalLM  1×8 int64 → 1×8×100"),
    (1, "model (LlamaModel)  1×8 int64 → 1×8×64"),
    (2, "embed_tokens (Embedding)  1×8 int64 → 1×8×64"),
    (2, "┬ cos, sin"),
    (3, "arange → 8 int64"),
    (3, "position_ids = add (+) → 8 int64"),
    (3, "position_ids = unsqueeze → 1×8 int64"),
    (3, "rotary_emb (LlamaRotaryEmbedding)  1×8 int64 → (1×8×16, 1×8×16)"),
    (4, "getitem ([]) → 1×8×1 int64"),
    (4, "float → 1×8×1"),
    (4, "freqs = mul (*) → 1×8×8"),
    (4, "emb = cat (freqs, freqs) → 1×8×16"),
    (4, "┬ cos"),
    (5, "cos → 1×8×16"),
    (5, "cos = mul (*) → 1×8×16"),
    (4, "┬ sin"),
    (5, "sin → 1×8×16"),
    (5, "sin = mul (*) → 1×8×16"),
    (2, "layers.0–1 (LlamaDecoderLayer) ×2  (1×8×64, 1×8×16, 1×8×16) → 1×8×64  ← cos, sin"),
    (3, "┬ hidden_states"),
    (4, "input_layernorm (LlamaRMSNorm)  1×8×64 → 1×8×64"),
    (4, "self_attn (LlamaAttention)  (1×8×64, 1×8×16, 1×8×16) → 1×8×64  ← cos, sin"),
    (3, "┬ (skip connection)"),
    (3, "hidden_states = add (+) (residual, hidden_states) → 1×8×64"),
    (3, "┬ hidden_states"),
    (4, "post_attention_layernorm (LlamaRMSNorm)  1×8×64 → 1×8×64"),
    (4, "mlp (LlamaMLP)  1×8×64 → 1×8×64"),
    (3, "┬ (skip connection)"),
    (3, "hidden_states = add (+) (residual, hidden_states) → 1×8×64"),
    (2, "norm (LlamaRMSNorm)  1×8×64 → 1×8×64"),
    (3, "┬ rsqrt"),
    (4, "pow → 1×8×64"),
    (4, "variance = mean → 1×8×1"),
    (4, "add (+) → 1×8×1"),
    (4, "rsqrt → 1×8×1"),
    (3, "hidden_states = mul (*) → 1×8×64"),
    (3, "outputs = mul (*) → 1×8×64"),
    (1, "getitem ([]) → 1×8×64"),
    (1, "lm_head (Linear)  1×8×64 → 1×8×100"),
]

T5 = [
    (0, "T5Model  (1×8 int64, 1×5 int64) → (1×5×32, 1×8×32)"),
    (1, "encoder (T5Stack)  1×8 int64 → 1×8×32"),
    (2, "embed_tokens (Embedding)  1×8 int64 → 1×8×32"),
    (2, "dropout (Dropout)  1×8×32 → 1×8×32"),
    (2, "block.0 (T5Block)  1×8×32 → (1×8×32, 1×4×8×8)"),
    (2, "block.1 (T5Block)  (1×8×32, 1×4×8×8) → (1×8×32, 1×4×8×8)"),
    (2, "final_layer_norm (T5LayerNorm)  1×8×32 → 1×8×32"),
    (2, "dropout#1 (Dropout)  1×8×32 → 1×8×32"),
    (1, "decoder (T5Stack)  (1×5 int64, 1×8×32) → 1×5×32  ← decoder_input_ids, encoder_hidden_states"),
    (2, "embed_tokens (Embedding)  1×5 int64 → 1×5×32"),
    (2, "dropout (Dropout)  1×5×32 → 1×5×32"),
    (2, "block.0 (T5Block)  (1×5×32, 1×8×32) → (1×5×32, 1×4×5×5, 1×4×5×8)  ← encoder_hidden_states"),
    (2, "block.1 (T5Block)  (1×5×32, 1×4×5×5, 1×8×32, 1×4×5×8) → (1×5×32, 1×4×5×5, 1×4×5×8)  ← encoder_hidden_states"),
    (2, "final_layer_norm (T5LayerNorm)  1×5×32 → 1×5×32"),
    (2, "dropout#1 (Dropout)  1×5×32 → 1×5×32"),
]

WHISPER = [
    (0, "WhisperModel  (1×16×32, 1×5 int64) → (1×5×32, 1×16×32)"),
    (1, "encoder (WhisperEncoder)  1×16×32 → 1×16×32"),
    (2, "conv1 (Conv1d)  1×16×32 → 1×32×32"),
    (2, "inputs_embeds = gelu → 1×32×32"),
    (2, "conv2 (Conv1d)  1×32×32 → 1×32×16"),
    (2, "inputs_embeds = gelu → 1×32×16"),
    (2, "inputs_embeds = permute → 1×16×32"),
    (2, "┬ embed_positions"),
    (3, "all_positions = arange → 16 int64"),
    (3, "embed_positions (Embedding)  16 int64 → 16×32"),
    (2, "hidden_states = add (+) → 1×16×32"),
    (2, "layers.0–1 (WhisperEncoderLayer) ×2  1×16×32 → 1×16×32"),
    (2, "layer_norm (LayerNorm)  1×16×32 → 1×16×32"),
    (1, "decoder (WhisperDecoder)  (1×5 int64, 1×16×32) → 1×5×32  ← decoder_input_ids, encoder_hidden_states"),
    (2, "embed_tokens (Embedding)  1×5 int64 → 1×5×32"),
    (2, "┬ positions"),
    (3, "arange → 5 int64"),
    (3, "position_ids = add (+) → 5 int64"),
    (3, "unsqueeze → 1×5 int64"),
    (3, "position_ids = repeat → 1×5 int64"),
    (3, "embed_positions (WhisperPositionalEmbedding)  1×5 int64 → 1×5×32"),
    (2, "hidden_states = add (+) (inputs_embeds, positions) → 1×5×32"),
    (2, "layers.0–1 (WhisperDecoderLayer) ×2  (1×5×32, 1×16×32) → 1×5×32  ← encoder_hidden_states"),
    (2, "layer_norm (LayerNorm)  1×5×32 → 1×5×32"),
]

UNET = [
    (0, "UNet  1×3×16×16 → 1×2×16×16"),
    (1, "enc1 (DoubleConv)  1×3×16×16 → 1×8×16×16"),
    (2, "conv (Sequential)  1×3×16×16 → 1×8×16×16"),
    (1, "┬ up1"),
    (2, "pool (MaxPool2d)  1×8×16×16 → 1×8×8×8"),
    (2, "enc2 (DoubleConv)  1×8×8×8 → 1×16×8×8"),
    (3, "conv (Sequential)  1×8×8×8 → 1×16×8×8"),
    (2, "┬ up2"),
    (3, "pool#1 (MaxPool2d)  1×16×8×8 → 1×16×4×4"),
    (3, "mid (DoubleConv)  1×16×4×4 → 1×32×4×4"),
    (4, "conv (Sequential)  1×16×4×4 → 1×32×4×4"),
    (3, "up2 (ConvTranspose2d)  1×32×4×4 → 1×16×8×8"),
    (2, "┬ (skip connection)"),
    (2, "cat (d2, e2) → 1×32×8×8"),
    (2, "dec2 (DoubleConv)  1×32×8×8 → 1×16×8×8"),
    (3, "conv (Sequential)  1×32×8×8 → 1×16×8×8"),
    (2, "up1 (ConvTranspose2d)  1×16×8×8 → 1×8×16×16"),
    (1, "┬ (skip connection)"),
    (1, "cat (d1, e1) → 1×16×16×16"),
    (1, "dec1 (DoubleConv)  1×16×16×16 → 1×8×16×16"),
    (2, "conv (Sequential)  1×16×16×16 → 1×8×16×16"),
    (1, "head (Conv2d)  1×8×16×16 → 1×2×16×16"),
]

BOTTLENECK = [
    (0, "Bottleneck  1×16×8×8 → 1×16×8×8"),
    (1, "┬ out"),
    (2, "conv1 (Conv2d)  1×16×8×8 → 1×4×8×8"),
    (2, "bn1 (BatchNorm2d)  1×4×8×8 → 1×4×8×8"),
    (2, "relu (ReLU)  1×4×8×8 → 1×4×8×8"),
    (2, "conv2 (Conv2d)  1×4×8×8 → 1×4×8×8"),
    (2, "bn2 (BatchNorm2d)  1×4×8×8 → 1×4×8×8"),
    (2, "relu#1 (ReLU)  1×4×8×8 → 1×4×8×8"),
    (2, "conv3 (Conv2d)  1×4×8×8 → 1×16×8×8"),
    (2, "bn3 (BatchNorm2d)  1×16×8×8 → 1×16×8×8"),
    (1, "┬ (skip connection)"),
    (1, "out = add (+) → 1×16×8×8"),
    (1, "relu#2 (ReLU)  1×16×8×8 → 1×16×8×8"),
]

RMSNORM = [
    (0, "RMSNorm  2×8 → 2×8"),
    (1, "┬ rsqrt"),
    (2, "pow → 2×8"),
    (2, "mean → 2×1"),
    (2, "add (+) → 2×1"),
    (2, "rsqrt → 2×1"),
    (1, "mul (*) → 2×8"),
    (1, "mul (*) → 2×8"),
]

GRU = [
    (0, "GRUClassifier  2×7 int64 → 2×5"),
    (1, "emb (Embedding)  2×7 int64 → 2×7×16"),
    (1, "gru (GRU)  2×7×16 → (2×7×32, 1×2×32)"),
    (2, "┬ zeros → 1×2×32"),
    (2, "out, _ = gru → (2×7×32, 1×2×32)"),
    (1, "getitem ([]) → 2×32"),
    (1, "head (Linear)  2×32 → 2×5"),
]

HEAD_AND_HIDDEN = [
    (0, "HeadAndHidden  2×8 → (2×3, 2×8)"),
    (1, "body (Linear)  2×8 → 2×8"),
    (1, "h = tanh → 2×8  (also returned)"),
    (1, "head (Linear)  2×8 → 2×3"),
]

MLP_BACKWARD = [
    (0, "MLP  3×4 → 3×2"),
    (1, "fc1 (Linear)  3×4 → 3×8"),
    (2, "┬ t → 4×8"),
    (2, "addmm → 3×8"),
    (1, "act (ReLU)  3×8 → 3×8"),
    (2, "relu → 3×8"),
    (2, "┬ detach → 3×8"),
    (1, "fc2 (Linear)  3×8 → 3×2"),
    (2, "┬ t → 8×2"),
    (2, "addmm → 3×2"),
    (1, "┬ sum → scalar"),
    (1, "◀ backward (18 ops)"),
    (2, "◀ (loss)"),
    (3, "ones_like → scalar"),
    (3, "expand → 3×2"),
    (2, "◀ fc2 (Linear)  ← saved: fc2.addmm"),
    (3, "t → 2×8"),
    (3, "mm → 3×8"),
    (3, "t → 2×3"),
    (3, "mm → 2×8"),
    (3, "t → 8×2"),
    (3, "sum → 1×2"),
    (3, "view → 2"),
    (3, "t → 2×8"),
    (2, "◀ act (ReLU)  ← saved: act.relu"),
    (3, "detach → 3×8"),
    (3, "threshold_backward → 3×8"),
    (2, "◀ fc1 (Linear)  ← saved: fc1.addmm"),
    (3, "t → 8×3"),
    (3, "mm → 8×4"),
    (3, "t → 4×8"),
    (3, "sum → 1×8"),
    (3, "view → 8"),
    (3, "t → 8×4"),
]

CASES = {
    "llama-depth2": (models.llama, 2, {}, LLAMA),
    "llama-depth3": (models.llama, 3, {}, LLAMA_DEPTH3),
    "t5": (models.t5, 2, {}, T5),
    "whisper": (models.whisper, 2, {}, WHISPER),
    "unet": (models.unet, 2, {}, UNET),
    "resnet-bottleneck": (models.bottleneck, 2, {}, BOTTLENECK),
    "rmsnorm": (models.rmsnorm, 2, {}, RMSNORM),
    "gru": (models.gru, 2, {}, GRU),
    "head-and-hidden": (models.head_and_hidden, 2, {}, HEAD_AND_HIDDEN),
    "mlp-backward": (models.mlp, 2, {"backward": True}, MLP_BACKWARD),
}


def _tree(build, depth: int, **trace_kwargs) -> str:
    torch.manual_seed(0)
    model, args, kwargs = build()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torchatlas.trace(model, args, kwargs, **trace_kwargs).tree(depth=depth)


@pytest.mark.parametrize("case", CASES)
def test_tree_is_what_a_person_would_draw(case: str) -> None:
    build, depth, trace_kwargs, golden = CASES[case]
    assert parse_tree(_tree(build, depth, **trace_kwargs), UNICODE) == golden


@pytest.mark.parametrize("case", CASES)
def test_every_golden_fits_in_40_lines(case: str) -> None:
    assert len(CASES[case][3]) <= 40


def test_no_empty_branch_is_called_a_skip_connection_without_a_join() -> None:
    """Every "(skip connection)" line is followed, at its depth, by an add or cat that joins it."""
    for build, depth, trace_kwargs, _ in CASES.values():
        lines = parse_tree(_tree(build, depth, **trace_kwargs), UNICODE)
        for k, (d, label) in enumerate(lines):
            if label == "┬ (skip connection)":
                joins = [lab for dd, lab in lines[k + 1 :] if dd == d]
                assert joins and joins[0].split(" = ")[-1].startswith(("add", "cat")), (build.__name__, label)


def test_unfolded_llama_lists_every_layer() -> None:
    text = _tree(models.llama, 2)
    torch.manual_seed(0)
    model, args, kwargs = models.llama()
    unfolded = torchatlas.trace(model, args, kwargs).tree(depth=2, fold_repeats=False)
    assert "── layers.0–1 (LlamaDecoderLayer) ×2" in text  # below model, as every output names it
    assert "── layers.0 (LlamaDecoderLayer)" in unfolded and "── layers.1 (LlamaDecoderLayer)" in unfolded
    assert "×2" not in unfolded
