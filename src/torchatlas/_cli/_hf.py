"""``hf:<model_type>[/<task>]`` specs: a transformers architecture built from its config with
random weights (nothing is downloaded), and the inputs its forward pass needs.

Building skips weight initialisation: the modules are built with their parameters on
``meta`` (no memory, no init), then each parameter gets storage on the target device and
a cheap random fill. Buffers are built for real, so rotary tables and position ids are
right. The structure build also tells the parameter count before any memory is spent, so
a missing input or a model too big for the machine is reported first.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from torchatlas._text import error_text, format_bytes, format_compact

from ._spec import HF_PREFIX, HF_TASKS, LoadedModel, ModelError, SpecError, Status

# Config keywords that transformers accepts although a fresh config has no such attribute.
_EXTRA_KEYS = frozenset({"attn_implementation"})

# What each main input of a transformers model is made from when the command line gives none.
_TOKEN_INPUTS = ("input_ids",)
_DEFAULT_DECODER_LENGTH = 16
_DEFAULT_AUDIO_SAMPLES = 16000


def load(
    spec: str,
    overrides: dict[str, Any],
    task: str | None,
    device: str | None,
    *,
    has_inputs: bool | None,
    status: Status,
    warn: Callable[[str], None] | None,
) -> LoadedModel:
    model_type, _, spec_task = spec[len(HF_PREFIX) :].partition("/")
    if spec_task and task and spec_task != task:
        raise SpecError(f"spec {spec!r} names task {spec_task!r} but --task says {task!r}")
    task = spec_task or task or "base"
    if task not in HF_TASKS:
        raise SpecError(f"unknown task {task!r} in {spec!r}; expected one of {', '.join(HF_TASKS)}")
    with status("importing transformers…"):
        try:
            import transformers
        except ImportError:
            raise SpecError(f"{spec!r} needs transformers: pip install 'torchatlas[hf]'") from None
    config = _config(transformers, model_type, overrides, spec)
    auto = getattr(transformers, HF_TASKS[task])
    if has_inputs is False and _main_input(auto, config) in _TOKEN_INPUTS:
        raise SpecError(f"{spec} reads token ids: add --tokens BATCH,SEQ (e.g. --tokens 1,16) or --input B,S:int64")
    target = device or "cpu"
    with status(f"building {spec}…"):
        model = _build_structure(auto, config, target, spec)
    params = list(model.parameters())  # a tied parameter once
    count = sum(p.numel() for p in params)
    if target != "meta":
        need = sum(p.numel() * p.element_size() for p in params)
        available = available_memory(target)
        if warn is not None and available is not None and need > available:
            warn(
                f"{spec} has {format_compact(count)} parameters: about {format_bytes(need)}, more than the "
                f"{format_bytes(available)} this machine has free; --device meta traces its shapes without memory, "
                "or --set num_hidden_layers=2 builds a smaller one"
            )
        with status(f"building {spec} ({format_compact(count)} params)…"):
            _materialize(model, torch.device(target))
    return LoadedModel(model, spec)


def _config(transformers: Any, model_type: str, overrides: dict[str, Any], spec: str) -> Any:
    try:
        default = transformers.AutoConfig.for_model(model_type)
    except ValueError:
        known = list(transformers.CONFIG_MAPPING.keys())
        close = difflib.get_close_matches(model_type, known, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise SpecError(f"transformers has no model type {model_type!r}{hint} (spec {spec!r})") from None
    nested = {key: value for key, value in overrides.items() if "." in key}
    for key in overrides:
        owner, field = _field_owner(default, key)
        if owner is None:
            raise SpecError(f"--set {key}: the {model_type} config has no sub-config {field!r}")
        if key not in _EXTRA_KEYS and not hasattr(owner, field):
            close = difflib.get_close_matches(field, list(owner.to_dict()), n=1)
            hint = f"; did you mean {key.removesuffix(field) + close[0]!r}?" if close else ""
            raise SpecError(f"--set {key}: the {model_type} config has no such field{hint}")
    try:
        config = transformers.AutoConfig.for_model(
            model_type, **{key: value for key, value in overrides.items() if key not in nested}
        )
        for key, value in nested.items():
            setattr(*_field_owner(config, key), value)
        return config
    except Exception as e:
        raise ModelError(f"{model_type} config rejects the --set values: {error_text(e)}") from e


def _field_owner(config: Any, key: str) -> tuple[Any, str]:
    """(the config that holds ``key``'s field, the field): ``vision_config.num_hidden_layers`` is a
    field of the part's own config. (None, the part) when a part is no config."""
    *parts, field = key.split(".")
    for part in parts:
        config = getattr(config, part, None)
        if config is None or not hasattr(config, "to_dict"):
            return None, part
    return config, field


def _main_input(auto: Any, config: Any) -> str | None:
    """The model class's ``main_input_name`` (``input_ids``, ``pixel_values``, ``input_features``…)."""
    try:
        return auto._model_mapping[type(config)].main_input_name
    except Exception:  # an Auto class without this config: from_config names the problem
        return None


# -- building without initialising ------------------------------------------------


@contextmanager
def _parameters_on_meta() -> Iterator[None]:
    """Every parameter registered in the block lives on ``meta``: the module's own init runs on
    tensors without storage, so it costs nothing. Buffers are untouched."""
    register = torch.nn.Module.register_parameter

    def register_on_meta(module: torch.nn.Module, name: str, param: torch.nn.Parameter | None) -> None:
        if param is not None and not param.is_meta:
            param = torch.nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)
        register(module, name, param)

    torch.nn.Module.register_parameter = register_on_meta  # type: ignore[method-assign]
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = register  # type: ignore[method-assign]


def _build_structure(auto: Any, config: Any, device: str, spec: str) -> torch.nn.Module:
    try:
        with torch.device(device), _parameters_on_meta():
            return auto.from_config(config)
    except Exception as first:
        # A model whose constructor reads its own weights cannot be built on meta: build it the slow way.
        try:
            with torch.device(device):
                return auto.from_config(config)
        except Exception as e:
            raise ModelError(f"building {spec} failed: {error_text(e)}") from first


def _materialize(model: torch.nn.Module, device: torch.device) -> None:
    """Give every ``meta`` parameter storage on ``device`` and random values; tied ones stay tied."""
    noise = _Noise(device)
    made: dict[int, tuple[torch.nn.Parameter, torch.nn.Parameter]] = {}
    for module in model.modules():
        for name, param in list(module._parameters.items()):
            if param is None or not param.is_meta:
                continue
            if id(param) not in made:
                data = torch.empty(param.shape, dtype=param.dtype, device=device)
                with torch.no_grad():
                    noise.fill(data, name)
                made[id(param)] = (param, torch.nn.Parameter(data, requires_grad=param.requires_grad))
            module._parameters[name] = made[id(param)][1]


class _Noise:
    """Small random weights, unit norm scales, zero biases: finite activations at any depth.

    Weights repeat one block of normal noise, whose prime length keeps rows from lining up:
    drawing every value would cost seconds for a full-size model, copying costs almost nothing."""

    PERIOD = 1_000_003
    STD = 0.02

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._blocks: dict[torch.dtype, torch.Tensor] = {}

    def fill(self, data: torch.Tensor, name: str) -> None:
        if not data.is_floating_point():
            data.zero_()
        elif data.dim() >= 2:
            flat, block = data.view(-1), self._block(data.dtype)
            for start in range(0, flat.numel(), block.numel()):
                end = min(flat.numel(), start + block.numel())
                flat[start:end].copy_(block[: end - start])
        elif name.endswith("weight"):
            data.fill_(1.0)
        else:
            data.zero_()

    def _block(self, dtype: torch.dtype) -> torch.Tensor:
        if dtype not in self._blocks:
            self._blocks[dtype] = torch.randn(self.PERIOD, device=self.device).mul_(self.STD).to(dtype)
        return self._blocks[dtype]


def available_memory(device: str) -> int | None:
    """Bytes free for new tensors on ``device``, or ``None`` when unknown."""
    kind = torch.device(device).type
    if kind == "cuda" and torch.cuda.is_available():
        return int(torch.cuda.mem_get_info(torch.device(device))[0])
    if kind != "cpu":
        return None
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


# -- inputs -----------------------------------------------------------------------


def model_inputs(
    model: Any,
    args: tuple[Any, ...],
    tokens: tuple[int, int] | None,
    decoder_tokens: tuple[int, int] | None,
    device: torch.device,
) -> dict[str, Any]:
    """The keyword inputs an ``hf:`` model needs besides ``input_ids``: its main input (audio
    features, raw audio or pixels, sized from the config) when the command line gives none,
    and ``decoder_input_ids`` for an encoder-decoder (starting with the config's
    ``decoder_start_token_id``, as generation does)."""
    config = model.config
    forward = inspect.signature(model.forward).parameters
    batch = tokens[0] if tokens else decoder_tokens[0] if decoder_tokens else 1
    kwargs: dict[str, Any] = {}
    main = getattr(model, "main_input_name", "input_ids")
    if not args and not tokens and main not in _TOKEN_INPUTS:
        kwargs[main] = torch.randn(batch, *_feature_shape(config, main, model), device=device)
    vision = getattr(config, "vision_config", None)
    spliced = any(hasattr(config, k) for k in ("image_token_index", "image_token_id"))
    if tokens and "pixel_values" in forward and vision is not None and not spliced:
        # A model that pairs a text and an image (CLIP, SigLIP) reads both; one that splices image
        # features into the token sequence (LLaVA) needs image tokens random ids do not have.
        kwargs["pixel_values"] = torch.randn(batch, *_feature_shape(vision, "pixel_values", model), device=device)
    takes_decoder = config.is_encoder_decoder and "decoder_input_ids" in forward
    if decoder_tokens is not None and not takes_decoder:
        raise SpecError(f"--decoder-tokens: {type(model).__name__} has no decoder_input_ids")
    if takes_decoder:
        length = tokens[1] if tokens else _DEFAULT_DECODER_LENGTH
        limit = getattr(config, "max_target_positions", None)
        shape = decoder_tokens or (batch, min(length, limit) if isinstance(limit, int) else length)
        kwargs["decoder_input_ids"] = _decoder_ids(config, shape, device)
    return kwargs


def _feature_shape(config: Any, main: str, model: Any) -> tuple[int, ...]:
    if main == "input_features":
        if hasattr(config, "num_mel_bins") and hasattr(config, "max_source_positions"):
            # Whisper: a mel spectrogram whose length the encoder's stride-2 conv halves to its positions.
            return (config.num_mel_bins, 2 * config.max_source_positions)
        if hasattr(config, "input_feat_per_channel"):
            return (_DEFAULT_DECODER_LENGTH * 4, config.input_feat_per_channel * getattr(config, "input_channels", 1))
    if main == "input_values":
        return (_DEFAULT_AUDIO_SAMPLES,)
    if main == "pixel_values" and hasattr(config, "image_size"):
        size = config.image_size
        height, width = (size, size) if isinstance(size, int) else tuple(size)[:2]
        return (getattr(config, "num_channels", 3), height, width)
    raise SpecError(f"cannot size {main} for {type(model).__name__} from its config; give it with --input SHAPE")


def _decoder_ids(config: Any, shape: tuple[int, int], device: torch.device) -> torch.Tensor:
    vocab = config.vocab_size
    ids = torch.randint(0, vocab, shape, dtype=torch.int64, device=device)
    start = getattr(config, "decoder_start_token_id", None)
    if start is None:
        start = getattr(config, "pad_token_id", None)
    if isinstance(start, int) and 0 <= start < vocab and shape[1] > 0:
        ids[:, 0] = start
    return ids
