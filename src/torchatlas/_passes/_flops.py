"""FLOPs and MACs of every op, summed per module call.

Conventions (those of ``torch.utils.flop_counter.FlopCounterMode`` and fvcore):

* contractions (conv, linear, matmul family, einsum, attention) cost 2 FLOPs per
  multiply-accumulate (MAC); bias adds and the attention softmax are not counted;
* other ops have no MACs; elementwise ops cost one FLOP per output element,
  reductions one per input element, norms a few per element (see ``_NORMS``),
  pooling one per window element;
* data movement (views, copies, indexing, embedding lookups, creation) costs 0;
* an op not in these tables is *unknown*: its ``flops``/``macs`` are ``None`` and it
  is counted in ``flops_unknown``, never silently taken as 0.
"""

from __future__ import annotations

import math
from typing import Any

from torchatlas._ir import GraphIR, Node
from torchatlas._passes._common import (
    MetaUpdate,
    is_reflected,
    op_name,
    operand,
    raw_arg,
    roll_up,
    tensor_of,
    tensor_operands,
)

CONTRACTION_CATEGORIES = frozenset({"conv", "matmul", "attention"})
"""Categories whose FLOPs are exactly ``2 * MACs``: what ``FlopCounterMode`` counts."""

_CONV = frozenset("conv1d conv2d conv3d convolution _convolution conv_tbc".split())
_CONV_TRANSPOSE = frozenset("conv_transpose1d conv_transpose2d conv_transpose3d".split())
_MATMUL = frozenset("matmul mm bmm mv dot vdot inner linear addmm baddbmm addmv addbmm".split())
_ATTENTION = frozenset(
    """scaled_dot_product_attention _scaled_dot_product_flash_attention_for_cpu _scaled_dot_product_flash_attention
    _scaled_dot_product_efficient_attention _scaled_dot_product_cudnn_attention _scaled_dot_product_attention_math
    _scaled_dot_product_fused_attention_overrideable""".split()
)
_RECURRENT = frozenset("lstm gru rnn_tanh rnn_relu".split())
# name -> (FLOPs per element before affine terms, position of weight, position of bias)
_NORMS: dict[str, tuple[int, int | None, int | None]] = {
    # mean, subtract, square, average, normalise
    "layer_norm": (5, 2, 3), "native_layer_norm": (5, 2, 3),
    "group_norm": (5, 2, 3), "native_group_norm": (5, 1, 2),
    "instance_norm": (5, 3, 4),
    "batch_norm": (5, 3, 4), "native_batch_norm": (5, 1, 2), "_native_batch_norm_legit": (5, 1, 2),
    "_native_batch_norm_legit_no_training": (5, 1, 2), "_native_batch_norm_legit_functional": (5, 1, 2),
    # square, average, rsqrt-scale
    "rms_norm": (3, 2, None), "_fused_rms_norm": (3, 2, None), "normalize": (3, None, None),
}
_POOL = frozenset(
    """max_pool1d max_pool2d max_pool3d avg_pool1d avg_pool2d avg_pool3d lp_pool1d lp_pool2d lp_pool3d
    max_pool1d_with_indices max_pool2d_with_indices max_pool3d_with_indices""".split()
)
_ADAPTIVE_POOL = frozenset(
    """adaptive_max_pool1d adaptive_max_pool2d adaptive_max_pool3d adaptive_avg_pool1d
    adaptive_avg_pool2d adaptive_avg_pool3d adaptive_max_pool1d_with_indices
    adaptive_max_pool2d_with_indices adaptive_max_pool3d_with_indices
    _adaptive_avg_pool2d _adaptive_avg_pool3d""".split()
)
# FLOPs per output element.
_ELEMENTWISE = {
    **dict.fromkeys(
        """add sub subtract rsub mul multiply div divide true_divide truediv floordiv floor_divide mod remainder
        fmod pow float_power neg negative abs sign sgn exp exp2 expm1 log log2 log10 log1p sqrt rsqrt square
        reciprocal sin cos tan sinh cosh tanh asin acos atan atan2 arcsin arccos arctan erf erfc erfinv
        sigmoid logit relu relu6 leaky_relu elu selu celu gelu silu mish hardtanh hardswish hardsigmoid
        softplus softsign glu prelu rrelu threshold tanhshrink softshrink hardshrink logsigmoid
        clamp clip clamp_min clamp_max minimum maximum fmin fmax eq ne lt le gt ge greater less equal
        not_equal greater_equal less_equal and or xor invert lshift rshift logical_and logical_or
        logical_not logical_xor bitwise_and bitwise_or bitwise_xor bitwise_not bitwise_left_shift
        bitwise_right_shift isnan isinf isfinite nan_to_num floor ceil round trunc frac pos positive
        outer""".split(),
        1,
    ),
    **dict.fromkeys("addcmul addcdiv lerp".split(), 2),
}
# FLOPs per input element.
_REDUCTION = {
    **dict.fromkeys("sum mean prod max min amax amin argmax argmin all any nansum nanmean cumsum cumprod".split(), 1),
    **dict.fromkeys("var std var_mean std_mean logsumexp".split(), 3),
    # max, subtract, exp, sum, divide
    **dict.fromkeys("softmax log_softmax softmin _softmax _log_softmax".split(), 5),
}
_DROPOUT = frozenset("dropout dropout1d dropout2d dropout3d native_dropout".split())
_ALPHA_DROPOUT = frozenset("alpha_dropout feature_alpha_dropout".split())  # training defaults to False
_FREE = frozenset(
    """view view_as reshape reshape_as transpose swapaxes swapdims permute t mT T adjoint getitem setitem
    flatten unflatten squeeze unsqueeze cat concat concatenate stack hstack vstack dstack chunk split
    split_with_sizes tensor_split unbind expand expand_as broadcast_to repeat repeat_interleave tile
    contiguous narrow select movedim moveaxis flip roll to type type_as float half double bfloat16 int
    long bool short byte char cpu cuda clone copy detach alias index_select gather scatter index_put
    index_copy masked_select masked_fill masked_scatter where take pad diagonal tril triu
    unfold as_strided one_hot zeros ones empty full arange linspace rand randn randint
    zeros_like ones_like empty_like full_like rand_like randn_like new_zeros new_ones new_empty
    new_full new_tensor tensor as_tensor fill zero fill_diagonal
    view_as_real view_as_complex real imag nonzero argwhere item tolist numel size dim
    sort argsort topk unique _unsafe_view _to_copy _reshape_alias lift_fresh lift_fresh_copy slice
    slice_scatter select_scatter index _unsafe_index scalar_tensor empty_strided constant_pad_nd
    split_copy unbind_copy view_copy bernoulli uniform normal random exponential geometric cauchy log_normal
    multinomial randint_like randperm""".split()
)


def op_cost(ir: GraphIR, node: Node) -> tuple[str | None, int | None, int | None]:
    """``(category, flops, macs)`` of one op node; ``(None, None, None)`` when unknown."""
    name = op_name(node.target)
    outs = node.outputs
    out_numel = outs[0].numel() if outs else 0
    try:
        if name in _CONV or name in _CONV_TRANSPOSE:
            return _conv(ir, node, name)
        if name in _MATMUL:
            return _matmul(ir, node, name)
        if name == "einsum":
            return _einsum(ir, node)
        if name in _ATTENTION:
            return _attention(ir, node)
        if name == "multi_head_attention_forward":
            return _multi_head_attention(ir, node)
        if name in _RECURRENT:
            return _recurrent(ir, node)
        if name in _NORMS:
            return _norm(ir, node, name)
        if name in _POOL:
            return _pool(ir, node, name)
        if name in _ADAPTIVE_POOL:
            x = operand(ir, node, 0, "input")
            return ("pool", x.numel(), 0) if x is not None else (None, None, None)
        if name in _ELEMENTWISE:
            return "elementwise", _ELEMENTWISE[name] * out_numel, 0
        if name in _REDUCTION:
            x = operand(ir, node, 0, "input")
            return ("reduction", _REDUCTION[name] * x.numel(), 0) if x is not None else (None, None, None)
        if name in _DROPOUT or name in _ALPHA_DROPOUT:
            training = raw_arg(node, 2, "training")
            if training is None:
                training = name in _DROPOUT
            return "elementwise", (out_numel if training else 0), 0
        if name == "embedding":
            return "embedding", 0, 0
        if name in _FREE:
            return "data", 0, 0
    except (TypeError, IndexError, ValueError):
        pass  # an argument we could not read makes the op unknown, not 0
    return None, None, None


def flops(ir: GraphIR) -> GraphIR:
    """Annotate op nodes with ``flops``/``macs``/``flop_category`` and scopes with inclusive totals.

    Graph meta gains ``flops``, ``macs``, ``flops_unknown_ops`` (how many ops have no
    known cost) and ``flops_unknown_targets`` (target -> count).
    """
    return flops_update(ir).apply(ir)


def flops_update(ir: GraphIR) -> MetaUpdate:
    """The meta :func:`flops` adds, not yet applied."""
    node_meta: dict[str, dict[str, Any]] = {}
    own_flops: dict[str, float] = {}
    own_macs: dict[str, float] = {}
    own_unknown: dict[str, float] = {}
    unknown_targets: dict[str, int] = {}
    for node in ir.ops():
        category, f, m = op_cost(ir, node)
        node_meta[node.id] = {"flops": f, "macs": m, "flop_category": category}
        if f is None:
            own_unknown[node.scope] = own_unknown.get(node.scope, 0) + 1
            key = node.target or "?"
            unknown_targets[key] = unknown_targets.get(key, 0) + 1
        else:
            own_flops[node.scope] = own_flops.get(node.scope, 0) + f
            own_macs[node.scope] = own_macs.get(node.scope, 0) + (m or 0)
    total_flops, total_macs, total_unknown = roll_up(ir, own_flops), roll_up(ir, own_macs), roll_up(ir, own_unknown)
    scope_meta = {
        s.id: {"flops": int(total_flops[s.id]), "macs": int(total_macs[s.id]), "flops_unknown": int(total_unknown[s.id])}
        for s in ir.scopes
    }
    graph = {
        "flops": int(sum(own_flops.values())),
        "macs": int(sum(own_macs.values())),
        "flops_unknown_ops": sum(unknown_targets.values()),
        "flops_unknown_targets": dict(sorted(unknown_targets.items())),
    }
    return MetaUpdate(node_meta, scope_meta, graph)


def _contraction(category: str, macs: int) -> tuple[str, int, int]:
    return category, 2 * macs, macs


def _conv(ir: GraphIR, node: Node, name: str) -> tuple[str | None, int | None, int | None]:
    x, w = operand(ir, node, 0, "input"), operand(ir, node, 1, "weight")
    if x is None or w is None or not node.outputs:
        return None, None, None
    transposed = name in _CONV_TRANSPOSE or (name in ("convolution", "_convolution") and raw_arg(node, 6, "transposed") is True)
    # The weight is (C_out, C_in/groups, *k) or, transposed, (C_in, C_out/groups, *k): each
    # element of the non-channel side meets prod(w.shape[1:]) weights.
    per_position = math.prod(_int(s) for s in w.shape[1:])
    side = x.numel() if transposed else node.outputs[0].numel()
    return _contraction("conv", side * per_position)


def _matmul(ir: GraphIR, node: Node, name: str) -> tuple[str | None, int | None, int | None]:
    if not node.outputs:
        return None, None, None
    out = node.outputs[0].numel()
    if name == "linear":
        w = operand(ir, node, 1, "weight")
        return _contraction("matmul", out * _int(w.shape[-1])) if w is not None else (None, None, None)
    tensors = tensor_operands(ir, node)
    if name in ("addmm", "baddbmm", "addmv"):
        tensors = tensors[1:]  # the added input comes first
    elif is_reflected(node.target):
        tensors = tensors[::-1]
    if not tensors:
        return None, None, None
    left = tensors[0]
    if name == "addbmm":  # (b, n, m) @ (b, m, p) summed over b into (n, p)
        right = tensors[1]
        return _contraction("matmul", left.numel() * _int(right.shape[-1]))
    if name in ("dot", "vdot", "inner") and len(left.shape) <= 1:
        return _contraction("matmul", left.numel())
    return _contraction("matmul", out * _int(left.shape[-1]))


def _einsum(ir: GraphIR, node: Node) -> tuple[str | None, int | None, int | None]:
    equation = raw_arg(node, 0, "equation")
    if isinstance(equation, dict):
        equation = str(equation.get("repr", "")).strip("'\"")
    tensors = tensor_operands(ir, node)
    if not isinstance(equation, str) or "->" not in equation or not 1 <= len(tensors) <= 2:
        return None, None, None  # 3+ operands are contracted in an order torch picks at run time
    lhs = equation.replace(" ", "").split("->")[0].split(",")
    if len(lhs) != len(tensors):
        return None, None, None
    sizes: dict[str, int] = {}
    batch: list[int] = []
    for spec, meta in zip(lhs, tensors):
        letters = spec.replace("...", "")
        ellipsis_dims = len(meta.shape) - len(letters) if "..." in spec else 0
        head = spec.split("...")[0] if "..." in spec else spec
        dims = list(meta.shape)
        ell = dims[len(head): len(head) + ellipsis_dims]
        named = dims[: len(head)] + dims[len(head) + ellipsis_dims:]
        for letter, size in zip(letters, named):
            sizes[letter] = max(sizes.get(letter, 1), _int(size))
        # Broadcast ellipsis dimensions, aligned from the right.
        for k, size in enumerate(reversed(ell)):
            if k < len(batch):
                batch[k] = max(batch[k], _int(size))
            else:
                batch.append(_int(size))
    product = math.prod(sizes.values()) * math.prod(batch)
    if len(tensors) == 1:
        return "reduction", product, 0
    return _contraction("matmul", product)


def _attention(ir: GraphIR, node: Node) -> tuple[str | None, int | None, int | None]:
    q, k, v = (operand(ir, node, i, n) for i, n in enumerate(("query", "key", "value")))
    if q is None or k is None or v is None or len(q.shape) < 2:
        return None, None, None
    batch = math.prod(_int(s) for s in q.shape[:-2])
    length, dim = _int(q.shape[-2]), _int(q.shape[-1])
    # scores = q @ k^T (L x S x E), then scores @ v (L x S x Ev), per batch and head
    return _contraction("attention", batch * length * _int(k.shape[-2]) * (dim + _int(v.shape[-1])))


def _multi_head_attention(ir: GraphIR, node: Node) -> tuple[str | None, int | None, int | None]:
    q, k, v = (operand(ir, node, i, n) for i, n in enumerate(("query", "key", "value")))
    if q is None or k is None or v is None:
        return None, None, None
    embed = _int(q.shape[-1])
    queries, keys = q.numel() // embed, k.numel() // _int(k.shape[-1])  # (L x N) and (S x N) positions
    batch = _int(q.shape[1]) if len(q.shape) == 3 else 1
    projections = (q.numel() + k.numel() + v.numel()) * embed + queries * embed * embed  # q, k, v in; out
    # scores and weighted sum, summed over heads: L x S x E each, per batch element
    attention = 2 * (queries // batch) * (keys // batch) * embed * batch
    return _contraction("attention", projections + attention)


def _recurrent(ir: GraphIR, node: Node) -> tuple[str | None, int | None, int | None]:
    x = operand(ir, node, 0, "input")
    # lstm(input, hx, params, ...) or, for packed sequences, lstm(data, batch_sizes, hx, params, ...)
    second = tensor_of(ir, node, raw_arg(node, 1, "batch_sizes"))
    packed = second is not None and len(second.shape) == 1 and second.dtype == "int64"
    weights = raw_arg(node, 3 if packed else 2, "params")
    if x is None or not isinstance(weights, list):
        return None, None, None
    steps = x.numel() // _int(x.shape[-1])  # time steps x batch
    metas = [tensor_of(ir, node, w) for w in weights]
    # each 2-D weight (input-hidden, hidden-hidden, projection) multiplies one vector per step
    per_step = sum(m.numel() for m in metas if m is not None and len(m.shape) == 2)
    return _contraction("matmul", steps * per_step)


def _norm(ir: GraphIR, node: Node, name: str) -> tuple[str, int, int]:
    x = operand(ir, node, 0, "input")
    numel = x.numel() if x is not None else (node.outputs[0].numel() if node.outputs else 0)
    per_element, weight, bias = _NORMS[name]
    if node.target in ("torch.batch_norm", "torch.instance_norm"):  # aten order: weight, bias, stats
        weight, bias = 1, 2
    affine = sum(
        1 for pos, key in ((weight, "weight"), (bias, "bias")) if pos is not None and _is_tensor(raw_arg(node, pos, key))
    )
    return "norm", (per_element + affine) * numel, 0


def _pool(ir: GraphIR, node: Node, name: str) -> tuple[str | None, int | None, int | None]:
    if not node.outputs:
        return None, None, None
    kernel = raw_arg(node, 2 if name.startswith("lp_") else 1, "kernel_size")
    dims = int(name.split("pool")[1][0])
    if isinstance(kernel, int):
        window = kernel**dims
    elif isinstance(kernel, list) and all(isinstance(k, int) for k in kernel):
        window = math.prod(kernel)
    else:
        return None, None, None
    return "pool", node.outputs[0].numel() * window, 0


def _is_tensor(raw: Any) -> bool:
    return isinstance(raw, dict) and "tensor" in raw


def _int(size: Any) -> int:
    """Symbolic sizes (saved as strings) count as 1, as in ``TensorMeta.numel``."""
    return size if isinstance(size, int) else 1

