"""The op vocabulary: what each op is, in one table that every layer reads.

An op is known by its short name (:func:`op_name`: ``torch.nn.functional.linear``
-> ``linear``, ``torch.Tensor.__iadd__`` -> ``add``, ``aten.addmm.default`` ->
``addmm``), so the Python-level and ATen-level spellings of an op share one
entry. Each entry says:

* ``kind``: what the op does (``conv``, ``matmul``, ``view``...), and through it the
  colour ``category`` every renderer uses;
* ``flop_rule``: which rule of ``_passes/_flops.py`` counts its FLOPs (``None``: its
  cost is unknown, never silently 0), with the rule's ``flop_params``;
* ``view``: its result shares storage with its first tensor argument.

Imports the standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass

CATEGORIES: tuple[str, ...] = (
    "compute",
    "elementwise",
    "shape",
    "reduction",
    "normalization",
    "communication",
    "io",
    "param",
    "module",
    "other",
)
"""Colour categories, in legend order."""

LEGEND: tuple[tuple[str, str], ...] = (
    ("compute", "compute (conv, linear, matmul, attention, embedding)"),
    ("elementwise", "elementwise (activations, arithmetic)"),
    ("shape", "shape / view (view, transpose, getitem, cat)"),
    ("reduction", "reduction (sum, mean, softmax, pooling)"),
    ("normalization", "normalization (layer/batch/rms norm)"),
    ("communication", "communication (all_reduce, all_gather, reduce_scatter, all_to_all)"),
    ("io", "input / output"),
    ("param", "parameter / buffer / constant"),
    ("module", "collapsed module"),
    ("other", "other (creation, random, misc.)"),
)
"""``(category, description)`` in legend order."""

KIND_CATEGORY: dict[str, str] = {
    "conv": "compute",
    "matmul": "compute",
    "attention": "compute",
    "recurrent": "compute",
    "embedding": "compute",
    "elementwise": "elementwise",
    "norm": "normalization",
    "pool": "reduction",
    "reduction": "reduction",
    "loss": "reduction",
    "view": "shape",
    "data": "shape",
    "creation": "other",
    "collective": "communication",
}
"""Op kind -> colour category."""

NODE_KIND_CATEGORY: dict[str, str] = {"input": "io", "output": "io", "param": "param", "buffer": "param", "constant": "param"}


@dataclass(frozen=True, slots=True)
class OpInfo:
    """One entry of the op table."""

    kind: str
    """What the op does; a key of :data:`KIND_CATEGORY`."""
    flop_rule: str | None
    """The FLOP rule that counts it (see ``_passes/_flops.py``), or None when its cost is unknown."""
    flop_params: tuple[int | None, ...] = ()
    """The rule's parameters: FLOPs per element, argument positions..."""
    view: bool = False
    """The result aliases the first tensor argument's storage."""

    @property
    def category(self) -> str:
        return KIND_CATEGORY[self.kind]


OPS: dict[str, OpInfo] = {}


def _add(kind: str, rule: str | None, names: str, *params: int | None, view: bool = False) -> None:
    for name in names.split():
        OPS[name] = OpInfo(kind, rule, tuple(params), view)


_add("conv", "conv", "conv1d conv2d conv3d convolution _convolution conv_tbc")
_add("conv", "conv_transpose", "conv_transpose1d conv_transpose2d conv_transpose3d")
_add("matmul", "linear", "linear")
_add("matmul", "matmul", "matmul mm bmm mv")
_add("matmul", "matmul", "_grouped_mm grouped_mm")  # MoE experts (transformers 5): (M, K) rows @ per-group (K, N)
_add("matmul", "dot", "dot vdot inner")
_add("matmul", "addmm", "addmm baddbmm addmv")
_add("matmul", "addbmm", "addbmm")
_add("matmul", "einsum", "einsum")
_add("matmul", None, "bilinear tensordot")
_add(
    "attention", "attention",
    """scaled_dot_product_attention _scaled_dot_product_flash_attention_for_cpu _scaled_dot_product_flash_attention
    _scaled_dot_product_efficient_attention _scaled_dot_product_cudnn_attention _scaled_dot_product_attention_math
    _scaled_dot_product_fused_attention_overrideable""",
)
_add("attention", "multi_head_attention", "multi_head_attention_forward")
_add("recurrent", "recurrent", "lstm gru rnn_tanh rnn_relu")
_add("recurrent", None, "lstm_cell gru_cell rnn_tanh_cell rnn_relu_cell")
_add("embedding", "embedding", "embedding")
_add("embedding", None, "embedding_bag _embedding_bag")
# norms: FLOPs per element before affine terms (mean, subtract, square, average, normalise), weight and bias positions
_add("norm", "norm", "layer_norm native_layer_norm group_norm", 5, 2, 3)
_add("norm", "norm", "native_group_norm", 5, 1, 2)
_add("norm", "norm", "instance_norm", 5, 3, 4)
_add("norm", "norm", "batch_norm", 5, 3, 4)
_add(
    "norm", "norm",
    """native_batch_norm _native_batch_norm_legit _native_batch_norm_legit_no_training
    _native_batch_norm_legit_functional""",
    5, 1, 2,
)
# square, average, rsqrt-scale
_add("norm", "norm", "rms_norm _fused_rms_norm", 3, 2, None)
_add("norm", "norm", "normalize", 3, None, None)
_add("norm", None, "local_response_norm")
_add(
    "pool", "pool",
    """max_pool1d max_pool2d max_pool3d avg_pool1d avg_pool2d avg_pool3d lp_pool1d lp_pool2d lp_pool3d
    max_pool1d_with_indices max_pool2d_with_indices max_pool3d_with_indices""",
)
_add(
    "pool", "adaptive_pool",
    """adaptive_max_pool1d adaptive_max_pool2d adaptive_max_pool3d adaptive_avg_pool1d adaptive_avg_pool2d
    adaptive_avg_pool3d adaptive_max_pool1d_with_indices adaptive_max_pool2d_with_indices
    adaptive_max_pool3d_with_indices _adaptive_avg_pool2d _adaptive_avg_pool3d""",
)
# FLOPs per output element
_add(
    "elementwise", "elementwise",
    """add sub subtract rsub mul multiply div divide true_divide truediv floordiv floor_divide mod remainder
    fmod pow float_power neg negative abs sign sgn exp exp2 expm1 log log2 log10 log1p sqrt rsqrt square
    reciprocal sin cos tan sinh cosh tanh asin acos atan atan2 arcsin arccos arctan erf erfc erfinv
    sigmoid logit relu relu6 leaky_relu elu selu celu gelu silu mish hardtanh hardswish hardsigmoid
    softplus softsign glu prelu rrelu threshold tanhshrink softshrink hardshrink logsigmoid
    clamp clip clamp_min clamp_max minimum maximum fmin fmax eq ne lt le gt ge greater less equal
    not_equal greater_equal less_equal and or xor invert lshift rshift logical_and logical_or
    logical_not logical_xor bitwise_and bitwise_or bitwise_xor bitwise_not bitwise_left_shift
    bitwise_right_shift isnan isinf isfinite nan_to_num floor ceil round trunc frac pos positive outer""",
    1,
)
_add("elementwise", "elementwise", "addcmul addcdiv lerp", 2)
_add("elementwise", "dropout", "dropout dropout1d dropout2d dropout3d native_dropout feature_dropout")
_add("elementwise", "alpha_dropout", "alpha_dropout feature_alpha_dropout")
_add("elementwise", "free", "where masked_fill copy fill zero fill_diagonal")
# FLOPs per input element
_add(
    "reduction", "reduction",
    "sum mean prod max min amax amin argmax argmin all any nansum nanmean cumsum cumprod", 1,
)
_add("reduction", None, "norm count_nonzero kthvalue median mode")
_add("reduction", "reduction", "var std var_mean std_mean logsumexp", 3)
# max, subtract, exp, sum, divide
_add("reduction", "reduction", "softmax log_softmax softmin _softmax _log_softmax", 5)
_add("reduction", "free", "sort argsort topk unique")
_add(
    "loss", None,
    """cross_entropy nll_loss mse_loss l1_loss smooth_l1_loss huber_loss binary_cross_entropy
    binary_cross_entropy_with_logits kl_div ctc_loss cosine_embedding_loss margin_ranking_loss""",
)
_add(
    "view", "free",
    """view view_as reshape reshape_as transpose swapaxes swapdims permute t mT T adjoint getitem
    squeeze unsqueeze flatten unflatten expand expand_as narrow select movedim moveaxis
    split split_with_sizes chunk tensor_split unbind diagonal as_strided detach alias
    real imag view_as_real view_as_complex unfold _unsafe_view _reshape_alias slice lift_fresh
    identity updated""",  # torchatlas.identity: a module call returned its input; torchatlas.updated:
    # a tensor read after a write through another view of its storage (dataflow)
    view=True,
)
_add(
    "data", "free",
    """setitem cat concat concatenate stack hstack vstack dstack broadcast_to repeat repeat_interleave tile
    contiguous flip roll to type type_as float half double bfloat16 int long bool short byte char cpu cuda
    clone index_select gather scatter index_put index_copy masked_select
    masked_scatter take pad tril triu one_hot nonzero argwhere item tolist numel size dim
    _to_copy lift_fresh_copy slice_scatter select_scatter index _unsafe_index constant_pad_nd
    split_copy unbind_copy view_copy pixel_shuffle pixel_unshuffle im2col
    _nested_tensor_from_mask to_padded_tensor""",
)
_add("data", None, "index_add scatter_add scatter_reduce index_reduce interpolate upsample upsample_nearest2d")
_add("data", None, "upsample_bilinear2d fold col2im")
_add("data", "free", "set")  # x.data = y, x.set_(y): the tensor now holds another's storage
_add("data", "free", "raise")  # torchatlas.raise: where a partial trace's forward raised outside any op
_add(
    "creation", "free",
    """zeros ones empty full arange linspace logspace eye rand randn randint zeros_like ones_like empty_like
    full_like rand_like randn_like randint_like new_zeros new_ones new_empty new_full new_tensor tensor
    as_tensor scalar_tensor empty_strided bernoulli uniform normal random exponential geometric cauchy
    log_normal multinomial randperm""",
)

COLLECTIVE_KINDS: dict[str, str] = {
    name: kind
    for kind, names in (
        ("all_reduce", "all_reduce all_reduce_coalesced allreduce allreduce_coalesced"),
        (
            "all_gather",
            """all_gather all_gather_into_tensor all_gather_single _all_gather_base allgather _allgather_base_
            allgather_into_tensor_coalesced all_gather_into_tensor_coalesced all_gather_into_tensor_out""",
        ),
        (
            "reduce_scatter",
            """reduce_scatter reduce_scatter_tensor reduce_scatter_single _reduce_scatter_base
            _reduce_scatter_base_ reduce_scatter_tensor_coalesced""",
        ),
        ("all_to_all", "all_to_all all_to_all_single alltoall alltoall_base"),
        ("broadcast", "broadcast"),
        ("reduce", "reduce"),
        ("scatter", "scatter"),
        ("gather", "gather"),
        ("send", "send isend"),
        ("recv", "recv irecv recv_any_source"),
    )
    for name in names.split()
}
"""Short name of a collective op -> the collective it runs (``all_gather_into_tensor`` -> ``all_gather``)."""
_COLLECTIVE_PREFIXES = ("torch.distributed.", "_c10d_functional.", "c10d_functional.", "c10d.")
_COLLECTIVE = OpInfo("collective", "free")

SHAPE_ONLY_ARGS: dict[str, tuple[tuple[int, str], ...]] = {
    **dict.fromkeys(("view_as", "reshape_as", "expand_as", "type_as"), ((1, "other"),)),
    **dict.fromkeys(
        ("zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like", "randint_like"),
        ((0, "input"),),
    ),
    **dict.fromkeys(("new_zeros", "new_ones", "new_empty", "new_full", "new_tensor"), ((0, "self"),)),
}
"""Ops that read an argument for its shape, dtype or device only: (position, keyword) of each.
Such an argument is a shape input of the node, never data flow."""

OPERATOR_SYMBOLS: dict[str, str] = {
    "__add__": "+", "__sub__": "-", "__mul__": "*", "__truediv__": "/", "__floordiv__": "//",
    "__mod__": "%", "__pow__": "**", "__matmul__": "@", "__and__": "&", "__or__": "|", "__xor__": "^",
    "__lshift__": "<<", "__rshift__": ">>", "__neg__": "-x", "__invert__": "~", "__pos__": "+x",
    "__lt__": "<", "__le__": "<=", "__eq__": "==", "__ne__": "!=", "__gt__": ">", "__ge__": ">=",
    "__iadd__": "+=", "__isub__": "-=", "__imul__": "*=", "__itruediv__": "/=", "__ifloordiv__": "//=",
    "__imod__": "%=", "__ipow__": "**=", "__imatmul__": "@=", "__iand__": "&=", "__ior__": "|=",
    "__ixor__": "^=", "__ilshift__": "<<=", "__irshift__": ">>=", "__getitem__": "[]", "__setitem__": "[]=",
}
"""The operator a dunder target was written as: ``torch.Tensor.__add__`` was ``+``."""

_REFLECTED_OR_INPLACE = frozenset("add sub mul truediv floordiv div mod pow matmul and or xor lshift rshift".split())
_OP_NAMESPACES = frozenset({"aten", "prims", "_c10d_functional", "c10d_functional", "c10d", "fsdp", "profiler"})
"""Namespaces of dispatcher ops, whose targets end in an overload (``c10d.allreduce_.default``)."""


def op_name(target: str | None) -> str:
    """Short op name: ``torch.Tensor.__iadd__`` -> ``add``, ``torch.relu_`` -> ``relu``,
    ``aten.add_.Tensor`` -> ``add`` (ATen targets drop their overload)."""
    if not target:
        return ""
    parts = target.split(".")
    name = parts[1] if parts[0] in _OP_NAMESPACES and len(parts) > 1 else parts[-1]
    if name.startswith("__") and name.endswith("__") and len(name) > 4:
        name = name[2:-2]
        if name[:1] in ("r", "i") and name[1:] in _REFLECTED_OR_INPLACE:
            name = name[1:]
    elif name.endswith("_") and not name.startswith("_") and len(name) > 1:
        name = name[:-1]
    return name


def is_reflected(target: str | None) -> bool:
    """``__rmatmul__``/``__rsub__``...: the tensor arguments arrive in swapped order."""
    name = (target or "").rsplit(".", 1)[-1]
    return name.startswith("__r") and name[3:-2] in _REFLECTED_OR_INPLACE


def op_info(target: str | None) -> OpInfo | None:
    """The table entry of an op target; None for an op the table does not know."""
    if target and target.startswith(_COLLECTIVE_PREFIXES) and collective_kind(target) is not None:
        return _COLLECTIVE
    return OPS.get(op_name(target))


def collective_kind(target: str | None) -> str | None:
    """``all_reduce``, ``all_gather``...: the collective a ``torch.distributed`` op runs, else None
    (``torch.gather`` is no collective; ``torch.distributed.gather`` is)."""
    if not target or not target.startswith(_COLLECTIVE_PREFIXES):
        return None
    return COLLECTIVE_KINDS.get(op_name(target))


def operator_symbol(target: str | None) -> str | None:
    """``+`` for ``torch.Tensor.__add__``; None for a target that is no operator."""
    return OPERATOR_SYMBOLS.get((target or "").rsplit(".", 1)[-1])


def op_title(target: str | None) -> str:
    """An op's title in every output: its short name with the operator it was written as
    (``add (+)`` for ``torch.Tensor.__add__``, ``getitem ([])``), else the name (``conv2d``)."""
    symbol = operator_symbol(target)
    name = op_name(target)
    return f"{name} ({symbol})" if symbol else name


def category(target: str | None, node_kind: str) -> str:
    """The colour category of a node: one of :data:`CATEGORIES`."""
    if node_kind in NODE_KIND_CATEGORY:
        return NODE_KIND_CATEGORY[node_kind]
    if node_kind != "op":
        return "other"
    info = op_info(target)
    return info.category if info is not None else "other"


def is_view(target: str | None) -> bool:
    info = op_info(target)
    return info is not None and info.view
