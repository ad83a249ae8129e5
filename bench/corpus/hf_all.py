"""Every transformers model type, from its default config: ``python bench/fidelity.py hf:``.

``transformers``' own list of base models (``MODEL_MAPPING_NAMES``, about 600 types) is the
corpus: each default config is shrunk (:func:`shrink_all`: two layers, width 64, in every
sub-config), built with random weights and traced twice, as called (``hf:KIND``) and with
``output_hidden_states=True, output_attentions=True`` where its forward takes them
(``hf:KIND+outputs``): a value that crosses layers or leaves through a tuple of hidden
states is checked. The types in ``hf.ARCHITECTURES`` keep their hand-written inputs; every
other type gets inputs made from its ``main_input_name`` (:func:`generic_inputs`).

A type that cannot be run here is *skipped*, with the reason, never silently: its build
needs a package this environment lacks or a download, or its eager forward pass refuses
the generic inputs (multimodal models wanting image tokens matched to their pixels, time
series wanting past values of a configured length). Nothing is downloaded.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch

from .hf import ARCHITECTURES, SMALL, shrink

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


def _configs(config: Any) -> list[Any]:
    """``config`` and every sub-config in it (a text, vision or audio config), depth first."""
    from transformers import PretrainedConfig

    found = [config]
    for value in list(vars(config).values()):
        if isinstance(value, PretrainedConfig):
            found += _configs(value)
    return found


# Fields a default config leaves unset that its model needs to be built (a time series'
# horizon, ESM's vocabulary): a small value, where the default is None.
REQUIRED = {"prediction_length": 4, "context_length": 4, "vocab_size": 256}


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


def _vocab(config: Any) -> int:
    for part in _configs(config):
        if isinstance(getattr(part, "vocab_size", None), int):
            return part.vocab_size
    return 256


def _first(config: Any, names: tuple[str, ...], default: Any) -> Any:
    for part in _configs(config):
        for name in names:
            value = getattr(part, name, None)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
    return default


def generic_inputs(model: torch.nn.Module, config: Any) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    """Inputs from the model's ``main_input_name`` and its forward's parameters: the layouts a
    model of that input may take, most common first (frames of a video where the config counts
    them, a spectrogram as frames by bins or bins by frames, a waveform with a channel)."""
    main = model.main_input_name
    parameters = inspect.signature(model.forward).parameters
    shapes: list[tuple[int, ...]]
    if main == "input_ids":
        shapes = [(1, 8)]
    elif main in ("pixel_values", "pixel_values_videos"):
        size = _first(config, ("image_size", "crop_size"), 32)
        channels = _first(config, ("num_channels", "in_channels"), 3)
        image, video = (1, channels, size, size), (1, _first(config, ("num_frames",), 2), channels, size, size)
        videos = main == "pixel_values_videos" or "video" in type(model).__name__.lower()
        frames = _first(config, ("num_frames",), None) is not None
        shapes = [video, image] if videos else [image, video] if frames else [image]
    elif main == "input_values":
        bins = _first(config, ("num_mel_bins", "feature_size"), 16)
        shapes = [(1, 4000), (1, 1, 4000), (1, _first(config, ("max_length",), 64), bins)]
    elif main == "input_features":
        bins = _first(config, ("num_mel_bins", "feature_size", "input_feat_per_channel"), 16)
        shapes = [(1, bins, 64), (1, 64, bins)]
    else:
        raise Skip(f"its main input {main!r} has no generic form here")
    extra: dict[str, Any] = {}
    if "decoder_input_ids" in parameters:
        extra["decoder_input_ids"] = torch.randint(0, _vocab(config), (1, 5))
    if "use_cache" in parameters:
        extra["use_cache"] = False
    if main == "input_ids":
        return [((), {main: torch.randint(0, _vocab(config), shape), **extra}) for shape in shapes]
    return [((), {main: torch.randn(*shape), **extra}) for shape in shapes]


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


def _build_model(kind: str) -> tuple[torch.nn.Module, Any]:
    """The model from its shrunk default config; where the shrinking breaks the config (widths a
    head count does not divide, lists of per-stage sizes), from the default with two layers, then
    from the default as it is."""
    import transformers

    overrides = ARCHITECTURES[kind][1] if kind in ARCHITECTURES else {}
    tries = (
        lambda c: shrink_all(c, **overrides),
        _layers_only,
        lambda c: c,
    )
    first: Exception | None = None
    for configure in tries:
        try:
            config = _required(configure(transformers.AutoConfig.for_model(kind)))
            if getattr(config, "vocabulary_map", False) is None:
                raise Skip("its vocabulary map comes with a checkpoint's tokenizer (a download)")
            torch.manual_seed(0)
            return _base_model_class(kind)(config).eval(), config
        except Skip:
            raise
        except (ImportError, OSError) as exc:  # a package this environment lacks, or a download
            raise Skip(f"its build needs what is not here: {type(exc).__name__}: {_line(exc)}") from exc
        except Exception as exc:
            first = first or exc
    assert first is not None
    # transformers' own default config does not build (a field its model reads that the config
    # lacks): nothing of torchatlas ran, so the case is skipped with the reason, not failed.
    raise Skip(f"its default config does not build here: {type(first).__name__}: {_line(first)}") from first


def _line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:160] if text else ""


def hf_builder(kind: str, outputs: bool) -> Callable[[], Built]:
    """``kind`` built and given inputs: its hand-written ones (``hf.ARCHITECTURES``), else generic
    ones, checked to run eagerly (or :class:`Skip`); ``outputs``: every hidden state and attention map too."""

    def build() -> Built:
        model, config = _build_model(kind)
        tries = [ARCHITECTURES[kind][0](config)] if kind in ARCHITECTURES else generic_inputs(model, config)
        if outputs:
            if not takes_output_flags(model):
                raise Skip("its forward takes no output_hidden_states/output_attentions")
            tries = [(args, {**kwargs, **dict.fromkeys(OUTPUT_FLAGS, True)}) for args, kwargs in tries]
        if kind in ARCHITECTURES and not outputs:
            return (model, *tries[0])
        refused: Exception | None = None
        for args, kwargs in tries:
            try:
                torch.manual_seed(0)
                with torch.no_grad():
                    model(*args, **kwargs)
                return model, args, kwargs
            except Exception as exc:
                refused = refused or exc
        assert refused is not None
        raise Skip(f"its eager forward refuses the corpus's inputs: {type(refused).__name__}: {_line(refused)}") from refused

    return build


def all_hf_cases() -> dict[str, Callable[[], Built]]:
    cases: dict[str, Callable[[], Built]] = {}
    for kind in model_types():
        cases[f"hf:{kind}"] = hf_builder(kind, outputs=False)
        cases[f"hf:{kind}{OUTPUTS}"] = hf_builder(kind, outputs=True)
    return cases
