"""The vision and diffusion zoo (issue 31): one timm model per architecture family and the
diffusers models, tiny, random-initialised, nothing downloaded. ``python bench/zoo.py``
reports it; ``tests/test_zoo.py`` (slow) holds every model to its checks.

timm imports torchvision. The torchvision wheel on PyPI is built against a CUDA torch:
with the CPU torch of this project its compiled operators are missing, and importing it
fails when ``torchvision._meta_registrations`` registers meta kernels for them
(``operator torchvision::nms does not exist``). No timm model traced here uses those
operators, so ``import_timm`` puts an empty module under that name before the first
import (in ``sys.modules`` only, for this process); everything else of torchvision
imports as it is. It lives here, with the corpus, because only the corpus (bench and tests,
never the package) imports timm.
"""

from __future__ import annotations

import dataclasses
import re
import sys
import types
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn

_META = "torchvision._meta_registrations"
LISTING = re.compile(r"^[│ ]*[├└]── \[\d+\] ", re.MULTILINE)
"""A line of a numbered listing in a tree (``├── [3] mm → 3×8  ← [1], [2]``)."""

# One model per architecture family: (timm name, input side; None: the model's own size).
TIMM: list[tuple[str, int | None]] = [
    ("resnet10t", 64), ("resnest14d", 64), ("convnext_atto", 64), ("vit_tiny_patch16_224", None),
    ("deit_tiny_patch16_224", None), ("efficientnet_b0", 64), ("mobilenetv3_small_050", 64),
    ("regnetx_002", 64), ("densenet121", 64), ("rexnet_100", 64), ("mobileone_s0", 64),
    ("botnet26t_256", None), ("halonet26t", None), ("lambda_resnet26t", 64), ("bat_resnext26ts", None),
    ("dpn48b", 64), ("edgenext_xx_small", 64), ("efficientformerv2_s0", None), ("levit_128s", None),
    ("mvitv2_tiny", None), ("res2next50", 64), ("swiftformer_xs", None), ("xcit_nano_12_p16_224", None),
    ("volo_d1_224", None), ("focalnet_tiny_srf", 64), ("poolformer_s12", 64), ("nf_regnet_b0", 64),
    ("maxvit_nano_rw_256", None), ("coatnet_nano_rw_224", None), ("dla34", 64), ("hrnet_w18_small", 64),
    ("xception41", 64), ("nextvit_small", 64), ("efficientvit_b0", 64), ("efficientvit_m0", None),
    ("ghostnet_050", 64), ("mixer_s32_224", None), ("cait_xxs24_224", None), ("tiny_vit_5m_224", 64),
    ("repvgg_a0", 64), ("fastvit_t8", 64), ("eva02_tiny_patch14_224", None), ("pvt_v2_b0", 64),
    ("hgnetv2_b0", 64), ("skresnet18", 64), ("ese_vovnet19b_slim_dw", 64), ("mobilevit_xxs", 64),
    ("efficientformer_l1", None), ("gcvit_xxtiny", None), ("davit_tiny", 64), ("starnet_s050", 64),
    ("rdnet_tiny", 64), ("shvit_s1", 64), ("fasternet_t0", 64), ("hiera_tiny_224", None),
    ("mambaout_femto", 64), ("mobilenetv4_conv_small", 64), ("ghostnetv2_100", 64), ("cspresnet50", 64),
    ("pnasnet5large", 64), ("inception_v3", None), ("vitamin_small_224", None),
]


def import_timm() -> Any:
    """timm, importing torchvision without its compiled operators' meta kernels (see above)."""
    if "torchvision" not in sys.modules:
        sys.modules.setdefault(_META, types.ModuleType(_META))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import timm
    return timm


def timm_model(name: str, side: int | None) -> tuple[nn.Module, tuple, dict]:
    timm = import_timm()
    torch.manual_seed(0)
    model = timm.create_model(name, pretrained=False, num_classes=8).eval()
    if side is None:
        side = model.pretrained_cfg.get("input_size", (3, 224, 224))[1]
    return model, (torch.randn(1, 3, side, side),), {}


def _unet2d():
    from diffusers import UNet2DModel

    model = UNet2DModel(
        sample_size=16, in_channels=3, out_channels=3, layers_per_block=1, block_out_channels=(8, 16),
        down_block_types=("DownBlock2D", "AttnDownBlock2D"), up_block_types=("AttnUpBlock2D", "UpBlock2D"),
        norm_num_groups=4, attention_head_dim=4,
    )
    return model, (torch.randn(1, 3, 16, 16), torch.tensor([10])), {}


def _unet2d_condition():
    from diffusers import UNet2DConditionModel

    model = UNet2DConditionModel(
        sample_size=8, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(8, 16),
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=8, norm_num_groups=4, attention_head_dim=4,
    )
    return model, (torch.randn(1, 4, 8, 8), torch.tensor([10]), torch.randn(1, 3, 8)), {}


def _autoencoder_kl():
    from diffusers import AutoencoderKL

    model = AutoencoderKL(
        down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2,
        block_out_channels=(8, 16), latent_channels=4, norm_num_groups=4, layers_per_block=1,
    )
    return model, (torch.randn(1, 3, 16, 16),), {}


def _vq():
    from diffusers import VQModel

    model = VQModel(
        down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2,
        block_out_channels=(8, 16), latent_channels=4, norm_num_groups=4, layers_per_block=1,
        num_vq_embeddings=16, vq_embed_dim=4,
    )
    return model, (torch.randn(1, 3, 16, 16),), {}


def _dit():
    from diffusers import DiTTransformer2DModel

    model = DiTTransformer2DModel(
        num_attention_heads=2, attention_head_dim=4, in_channels=4, num_layers=2, sample_size=8, patch_size=2,
        num_embeds_ada_norm=10,
    )
    return model, (torch.randn(1, 4, 8, 8),), {"timestep": torch.tensor([3]), "class_labels": torch.tensor([1])}


def _sd3():
    from diffusers import SD3Transformer2DModel

    model = SD3Transformer2DModel(
        sample_size=8, patch_size=2, in_channels=4, num_layers=2, attention_head_dim=4, num_attention_heads=2,
        joint_attention_dim=8, caption_projection_dim=8, pooled_projection_dim=8, out_channels=4, pos_embed_max_size=16,
    )
    kwargs = {"encoder_hidden_states": torch.randn(1, 3, 8), "pooled_projections": torch.randn(1, 8),
              "timestep": torch.tensor([3])}
    return model, (torch.randn(1, 4, 8, 8),), kwargs


def _flux():
    from diffusers import FluxTransformer2DModel

    model = FluxTransformer2DModel(
        patch_size=1, in_channels=4, num_layers=1, num_single_layers=1, attention_head_dim=8, num_attention_heads=2,
        joint_attention_dim=8, pooled_projection_dim=8, axes_dims_rope=(2, 2, 4),
    )
    kwargs = {"encoder_hidden_states": torch.randn(1, 3, 8), "pooled_projections": torch.randn(1, 8),
              "timestep": torch.tensor([0.5]), "img_ids": torch.zeros(16, 3), "txt_ids": torch.zeros(3, 3)}
    return model, (torch.randn(1, 16, 4),), kwargs


def _controlnet():
    from diffusers import ControlNetModel

    model = ControlNetModel(
        block_out_channels=(8, 16), layers_per_block=1, down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        cross_attention_dim=8, norm_num_groups=4, attention_head_dim=4, conditioning_embedding_out_channels=(4, 8),
    )
    args = (torch.randn(1, 4, 8, 8), torch.tensor([10]), torch.randn(1, 3, 8), torch.randn(1, 3, 16, 16))
    return model, args, {}


def _unet1d():
    from diffusers import UNet1DModel

    model = UNet1DModel(
        block_out_channels=(8, 8, 16, 16), in_channels=14, out_channels=14, time_embedding_type="positional",
        use_timestep_embedding=True, flip_sin_to_cos=False, freq_shift=1.0, out_block_type="OutConv1DBlock",
        mid_block_type="MidResTemporalBlock1D", down_block_types=("DownResnetBlock1D",) * 4,
        up_block_types=("UpResnetBlock1D",) * 3, act_fn="swish",
    )
    return model, (torch.randn(1, 14, 16), torch.tensor([10])), {}


DIFFUSERS: dict[str, Callable[[], tuple[nn.Module, tuple, dict]]] = {
    "UNet2D": _unet2d, "UNet2DCondition": _unet2d_condition, "AutoencoderKL": _autoencoder_kl, "VQ": _vq,
    "DiT": _dit, "SD3": _sd3, "Flux": _flux, "ControlNet": _controlnet, "UNet1D": _unet1d,
}


def diffusers_model(name: str) -> tuple[nn.Module, tuple, dict]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.manual_seed(0)
        model, args, kwargs = DIFFUSERS[name]()
    return model.eval(), args, kwargs


def corpus() -> dict[str, Callable[[], tuple[nn.Module, tuple, dict]]]:
    """Every model of the zoo by name (``timm:rexnet_100``, ``diffusers:DiT``): a builder each."""
    models: dict[str, Callable[[], tuple[nn.Module, tuple, dict]]] = {}
    for name, side in TIMM:
        models[f"timm:{name}"] = lambda name=name, side=side: timm_model(name, side)
    for name in DIFFUSERS:
        models[f"diffusers:{name}"] = lambda name=name: diffusers_model(name)
    return models


@dataclasses.dataclass
class ZooResult:
    name: str
    error: str = ""
    """Why the model fails its checks: a trace error, outputs unlike eager's, a hook left."""
    listing: bool = False
    """Its tree has a numbered listing."""
    seconds: float = 0.0


def _torch_state() -> tuple[Any, ...]:
    """What a trace installs or patches, as comparable values."""
    from torch.nn.modules import module as nn_module

    return (
        dict(nn_module._global_forward_hooks), dict(nn_module._global_forward_pre_hooks),
        torch._C._len_torch_function_stack(), torch._C._len_torch_dispatch_stack(),
        nn.Module.__call__, nn.Module._call_impl, torch.is_grad_enabled(),
    )


def _module_hooks(model: nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) + len(m._backward_hooks) for m in model.modules())


def check_zoo_model(name: str, build: Callable[[], tuple[nn.Module, tuple, dict]]) -> ZooResult:
    """Trace ``name``: its outputs must equal an eager forward pass's, nothing may be left
    installed, and its tree is looked at for a numbered listing."""
    import time

    import torchatlas
    from torchatlas._capture import capture

    from ._oracle import _flatten

    start = time.perf_counter()
    result = ZooResult(name)
    try:
        model, args, kwargs = build()
    except Exception as exc:  # the corpus itself is broken: say so
        result.error = f"could not build: {type(exc).__name__}: {str(exc)[:160]}"
        return result
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        state, hooks = _torch_state(), _module_hooks(model)
        torch.manual_seed(0)
        with torch.no_grad():
            eager = _flatten(model(*args, **kwargs))
        torch.manual_seed(0)
        try:
            with torch.no_grad():
                captured = capture(model, args, kwargs)
        except Exception as exc:
            result.error = f"trace failed: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
            return result
        traced = _flatten(captured.output)
        if len(eager) != len(traced) or not all(torch.equal(a, b) for a, b in zip(eager, traced)):
            result.error = "outputs differ from an eager forward"
        elif _torch_state() != state or _module_hooks(model) != hooks:
            result.error = "a hook, mode or patch was left behind"
        tree = torchatlas.Graph(captured.ir).tree()
    result.listing = bool(LISTING.search(tree))
    result.seconds = time.perf_counter() - start
    return result
