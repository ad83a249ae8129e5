"""Inputs for a transformers model made from its config and its forward's parameters.

:func:`generic_inputs` gives the layouts of the model's ``main_input_name``, most common
first. Where none of them runs, :func:`fuller_inputs` gives what a model of several inputs
needs besides: text with its image (CLIP-like dual encoders, BLIP-2's Q-Former prompt, a
grounding detector's caption), boxes for a layout model, region features, and for the
vision towers of Qwen-VL-like models the flattened patches with their ``grid_thw``.
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
    them, a spectrogram as frames by bins or bins by frames, a waveform with a channel); None
    where that input has no generic form."""
    main = model.main_input_name
    shapes = _main_shapes(config, model, main)
    if shapes is None:
        return None
    extra = _common(inspect.signature(model.forward).parameters, config)
    return [((), {main: _tensor(main, shape, config), **extra}) for shape in shapes]


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
    layouts = [(16, channels * frames * patch * patch), (16, channels, frames, patch, patch), (16, channels, patch, patch),
               (1, channels, 4 * patch, 4 * patch)]
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
    for name in ("input_ids", "qformer_input_ids", "pixel_values", "pixel_values_videos", "input_values",
                 "input_features", "prompt_pixel_values"):
        if name in parameters:
            shapes = _main_shapes(config, model, name.removeprefix("qformer_").removeprefix("prompt_"))
            given[name] = _tensor(name, shapes[0], config) if shapes else None
    if "bbox" in parameters:
        given["bbox"] = _boxes(8)
    if "visual_feats" in parameters:
        given["visual_feats"] = torch.randn(1, 4, first(config, ("visual_feat_dim",), hidden))
        given["visual_pos"] = torch.rand(1, 4, first(config, ("visual_pos_dim",), 4))
    if "query_embeds" in parameters:
        given["query_embeds"] = torch.randn(1, first(config, ("num_query_tokens",), 4), hidden)
    if "prompt_masks" in parameters and "pixel_values" in given:
        given["prompt_masks"] = torch.rand_like(given["pixel_values"])
    given = {**{name: value for name, value in given.items() if value is not None}, **_common(parameters, config)}
    tries = [((), given)] if given else []
    if model.main_input_name == "pixel_values" and given.get("pixel_values") is not None:
        # a matcher's pair of images (LightGlue, EfficientLoFTR)
        tries.append(((), {**given, "pixel_values": torch.stack([given["pixel_values"]] * 2, dim=1)}))
    return tries
