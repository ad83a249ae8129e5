"""Transformers architectures from small random configs: decoders, encoders,
encoder-decoders, vision, speech, mixture-of-experts and state-space models.

Each config is the architecture's default, shrunk by :func:`shrink` (two layers, so that a
value crossing layers is checked; width 32-64, small vocabularies and images) so that
building, tracing and exporting take a few seconds. Weights are random: nothing is
downloaded. ``hf_all`` runs every other model type of transformers the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

SMALL: dict[tuple[str, ...], Any] = {
    ("num_hidden_layers", "n_layer", "num_layers", "n_layers", "encoder_layers", "decoder_layers",
     "num_decoder_layers", "num_encoder_layers"): 2,
    ("num_hidden_groups",): 1,
    ("hidden_size", "d_model", "n_embd", "dim", "embed_dim", "word_embed_proj_dim"): 64,
    ("num_attention_heads", "n_head", "num_heads", "n_heads", "encoder_attention_heads", "decoder_attention_heads"): 4,
    ("num_key_value_heads", "num_kv_heads", "multi_query_group_num"): 2,
    ("head_dim", "d_kv", "attention_head_dim"): 16,
    ("intermediate_size", "d_ff", "n_inner", "ffn_dim", "encoder_ffn_dim", "decoder_ffn_dim", "ffn_hidden_size",
     "moe_intermediate_size", "shared_expert_intermediate_size"): 128,
    ("vocab_size",): 256,
    ("max_position_embeddings", "n_positions", "max_target_positions"): 64,
    ("num_experts", "num_local_experts", "n_routed_experts"): 4,
    ("num_experts_per_tok", "top_k"): 2,
    ("image_size",): 32,
    ("patch_size",): 8,
    ("embedding_size",): 64,
    ("projection_dim",): 32,
    ("state_size", "d_state"): 8,
    ("num_mel_bins",): 16,
    ("max_source_positions",): 32,
}
TOKEN_IDS = ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id", "sep_token_id", "cls_token_id")


def shrink(config: Any, **overrides: Any) -> Any:
    for names, value in SMALL.items():
        for name in names:
            if isinstance(getattr(config, name, None), int):
                try:
                    setattr(config, name, value)
                except (AttributeError, NotImplementedError):  # derived (Falcon's head_dim, Funnel's layers)
                    pass
    vocab = getattr(config, "vocab_size", None)
    for name in TOKEN_IDS:
        token = getattr(config, name, None)
        if isinstance(token, int) and isinstance(vocab, int) and token >= vocab:
            setattr(config, name, vocab - 1)
    for name, value in overrides.items():
        setattr(config, name, value)
    return config


Inputs = Callable[[Any], tuple[tuple[Any, ...], dict[str, Any]]]


def tokens(config: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    return (torch.randint(0, config.vocab_size, (1, 8)),), {}


def causal(config: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    return (torch.randint(0, config.vocab_size, (1, 8)),), {"use_cache": False}


def seq2seq(config: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    ids = torch.randint(0, config.vocab_size, (1, 8))
    return (ids,), {"decoder_input_ids": ids[:, :5], "use_cache": False}


def image(config: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    size = getattr(config, "image_size", 32)
    size = size if isinstance(size, int) else 32
    return (torch.randn(1, getattr(config, "num_channels", 3), size, size),), {}


def waveform(config: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    return (torch.randn(1, 4000),), {}


def mel(config: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    features = torch.randn(1, config.num_mel_bins, 2 * config.max_source_positions)
    return (features,), {"decoder_input_ids": torch.tensor([[config.decoder_start_token_id, 1, 2]]), "use_cache": False}


def filterbank(config: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    features = torch.randn(1, 64, config.input_feat_per_channel * config.input_channels)
    return (features,), {"decoder_input_ids": torch.tensor([[config.decoder_start_token_id, 1, 2]]), "use_cache": False}


def text_and_image(config: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    ids = torch.randint(0, config.text_config.vocab_size, (1, 8))
    size = config.vision_config.image_size
    return (), {"input_ids": ids, "pixel_values": torch.randn(1, 3, size, size)}


# model type -> (inputs, config overrides)
ARCHITECTURES: dict[str, tuple[Inputs, dict[str, Any]]] = {
    # decoders
    **{kind: (causal, {}) for kind in [
        "llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "phi", "phi3", "gpt2", "gpt_neo", "gpt_neox",
        "bloom", "opt", "falcon", "starcoder2", "stablelm", "olmo", "olmo2", "cohere", "persimmon",
        "biogpt", "xglm", "granite", "helium", "glm", "gpt_bigcode", "ctrl",
    ]},
    "gptj": (causal, {"rotary_dim": 8}),
    "codegen": (causal, {"rotary_dim": 8}),
    # mixture of experts
    **{kind: (causal, {}) for kind in ["mixtral", "qwen2_moe", "olmoe", "granitemoe"]},
    # state-space and recurrent
    **{kind: (causal, {}) for kind in ["mamba", "falcon_mamba"]},
    "mamba2": (causal, {"num_heads": 8, "head_dim": 16, "n_groups": 1}),
    # encoders
    **{kind: (tokens, {}) for kind in [
        "bert", "roberta", "distilbert", "albert", "electra", "deberta", "deberta-v2", "xlm-roberta", "camembert",
        "mpnet", "ernie", "squeezebert", "convbert", "mobilebert", "megatron-bert", "roformer", "data2vec-text",
        "nystromformer",
    ]},
    # encoder-decoders
    **{kind: (seq2seq, {}) for kind in [
        "t5", "mt5", "umt5", "bart", "mbart", "pegasus", "marian", "blenderbot", "blenderbot-small", "led",
        "longt5", "switch_transformers", "plbart", "m2m_100",
    ]},
    # vision
    **{kind: (image, {}) for kind in [
        "vit", "deit", "beit", "dinov2", "resnet", "regnet", "segformer", "poolformer", "mobilenet_v2",
        "data2vec-vision", "yolos",
    ]},
    "swin": (image, {"patch_size": 4, "window_size": 2, "embed_dim": 16, "depths": [1, 1], "num_heads": [2, 2]}),
    **{kind: (image, {"hidden_sizes": [16, 32], "depths": [1, 1], "num_stages": 2}) for kind in ["convnext", "convnextv2"]},
    # speech
    "whisper": (mel, {}),
    "speech_to_text": (filterbank, {}),
    **{kind: (waveform, {}) for kind in ["wav2vec2", "hubert", "wavlm", "data2vec-audio", "sew", "unispeech"]},
    # text and image
    "clip": (text_and_image, {}),
}
