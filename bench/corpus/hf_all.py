"""Every transformers model type, from its default config: ``python bench/fidelity.py hf:``.

``transformers``' own list of base models (``MODEL_MAPPING_NAMES``, about 600 types) is the
corpus: each default config is shrunk (:func:`shrink_all`: two layers, width 64, in every
sub-config), built with random weights and traced twice, as called (``hf:KIND``) and with
``output_hidden_states=True, output_attentions=True`` where its forward takes them
(``hf:KIND+outputs``): a value that crosses layers or leaves through a tuple of hidden
states is checked. The types in ``hf.ARCHITECTURES`` keep their hand-written inputs; every
other type gets inputs made from its ``main_input_name``, then fuller ones where those do not
run (:mod:`.hf_inputs`); a config whose shrunk widths the model refuses is tried with its
derived sizes made consistent (:func:`_consistent`), then built anew from the shrunk sizes
(:func:`_rebuilt`), then at its default widths.

A type that cannot be run here is *skipped*, with the reason, never silently: its build
needs a package this environment lacks or a download, transformers' own default config does
not build, only a config too big for here would, or its eager forward pass refuses every
input the corpus makes (multimodal models wanting image tokens matched to their pixels, a
video session). Nothing is downloaded.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from typing import Any

import torch

from .hf import ARCHITECTURES, SMALL, shrink
from .hf_inputs import configs as _configs
from .hf_inputs import fuller_inputs, generic_inputs

Built = tuple[torch.nn.Module, tuple[Any, ...], dict[str, Any]]
OUTPUTS = "+outputs"
"""The suffix of a case traced with every hidden state and attention map returned."""
OUTPUT_FLAGS = ("output_hidden_states", "output_attentions")


class Skip(Exception):
    """A model the corpus cannot run here, with the reason (a missing package, a download,
    inputs it needs that the corpus cannot make)."""


def model_types() -> list[str]:
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    return sorted(MODEL_MAPPING_NAMES)


# Fields a default config leaves unset that its model needs to be built (a time series'
# horizon and context, at least Autoformer's label length; ESM's vocabulary): a small value,
# where the default is None.
REQUIRED = {"prediction_length": 4, "context_length": 16, "vocab_size": 256}


def _required(config: Any) -> Any:
    for part in _configs(config):
        for name, value in REQUIRED.items():
            if name in vars(part) and getattr(part, name) is None:
                setattr(part, name, value)
    return config


def shrink_all(config: Any, **overrides: Any) -> Any:
    for part in _configs(config)[1:]:
        shrink(part)
    return shrink(config, **overrides)


def takes_output_flags(model: torch.nn.Module) -> bool:
    """The forward takes ``output_hidden_states`` and ``output_attentions`` (by name, or in the
    ``**kwargs`` of transformers' ``TransformersKwargs``)."""
    parameters = inspect.signature(model.forward).parameters
    if all(flag in parameters for flag in OUTPUT_FLAGS):
        return True
    return any(p.kind is p.VAR_KEYWORD for p in parameters.values()) and "TransformersKwargs" in str(
        inspect.signature(model.forward)
    )


def _layers_only(config: Any) -> Any:
    """``config`` with two layers in each part and nothing else changed."""
    layers = next(names for names in SMALL if "num_hidden_layers" in names)
    for part in _configs(config):
        for name in layers:
            if isinstance(getattr(part, name, None), int):
                try:
                    setattr(part, name, 2)
                except (AttributeError, NotImplementedError):
                    pass
    return config


def _base_model_class(kind: str) -> Any:
    """The base model class of ``kind`` (the first, where transformers lists several: Funnel's
    model and base model, which ``AutoModel`` fails to choose between for a config)."""
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    names = MODEL_MAPPING_NAMES.get(kind)
    if names is None:
        return transformers.AutoModel.from_config
    return getattr(transformers, names if isinstance(names, str) else names[0])._from_config


# Sizes the shrunk widths leave inconsistent: multi-head latent attention's ranks and rotary
# part (DeepSeek-V2/V3, MiniCPM3), the multimodal rotary sections of Qwen-VL-like text models
# (their sum is half the rotary width), Mamba mixers' heads (their product is twice the width),
# the expert groups a router picks from (the shrunk experts are too few to split in eight), and
# a detector's queries (RT-DETR picks its queries among the few anchors of a small image).
CONSISTENT = {
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 8,
    "v_head_dim": 16,
    "qk_head_dim": 16,
    "kv_lora_rank": 32,
    "q_lora_rank": 32,
    "index_head_dim": 16,
    "index_n_heads": 4,
    "mamba_n_heads": 8,
    "mamba_d_head": 16,
    "mamba_headdim": 16,
    "n_mamba_heads": 8,
    "mamba_d_state": 8,
    "mamba_chunk_size": 8,
    "mamba_dt_rank": 4,
    "kv_channels": 16,
    "n_group": 1,
    "topk_group": 1,
    "num_queries": 8,
}


def _rotary_sections(part: Any, rope: dict[str, Any]) -> list[int]:
    """Time, height and width sections that add up to half the rotary width (``[2, 3, 3]`` for
    a 16-wide head rotated whole; GLM-4V-MoE rotates half of it)."""
    head = getattr(part, "head_dim", None) or part.hidden_size // part.num_attention_heads
    total = int(head * rope.get("partial_rotary_factor", 1.0)) // 2
    side = total * 3 // 8
    return [total - 2 * side, side, side]


def _consistent(config: Any) -> Any:
    """The shrunk ``config`` with the sizes derived from its widths made to agree with them."""
    for part in _configs(config):
        for name, value in CONSISTENT.items():
            if isinstance(getattr(part, name, None), int) and name in vars(part):  # not a derived property
                setattr(part, name, value)
        if isinstance(getattr(part, "qk_rope_head_dim", None), int) and isinstance(
            getattr(part, "head_dim", None), int
        ):
            part.head_dim = part.qk_rope_head_dim  # the rotary embedding's width
        if isinstance(getattr(part, "kv_lora_rank", None), int) and "num_key_value_heads" in vars(part):
            part.num_key_value_heads = part.num_attention_heads  # latent attention expands to every head
        if isinstance(vars(part).get("attention_hidden_size"), int):
            # Zamba's shared attention reads the residual stream and the embeddings side by side
            part.attention_hidden_size = 2 * part.hidden_size
            part.attention_head_dim = part.attention_hidden_size // part.num_attention_heads
        if "token_dropout" in vars(part) and part.pad_token_id is None:
            part.pad_token_id = 1  # ESM's padding, which its attention mask reads
        if "num_experts_per_tok" in vars(part) and part.num_experts_per_tok is None:
            part.num_experts_per_tok = 2  # DeepSeek-V2's default router picks None experts
        if isinstance(vars(part).get("embedding_dim"), int):
            part.embedding_dim = part.hidden_size  # xLSTM's blocks are as wide as its embedding
        if isinstance(vars(part).get("cross_attention_hidden_size"), int):
            part.cross_attention_hidden_size = part.hidden_size  # T5Gemma's encoder, shrunk alike
        if isinstance(vars(part).get("num_query_tokens"), int) and hasattr(part, "qformer_config"):
            # BLIP-2's Q-Former attends to the shrunk vision tower, and its queries take the
            # places of one token of the shrunk vocabulary (its default is None, or past it)
            part.qformer_config.encoder_hidden_size = part.vision_config.hidden_size
            for name in ("image_token_id", "video_token_index"):
                if hasattr(part, name):
                    setattr(part, name, part.text_config.vocab_size - 1)
        rope = getattr(part, "rope_parameters", None)
        if isinstance(rope, dict) and getattr(part, "vocab_size", None):
            rope["mrope_section"] = _rotary_sections(part, rope)
    return config


SMALL_BY_NAME = {name: value for names, value in SMALL.items() for name in names}
# Per-layer sizes a rebuilt config is given besides (Gemma 3n's and 4's per-layer inputs, shared
# key-value layers and LAuReL rank), which the shrunk widths would leave at their defaults.
REBUILT = {
    "num_kv_shared_layers": 0,
    "hidden_size_per_layer_input": 16,
    "vocab_size_per_layer_input": 256,
    "global_head_dim": 16,
    "laurel_rank": 8,
}


def _rebuilt(config: Any) -> Any:
    """``config`` made anew from the shrunk sizes as arguments, so that it derives what depends
    on them itself: a config that validates per-layer fields as it is built (Gemma 3n's and 4's
    layer types and key-value sharing) cannot be shrunk by setting attributes. A list of one
    entry per layer keeps two (the layer types: each kind of layer, in turn)."""
    from transformers import PretrainedConfig

    layers = getattr(config, "num_hidden_layers", None)
    arguments: dict[str, Any] = {}
    for name, value in vars(config).items():
        if isinstance(value, PretrainedConfig):
            arguments[name] = _rebuilt(value).to_dict()
        elif isinstance(value, list) and isinstance(layers, int) and layers > 2 and len(value) == layers:
            kept = list(dict.fromkeys(value)) if name == "layer_types" else value
            arguments[name] = (kept * 2)[:2]
        elif isinstance(value, int) and not isinstance(value, bool):
            if name in SMALL_BY_NAME or name in REBUILT:
                arguments[name] = SMALL_BY_NAME.get(name, REBUILT.get(name))
    return type(config)(**arguments)


# A model over this many parameters is not built (the default widths of a large language
# model, or towers a rebuilt config does not shrink; tried only where the shrunk ones do not run):
# about the most the corpus's 6 GB address space traces and exports (Sesame CSM's two layers of
# default width, 687M, fit).
MAX_PARAMETERS = 700_000_000


def _affordable(build: Callable[[Any], torch.nn.Module], config: Any) -> None:
    with torch.device("meta"):
        count = sum(p.numel() for p in build(config).parameters())
    if count > MAX_PARAMETERS:
        raise MemoryError(f"{count / 1e6:.0f}M parameters, over the {MAX_PARAMETERS / 1e6:.0f}M built here")


def _built_models(kind: str) -> Iterator[tuple[torch.nn.Module, Any]]:
    """The model from its shrunk default config; then with the sizes derived from the widths
    made consistent; then built anew from the shrunk sizes (:func:`_rebuilt`); then (where the
    shrinking breaks the config: widths a head count does not divide, lists of per-stage sizes)
    from the default with two layers, then from the default as it is. Each that builds, in
    that order; :class:`Skip` where none does."""
    import transformers

    overrides = ARCHITECTURES[kind][1] if kind in ARCHITECTURES else {}
    tries = (
        (lambda c: shrink_all(c, **overrides), False),
        (lambda c: _consistent(shrink_all(c, **overrides)), False),
        (_rebuilt, True),
        (_layers_only, True),
        (lambda c: c, True),
    )
    first: Exception | None = None
    too_big: MemoryError | None = None
    built = False
    for configure, full_width in tries:
        try:
            config = _required(configure(transformers.AutoConfig.for_model(kind)))
            if getattr(config, "vocabulary_map", False) is None:
                raise Skip("its vocabulary map comes with a checkpoint's tokenizer (a download)")
            build = _base_model_class(kind)
            if full_width:
                _affordable(build, config)
            torch.manual_seed(0)
            model = build(config).eval()
        except Skip:
            raise
        except (ImportError, OSError) as exc:  # a package this environment lacks, or a download
            raise Skip(f"its build needs what is not here: {type(exc).__name__}: {_line(exc)}") from exc
        except MemoryError as exc:  # over the parameter count, or the address-space limit
            too_big = too_big or exc
            continue
        except Exception as exc:
            if "can't allocate memory" in str(exc):  # torch's allocator, at --memory-gb
                too_big = too_big or MemoryError(f"past the address-space limit ({_line(exc)})")
            else:
                first = first or exc
            continue
        built = True
        yield model, config
    if not built:
        # transformers' own default config does not build (a field its model reads that the
        # config lacks), or only a config too big for here would: nothing of torchatlas ran,
        # so the case is skipped with the reason.
        if too_big is not None and first is None:
            raise Skip(f"its build is too big for here: {_line(too_big)}") from too_big
        assert first is not None
        bigger = f" (a larger config: {_line(too_big)})" if too_big is not None else ""
        raise Skip(f"its default config does not build here: {type(first).__name__}: {_line(first)}{bigger}") from first


def _line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:160] if text else ""


def _input_tries(kind: str, model: torch.nn.Module, config: Any) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    if kind in ARCHITECTURES:
        return [ARCHITECTURES[kind][0](config)]
    main = generic_inputs(model, config)
    fuller = fuller_inputs(model, config)
    if main is None and not fuller:
        raise Skip(f"its main input {model.main_input_name!r} has no generic form here")
    return (main or []) + fuller


def hf_builder(kind: str, outputs: bool) -> Callable[[], Built]:
    """``kind`` built and given inputs: its hand-written ones (``hf.ARCHITECTURES``), else generic
    ones, then fuller ones (:mod:`.hf_inputs`), checked to run eagerly, on each config that
    builds in turn (or :class:`Skip`); ``outputs``: every hidden state and attention map too."""

    def build() -> Built:
        refused: Exception | None = None
        for model, config in _built_models(kind):
            tries = _input_tries(kind, model, config)
            if outputs:
                if not takes_output_flags(model):
                    raise Skip("its forward takes no output_hidden_states/output_attentions")
                tries = [(args, {**kwargs, **dict.fromkeys(OUTPUT_FLAGS, True)}) for args, kwargs in tries]
            if kind in ARCHITECTURES and not outputs:
                return (model, *tries[0])
            for args, kwargs in tries:
                try:
                    torch.manual_seed(0)
                    with torch.no_grad():
                        model(*args, **kwargs)
                    return model, args, kwargs
                except Exception as exc:
                    refused = refused or exc
        assert refused is not None
        raise Skip(
            f"its eager forward refuses the corpus's inputs: {type(refused).__name__}: {_line(refused)}"
        ) from refused

    return build


def all_hf_cases() -> dict[str, Callable[[], Built]]:
    cases: dict[str, Callable[[], Built]] = {}
    for kind in model_types():
        cases[f"hf:{kind}"] = hf_builder(kind, outputs=False)
        cases[f"hf:{kind}{OUTPUTS}"] = hf_builder(kind, outputs=True)
    return cases
