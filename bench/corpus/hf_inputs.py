"""Inputs for a transformers model made from its config and its forward's parameters.

:func:`generic_inputs` gives the layouts of the model's ``main_input_name``, most common
first, and a forecaster's past values with what it reads besides. Where none of them runs,
:func:`fuller_inputs` gives what a model of several inputs needs: text with its image
(CLIP-like dual encoders, BLIP-2's Q-Former prompt, a grounding detector's caption), boxes
for a layout model, region features, a language, an image pair or a video's frames, an
oblong image, a spectrogram as an image, the masks and shapes of SigLIP 2's patches, and for
the vision towers of Qwen-VL-like models the flattened patches with their ``grid_thw``.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

Inputs = tuple[tuple[Any, ...], dict[str, Any]]


def configs(config: Any) -> list[Any]:
    """``config`` and every sub-config in it (a text, vision or audio config), depth first."""
    from transformers import PretrainedConfig

    found = [config]
    for value in list(vars(config).values()):
        if isinstance(value, PretrainedConfig):
            found += configs(value)
    return found


def first(config: Any, names: tuple[str, ...], default: Any) -> Any:
    """The first integer field of ``names`` in ``config`` or its sub-configs."""
    for part in configs(config):
        for name in names:
            value = getattr(part, name, None)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
    return default


def vocab(config: Any) -> int:
    return first(config, ("vocab_size",), 256)


def _image_shapes(config: Any, model: torch.nn.Module, main: str) -> list[tuple[int, ...]]:
    size = first(config, ("image_size", "crop_size"), 32)
    channels = first(config, ("num_channels", "in_channels"), 3)
    image, video = (1, channels, size, size), (1, first(config, ("num_frames",), 2), channels, size, size)
    videos = main == "pixel_values_videos" or "video" in type(model).__name__.lower()
    frames = first(config, ("num_frames",), None) is not None
    return [video, image] if videos else [image, video] if frames else [image]


def _main_shapes(config: Any, model: torch.nn.Module, main: str) -> list[tuple[int, ...]] | None:
    if main == "input_ids":
        return [(1, 8)]
    if main in ("pixel_values", "pixel_values_videos"):
        return _image_shapes(config, model, main)
    if main == "input_values":
        bins = first(config, ("num_mel_bins", "feature_size"), 16)
        return [(1, 4000), (1, 1, 4000), (1, first(config, ("max_length",), 64), bins)]
    if main == "input_features":
        bins = first(config, ("num_mel_bins", "feature_size", "input_feat_per_channel"), 16)
        return [(1, bins, 64), (1, 64, bins)]
    return None


def _tensor(name: str, shape: tuple[int, ...], config: Any) -> torch.Tensor:
    return torch.randint(0, vocab(config), shape) if name.endswith("input_ids") else torch.randn(*shape)


def _common(parameters: Any, config: Any) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    if "decoder_input_ids" in parameters:
        extra["decoder_input_ids"] = torch.randint(0, vocab(config), (1, 5))
    if "use_cache" in parameters:
        extra["use_cache"] = False
    return extra


def generic_inputs(model: torch.nn.Module, config: Any) -> list[Inputs] | None:
    """Inputs from the model's ``main_input_name`` and its forward's parameters: the layouts a
    model of that input may take, most common first (frames of a video where the config counts
    them, a spectrogram as frames by bins or bins by frames, a waveform with a channel, a time
    series with what its forecaster reads besides); None where that input has no generic form."""
    main = model.main_input_name
    parameters = inspect.signature(model.forward).parameters
    if main == "past_values":
        return [((), _series(config, parameters))]
    shapes = _main_shapes(config, model, main)
    if shapes is None:
        return None
    extra = _common(parameters, config)
    return [((), {main: _tensor(main, shape, config), **extra}) for shape in shapes]


def _series(config: Any, parameters: Any) -> dict[str, Any]:
    """A forecaster's past values: as long as its context and the lags it reads back (one
    series, or a channel axis where the config counts channels), with the time features,
    observed mask and future values a probabilistic forecaster trains on, or the padding and
    frequency of a TimesFM-like model (which pads a shorter series, so a few patches do)."""
    length = config.context_length
    if "past_values_padding" in parameters:
        length = min(length, 4 * config.patch_length)
    length += max(getattr(config, "lags_sequence", None) or [0])
    channels = getattr(config, "num_input_channels", None)
    shape = (1, length) if channels is None else (1, length, channels)
    given = {"past_values": torch.randn(*shape)}
    if "past_time_features" in parameters:
        features = config.num_time_features + config.num_dynamic_real_features
        given["past_time_features"] = torch.randn(1, length, features)
        given["past_observed_mask"] = torch.ones(*shape)
        given["future_values"] = torch.randn(1, config.prediction_length, *shape[2:])
        given["future_time_features"] = torch.randn(1, config.prediction_length, features)
    if "past_values_padding" in parameters:
        given["past_values_padding"] = torch.zeros(*shape)
    if "freq" in parameters:
        given["freq"] = torch.tensor([0])
    return given


def _boxes(count: int) -> torch.Tensor:
    """``count`` layout boxes (x0, y0, x1, y1) on the 0-1000 grid, each corner after the first."""
    corners = torch.randint(0, 500, (1, count, 2))
    return torch.cat([corners, corners + torch.randint(1, 500, (1, count, 2))], dim=-1)


def _patches(config: Any, parameters: Any) -> list[dict[str, Any]]:
    """A 4×4 grid of patches (one frame), for a vision tower that takes its image as patches
    and the grid they came from (``grid_thw``): flattened, then by channel, then as pixels."""
    grid_name = next(name for name in parameters if name.endswith("grid_thw"))
    pixels_name = "hidden_states" if "hidden_states" in parameters else "pixel_values"
    patch = first(config, ("patch_size",), 8)
    channels = first(config, ("in_channels", "num_channels"), 3)
    frames = first(config, ("temporal_patch_size",), 1)
    grid = torch.tensor([[1, 4, 4]])
    layouts = [
        (16, channels * frames * patch * patch),
        (16, channels, frames, patch, patch),
        (16, channels, patch, patch),
        (1, channels, 4 * patch, 4 * patch),
    ]
    tries = []
    for layout in layouts:
        given = {pixels_name: torch.randn(*layout), grid_name: grid}
        if "merge_sizes" in parameters:
            given["merge_sizes"] = torch.tensor([first(config, ("spatial_merge_size",), 2)])
        tries.append(given)
    return tries


def fuller_inputs(model: torch.nn.Module, config: Any) -> list[Inputs]:
    """What a model needs besides its main input: every known input its forward names (text,
    image, video, audio, a Q-Former prompt, boxes, region features, query embeddings), and for a
    vision tower that takes patches, the patches and their grid."""
    parameters = inspect.signature(model.forward).parameters
    if any(name.endswith("grid_thw") for name in parameters):
        return [((), given) for given in _patches(config, parameters)]
    hidden = first(config, ("hidden_size", "d_model"), 64)
    given: dict[str, Any] = {}
    for name in (
        "input_ids",
        "qformer_input_ids",
        "pixel_values",
        "pixel_values_videos",
        "input_values",
        "input_features",
        "prompt_pixel_values",
    ):
        if name in parameters:
            shapes = _main_shapes(config, model, name.removeprefix("qformer_").removeprefix("prompt_"))
            given[name] = _tensor(name, shapes[0], config) if shapes else None
    if given.get("input_ids") is not None and (prompt := _query_placeholders(config, given)) is not None:
        given["input_ids"] = prompt
    if "input_features_mask" in parameters and given.get("input_features") is not None:
        # every frame is speech (Qwen3-ASR's, Fun-ASR's and Audio Flamingo 3's encoders)
        given["input_features_mask"] = torch.ones(1, given["input_features"].shape[-1], dtype=torch.long)
    if "bbox" in parameters:
        given["bbox"] = _boxes(8)
    if "visual_feats" in parameters:
        given["visual_feats"] = torch.randn(1, 4, first(config, ("visual_feat_dim",), hidden))
        given["visual_pos"] = torch.rand(1, 4, first(config, ("visual_pos_dim",), 4))
    if "query_embeds" in parameters:
        given["query_embeds"] = torch.randn(1, first(config, ("num_query_tokens",), 4), hidden)
    if "prompt_masks" in parameters and "pixel_values" in given:
        given["prompt_masks"] = torch.rand_like(given["pixel_values"])
    if "lang_ids" in parameters:
        given["lang_ids"] = torch.zeros(1, dtype=torch.long)  # X-MOD's adapter: the first language
    if "spatial_shapes" in parameters:
        given.update(_flat_patches(config))
    given = {**{name: value for name, value in given.items() if value is not None}, **_common(parameters, config)}
    tries = [((), given)] if given else []
    if given.get("pixel_values") is not None and given["pixel_values"].dim() == 4:
        # a matcher's pair of images (LightGlue, EfficientLoFTR), or a video's frames (X-CLIP)
        frames = [given["pixel_values"]] * first(config, ("num_frames",), 2)
        tries.append(((), {**given, "pixel_values": torch.stack(frames, dim=1)}))
        if (oblong := _oblong_image(config)) is not None:  # a text recognizer's strip (MGP-STR)
            tries.append(((), {**given, "pixel_values": oblong}))
    if given.get("input_features") is not None and given["input_features"].dim() == 3:
        # a spectrogram as a one-channel image (CLAP's audio tower)
        spectrogram = given["input_features"].transpose(1, 2).unsqueeze(1)
        tries.append(((), {**given, "input_features": spectrogram}))
    return tries


def _query_placeholders(config: Any, given: dict[str, Any]) -> torch.Tensor | None:
    """Token ids that hold a place for each query a Q-Former passes on (BLIP-2, InstructBLIP;
    a video's every frame), then text; None for a model without such queries."""
    token = getattr(config, "image_token_id", None) or getattr(config, "video_token_index", None)
    queries = getattr(config, "num_query_tokens", None)
    if token is None or not isinstance(queries, int):
        return None
    pixels = given.get("pixel_values")
    frames = pixels.shape[1] if pixels is not None and pixels.dim() == 5 else 1
    return torch.cat([torch.full((1, queries * frames), token), torch.randint(0, token, (1, 4))], dim=1)


def _oblong_image(config: Any) -> torch.Tensor | None:
    """An image of the (height, width) a config gives as its ``image_size``; None where none does."""
    for part in configs(config):
        size = getattr(part, "image_size", None)
        if isinstance(size, (list, tuple)) and len(size) == 2:
            return torch.randn(1, first(config, ("num_channels", "in_channels"), 3), *size)
    return None


def _flat_patches(config: Any) -> dict[str, Any]:
    """A 4×4 grid of flattened patches with its mask and shape, for a vision tower that keeps each
    image's aspect ratio (SigLIP 2's NaFlex)."""
    patch = first(config, ("patch_size",), 16)
    channels = first(config, ("num_channels",), 3)
    return {
        "pixel_values": torch.randn(1, 16, channels * patch * patch),
        "pixel_attention_mask": torch.ones(1, 16),
        "spatial_shapes": torch.tensor([[4, 4]]),
    }
