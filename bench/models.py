"""Benchmark models, built from configs with random weights (nothing is downloaded).

Every builder takes a device (``"cpu"``, ``"cuda"`` or ``"meta"``) and returns
``(model, args, kwargs)`` ready for ``model(*args, **kwargs)``: batch 1, images
224x224 (CoolCNN: 32x32), token sequences of 128. ``smoke`` models are the tiny
ones the test suite runs; the rest are the real architectures at their
published sizes.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parent.parent
SEQ_LEN = 128
IMAGE_SIZE = 224

Built = tuple[torch.nn.Module, tuple[Any, ...], dict[str, Any]]


@dataclass(frozen=True)
class ModelSpec:
    name: str
    build: Callable[[str], Built]
    smoke: bool = False
    meta_only: bool = False
    """Too big to hold in memory here: only ever built on the meta device."""
    scale: bool = False
    """A synthetic graph of a set op count, for time-vs-size curves (too big to draw)."""
    gpu: bool = False
    """Sized for a GPU: built for real only on ``cuda``, else on the meta device; in the
    default model lists only with ``--device cuda``."""


def _coolcnn_class() -> type[torch.nn.Module]:
    # examples/ is not a package; load the one shared definition by path.
    spec = importlib.util.spec_from_file_location("coolcnn", REPO / "examples" / "coolcnn.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.CoolCNN


def _tokens(vocab: int, device: str, length: int = SEQ_LEN) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    return torch.randint(0, vocab, (1, length), generator=generator).to(device)


def _image(device: str, size: int = IMAGE_SIZE) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    return torch.randn(1, 3, size, size, generator=generator).to(device)


def _hf(model_cls_name: str, config_cls_name: str, device: str, **config: Any) -> torch.nn.Module:
    import transformers

    cfg = getattr(transformers, config_cls_name)(**config)
    torch.manual_seed(0)
    with torch.device(device):
        model = getattr(transformers, model_cls_name)(cfg)
    return model.eval()


def _hf_on_tokens(
    model_cls_name: str, config_cls_name: str, device: str, length: int = SEQ_LEN, **config: Any
) -> Built:
    model = _hf(model_cls_name, config_cls_name, device, **config)
    return model, (_tokens(model.config.vocab_size, device, length),), {}


def _hf_on_image(model_cls_name: str, config_cls_name: str, device: str, **config: Any) -> Built:
    return _hf(model_cls_name, config_cls_name, device, **config), (_image(device),), {}


def build_coolcnn(device: str) -> Built:
    torch.manual_seed(0)
    with torch.device(device):
        model = _coolcnn_class()()
    return model.eval(), (_image(device, 32),), {}


def build_tiny_gpt2(device: str) -> Built:
    sizes = {"n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 1000, "n_positions": SEQ_LEN}
    return _hf_on_tokens("GPT2LMHeadModel", "GPT2Config", device, 32, bos_token_id=0, eos_token_id=0, **sizes)


def build_resnet50(device: str) -> Built:
    return _hf_on_image("ResNetForImageClassification", "ResNetConfig", device, num_labels=1000)


def build_vit_base(device: str) -> Built:
    return _hf_on_image("ViTForImageClassification", "ViTConfig", device, num_labels=1000)


def build_bert_base(device: str) -> Built:
    return _hf_on_tokens("BertModel", "BertConfig", device)


def build_gpt2(device: str) -> Built:
    return _hf_on_tokens("GPT2LMHeadModel", "GPT2Config", device)


def build_t5_small(device: str) -> Built:
    # the T5Config defaults are t5-small: d_model 512, 6+6 layers, 8 heads
    model = _hf("T5ForConditionalGeneration", "T5Config", device)
    ids = _tokens(model.config.vocab_size, device)
    return model, (), {"input_ids": ids, "decoder_input_ids": ids[:, :32]}


def build_llama_1b(device: str) -> Built:
    # TinyLlama-1.1B's shape: about 1.1e9 parameters, 4.4 GB in float32.
    sizes = {"hidden_size": 2048, "num_hidden_layers": 22, "intermediate_size": 5632, "num_attention_heads": 32}
    return _hf_on_tokens("LlamaForCausalLM", "LlamaConfig", device, num_key_value_heads=4, vocab_size=32000, **sizes)


def build_llama_70b(device: str) -> Built:
    if device != "meta":
        raise ValueError("llama-70b is only built on the meta device (280 GB in float32)")
    sizes = {"hidden_size": 8192, "num_hidden_layers": 80, "intermediate_size": 28672, "num_attention_heads": 64}
    return _hf_on_tokens("LlamaForCausalLM", "LlamaConfig", device, num_key_value_heads=8, vocab_size=128256, **sizes)


LLAMA_8B_BATCH, LLAMA_8B_LENGTH = 4, 2048


def build_llama_8b(device: str) -> Built:
    """Llama-3-8B's shape in bfloat16 on a 4x2048 batch: the GPU bench's ``stats=True`` target
    (issue 32: at most 1.5x the forward's time and 1.25x its peak memory). 16 GB of weights:
    on a CPU it is only built on the meta device."""
    if device not in ("cuda", "meta") and not device.startswith("cuda:"):
        raise ValueError("llama-8b is only built on a CUDA device or on the meta device (16 GB in bfloat16)")
    import transformers

    config = transformers.AutoConfig.for_model(
        "llama", hidden_size=4096, num_hidden_layers=32, intermediate_size=14336, num_attention_heads=32,
        num_key_value_heads=8, vocab_size=128256, max_position_embeddings=8192, rope_theta=500000.0,
        rms_norm_eps=1e-5, bos_token_id=128000, eos_token_id=128001,
    )
    torch.manual_seed(0)
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, config.vocab_size, (LLAMA_8B_BATCH, LLAMA_8B_LENGTH), generator=generator)
    return model.eval(), (tokens.to(device),), {}


class _ChainBlock(torch.nn.Module):
    """Ten ops on a 1x8 tensor: cheap to run, so capture overhead dominates."""

    OPS = 10

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.proj(x)) * 0.5
        y = (y + x).view(-1).view(1, -1)
        y = torch.tanh(y) - 0.1
        return y.sum(-1, keepdim=True) + y


class ChainNet(torch.nn.Module):
    def __init__(self, ops: int) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(_ChainBlock() for _ in range(ops // _ChainBlock.OPS))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


def _chain_name(ops: int) -> str:
    return f"chain-{ops // 1_000_000}m" if ops >= 1_000_000 else f"chain-{ops // 1000}k"


def _chain_builder(ops: int) -> Callable[[str], Built]:
    def build_chain(device: str) -> Built:
        torch.manual_seed(0)
        with torch.device(device):
            model = ChainNet(ops)
        return model.eval(), (torch.randn(1, 8, device=device),), {}

    return build_chain


SCALE_OPS = (1_000, 10_000, 100_000, 1_000_000)

MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in [
        ModelSpec("coolcnn", build_coolcnn, smoke=True),
        ModelSpec("tiny-gpt2", build_tiny_gpt2, smoke=True),
        ModelSpec("resnet50", build_resnet50),
        ModelSpec("vit-base", build_vit_base),
        ModelSpec("bert-base", build_bert_base),
        ModelSpec("gpt2", build_gpt2),
        ModelSpec("t5-small", build_t5_small),
        ModelSpec("llama-1b", build_llama_1b),
        ModelSpec("llama-8b", build_llama_8b, gpu=True),
        ModelSpec("llama-70b", build_llama_70b, meta_only=True),
        *(ModelSpec(_chain_name(ops), _chain_builder(ops), scale=True) for ops in SCALE_OPS),
    ]
}


def build(name: str, device: str = "cpu") -> Built:
    """Build the named model on ``device``; meta-only models always go to ``meta``, GPU-sized
    ones there when ``device`` is no CUDA device."""
    spec = MODELS[name]
    on_meta = spec.meta_only or (spec.gpu and not device.startswith("cuda"))
    return spec.build("meta" if on_meta else device)


def smoke_models() -> list[str]:
    return [name for name, spec in MODELS.items() if spec.smoke]


def zoo_models(device: str = "cpu") -> list[str]:
    """The real architectures, smallest first (the GPU-sized ones only on ``cuda``)."""
    return [
        name for name, spec in MODELS.items()
        if not spec.smoke and not spec.scale and (not spec.gpu or device.startswith("cuda"))
    ]


def scale_models() -> list[str]:
    return [name for name, spec in MODELS.items() if spec.scale]


class DictNet(torch.nn.Module):
    """Takes a dict of tensors and returns a dict: the input style of many multi-modal models."""

    def __init__(self) -> None:
        super().__init__()
        self.image = torch.nn.Linear(8, 4)
        self.text = torch.nn.Embedding(10, 4)

    def forward(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {"joint": self.image(batch["image"]) + self.text(batch["tokens"]).mean(1)}


def build_dict_net(device: str) -> Built:
    torch.manual_seed(0)
    with torch.device(device):
        model = DictNet()
    batch = {"image": torch.randn(1, 8, device=device), "tokens": torch.zeros(1, 5, dtype=torch.long, device=device)}
    return model.eval(), (batch,), {}
