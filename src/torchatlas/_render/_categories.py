"""Op colour categories, shared by every renderer that colours nodes.

An op's category comes from its short name (``op_name``:
``torch.nn.functional.linear`` -> ``linear``, ``__iadd__`` -> ``add``,
``relu_`` -> ``relu``). Unknown names fall into ``"other"`` rather than
guessing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from torchatlas._passes._common import op_name

CATEGORIES: tuple[str, ...] = (
    "compute",
    "elementwise",
    "shape",
    "reduction",
    "normalization",
    "io",
    "param",
    "module",
    "other",
)

LEGEND: tuple[tuple[str, str], ...] = (
    ("compute", "compute (conv, linear, matmul, attention, embedding)"),
    ("elementwise", "elementwise (activations, arithmetic)"),
    ("shape", "shape / view (view, transpose, getitem, cat)"),
    ("reduction", "reduction (sum, mean, softmax, pooling)"),
    ("normalization", "normalization (layer/batch/rms norm)"),
    ("io", "input / output"),
    ("param", "parameter / buffer / constant"),
    ("module", "collapsed module"),
    ("other", "other (creation, indexing, misc.)"),
)
"""``(category, description)`` in legend order."""

_COMPUTE = frozenset(
    """conv1d conv2d conv3d conv_transpose1d conv_transpose2d conv_transpose3d linear bilinear
    matmul mm bmm addmm addbmm baddbmm addmv mv dot einsum tensordot outer
    scaled_dot_product_attention multi_head_attention_forward embedding embedding_bag
    lstm gru rnn_tanh rnn_relu lstm_cell gru_cell""".split()
)
_ELEMENTWISE = frozenset(
    """add sub subtract mul multiply div divide true_divide floor_divide truediv floordiv mod remainder fmod
    pow neg pos abs sign exp exp2 expm1 log log2 log10 log1p sqrt rsqrt square reciprocal
    sin cos tan sinh cosh tanh asin acos atan atan2 erf erfc erfinv sigmoid logit
    relu relu6 leaky_relu elu selu celu gelu silu mish hardtanh hardswish hardsigmoid softplus softsign
    glu prelu rrelu threshold tanhshrink softshrink hardshrink logsigmoid
    dropout dropout1d dropout2d dropout3d alpha_dropout feature_alpha_dropout
    clamp clip clamp_min clamp_max minimum maximum where masked_fill lerp addcmul addcdiv
    eq ne lt le gt ge and or xor invert lshift rshift logical_and logical_or logical_not logical_xor
    bitwise_and bitwise_or bitwise_xor bitwise_not isnan isinf isfinite nan_to_num
    floor ceil round trunc frac copy fill zero""".split()
)
_SHAPE = frozenset(
    """view view_as reshape reshape_as transpose swapaxes swapdims permute t mT T getitem setitem
    flatten unflatten squeeze unsqueeze cat concat concatenate stack hstack vstack chunk split
    tensor_split unbind expand expand_as repeat repeat_interleave tile contiguous narrow select
    movedim moveaxis flip roll to type float half double bfloat16 int long bool clone detach
    index_select gather scatter index_put index_add masked_select take pad pixel_shuffle
    pixel_unshuffle interpolate upsample unfold fold diagonal tril triu""".split()
)
_REDUCTION = frozenset(
    """sum mean prod max min amax amin argmax argmin all any std var std_mean var_mean
    logsumexp cumsum cumprod softmax log_softmax softmin norm cross_entropy nll_loss mse_loss
    l1_loss binary_cross_entropy binary_cross_entropy_with_logits kl_div
    max_pool1d max_pool2d max_pool3d avg_pool1d avg_pool2d avg_pool3d
    adaptive_max_pool1d adaptive_max_pool2d adaptive_max_pool3d
    adaptive_avg_pool1d adaptive_avg_pool2d adaptive_avg_pool3d lp_pool1d lp_pool2d
    max_pool1d_with_indices max_pool2d_with_indices max_pool3d_with_indices topk sort""".split()
)
_NORMALIZATION = frozenset(
    """layer_norm rms_norm batch_norm group_norm instance_norm local_response_norm normalize""".split()
)
_BY_NAME: Mapping[str, str] = {
    **{n: "compute" for n in _COMPUTE},
    **{n: "elementwise" for n in _ELEMENTWISE},
    **{n: "shape" for n in _SHAPE},
    **{n: "reduction" for n in _REDUCTION},
    **{n: "normalization" for n in _NORMALIZATION},
}
_KIND_CATEGORY: Mapping[str, str] = {
    "input": "io",
    "output": "io",
    "param": "param",
    "buffer": "param",
    "constant": "param",
}


def category(target: str | None, kind: str) -> str:
    """The colour category of a node: one of :data:`CATEGORIES`."""
    if kind in _KIND_CATEGORY:
        return _KIND_CATEGORY[kind]
    if kind != "op":
        return "other"
    return _BY_NAME.get(op_name(target), "other")


@dataclass(frozen=True)
class Palette:
    """Colours of one theme: per-category fills and borders, plus the canvas."""

    background: str
    text: str
    muted: str
    """Secondary text: class names, shapes on edges."""
    edge: str
    cluster_fills: tuple[str, ...]
    """Cluster fill by nesting depth (cycled), so nested modules stay distinguishable."""
    cluster_border: str
    fill: Mapping[str, str]
    border: Mapping[str, str]
    badge: str
    """Fill of the ``×N`` badge on folded repeats."""


# Both themes side by side, one row per Palette field and per category, so neither theme can miss one.
_CANVAS: Mapping[str, Mapping[str, Any]] = {
    "background": {"light": "#ffffff", "dark": "#16191f"},
    "text": {"light": "#1f2430", "dark": "#e6e9ef"},
    "muted": {"light": "#5f6b7a", "dark": "#a3acb9"},
    "edge": {"light": "#7d8794", "dark": "#8b95a3"},
    "cluster_fills": {
        "light": ("#f5f7fb", "#eaeff7", "#e0e7f2", "#d6dfed"),
        "dark": ("#1f242c", "#262c36", "#2d3440", "#343c4a"),
    },
    "cluster_border": {"light": "#b8c3d4", "dark": "#48526180"},
    "badge": {"light": "#ffd166", "dark": "#b8860b"},
}
# category -> {theme: (fill, border)}
_CATEGORY_COLOURS: Mapping[str, Mapping[str, tuple[str, str]]] = {
    "compute": {"light": ("#d6e6ff", "#4a78c2"), "dark": ("#1f3b66", "#6f9de6")},
    "elementwise": {"light": ("#dcf2d9", "#4f9a4a"), "dark": ("#244a2a", "#6fbf68")},
    "shape": {"light": ("#eeeeee", "#9a9a9a"), "dark": ("#3a3d42", "#8e939a")},
    "reduction": {"light": ("#fde3c8", "#cc7f2e"), "dark": ("#5a3a1a", "#e09a52")},
    "normalization": {"light": ("#eadcf8", "#8a63b8"), "dark": ("#3f2d5a", "#a987d6")},
    "io": {"light": ("#fff0b3", "#c9a227"), "dark": ("#5a4a12", "#d9b53c")},
    "param": {"light": ("#f7dede", "#b46a6a"), "dark": ("#5a2e2e", "#cf8787")},
    "module": {"light": ("#ffffff", "#51627a"), "dark": ("#2a303a", "#8aa0be")},
    "other": {"light": ("#e6ebf0", "#8892a0"), "dark": ("#333a44", "#8892a0")},
}


def _palette(theme: str) -> Palette:
    return Palette(
        **{name: values[theme] for name, values in _CANVAS.items()},
        fill={cat: colours[theme][0] for cat, colours in _CATEGORY_COLOURS.items()},
        border={cat: colours[theme][1] for cat, colours in _CATEGORY_COLOURS.items()},
    )


PALETTES: Mapping[str, Palette] = {theme: _palette(theme) for theme in ("light", "dark")}
