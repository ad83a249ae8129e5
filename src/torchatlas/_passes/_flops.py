"""FLOPs and MACs of every op, summed per module call.

Conventions (those of ``torch.utils.flop_counter.FlopCounterMode`` and fvcore):

* contractions (conv, linear, matmul family, einsum, attention) cost 2 FLOPs per
  multiply-accumulate (MAC); bias adds and the attention softmax are not counted;
* other ops have no MACs; elementwise ops cost one FLOP per output element,
  reductions one per input element, norms a few per element (``_ops.py``),
  pooling one per window element;
* data movement (views, copies, indexing, embedding lookups, creation) costs 0;
* an op the table gives no rule is *unknown*: its ``flops``/``macs`` are ``None`` and it
  is counted in ``flops_unknown``, never silently taken as 0; so is an op with a symbolic
  size (``s77`` in an exported graph, a ragged ``j``) among its inputs or outputs, whose
  count no number would be right for.
"""

from __future__ import annotations

import math
from typing import Any

from torchatlas._ir import GraphIR, Node, Ref, TensorMeta
from torchatlas._ops import collective_kind, is_reflected, op_info, op_name
from torchatlas._passes._common import MetaUpdate, Pass, operand, raw_arg, roll_up, tensor_of, tensor_operands

CONTRACTION_CATEGORIES = frozenset({"conv", "matmul", "attention"})
"""Categories whose FLOPs are exactly ``2 * MACs``: what ``FlopCounterMode`` counts."""

Cost = tuple[str | None, int | None, int | None]
_UNKNOWN: Cost = (None, None, None)


def op_cost(ir: GraphIR, node: Node) -> Cost:
    """``(category, flops, macs)`` of one op node; ``(None, None, None)`` when unknown.

    The op table (``_ops.py``) names the rule; the rules below count.
    """
    info = op_info(node.target)
    if info is None or info.flop_rule is None:
        return _UNKNOWN
    if info.flop_rule != "free" and _symbolic(ir, node):
        return _UNKNOWN
    try:
        return _RULES[info.flop_rule](ir, node, op_name(node.target), info.flop_params)
    except (TypeError, IndexError, ValueError, KeyError):
        return _UNKNOWN  # an argument we could not read makes the op unknown, not 0


def flops(ir: GraphIR) -> GraphIR:
    """Annotate op nodes with ``flops``/``macs``/``flop_category`` and scopes with inclusive totals.

    Graph meta gains ``flops``, ``macs``, ``flops_unknown_ops`` (how many ops have no
    known cost) and ``flops_unknown_targets`` (target -> count).
    """
    return flops_update(ir).apply(ir)


def flops_update(ir: GraphIR) -> MetaUpdate:
    """The meta :func:`flops` adds, not yet applied. In a sharded graph ``flops`` counts each op
    at its global size (what the unsharded model computes) and ``flops_per_rank`` what this
    rank computes (:class:`_RankShares`)."""
    node_meta: dict[str, dict[str, Any]] = {}
    own_flops: dict[str, float] = {}
    own_macs: dict[str, float] = {}
    own_unknown: dict[str, float] = {}
    unknown_targets: dict[str, int] = {}
    sharded = any(m.placements for n in ir.nodes for m in n.outputs)
    shares = _RankShares(ir) if sharded else None
    own_per_rank: dict[str, float] = {}
    backward: dict[str, dict[str, float]] = {"flops": {}, "macs": {}, "flops_unknown": {}}  # capture's phase
    for node in ir.ops():
        if shares is None:
            category, f, m = op_cost(ir, node)
        else:
            category, f, m, per_rank = shares.cost(node)
            if per_rank is not None:
                node_meta[node.id] = {"flops_per_rank": per_rank}
                own_per_rank[node.scope] = own_per_rank.get(node.scope, 0) + per_rank
        if node.meta.get("phase") == "backward":
            for key, value in (("flops", f or 0), ("macs", m or 0), ("flops_unknown", f is None)):
                backward[key][node.scope] = backward[key].get(node.scope, 0) + value
        node_meta.setdefault(node.id, {}).update({"flops": f, "macs": m, "flop_category": category})
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
    if any(backward["flops"].values()) or any(backward["flops_unknown"].values()):
        # the part of each number the backward ops add: the summary keeps it apart, as the tree does
        for key, own in backward.items():
            for sid, value in roll_up(ir, own).items():
                scope_meta[sid][f"backward_{key}"] = int(value)
    if sharded:
        total_per_rank = roll_up(ir, own_per_rank)
        for s in ir.scopes:
            scope_meta[s.id]["flops_per_rank"] = int(total_per_rank[s.id])
    graph = {
        "flops": int(sum(own_flops.values())),
        "macs": int(sum(own_macs.values())),
        "flops_unknown_ops": sum(unknown_targets.values()),
        "flops_unknown_targets": dict(sorted(unknown_targets.items())),
    }
    if sharded:
        graph["flops_per_rank"] = int(sum(own_per_rank.values()))
    return MetaUpdate(node_meta, scope_meta, graph)


class _RankShares:
    """Global and per-rank counts of the ops of a sharded graph, walked in order.

    * An op **on DTensors** (its results are DTensors) is recorded at global shapes: its count
      is global, and this rank's share is it over the most any of its values is split (a
      row-wise matmul's inputs are split though its partial result is not).
    * An op **on a plain tensor** (what ``to_local`` handed on: ColwiseParallel's default
      output, FSDP2's gathered parameters) runs on this rank's part: it is counted at the
      local shapes of what it reads, and its global count is that times how many ranks hold a
      part of its input (a shard's readers inherit the split; a collective's result is whole,
      a reduce-scatter's a shard of its group).
    """

    def __init__(self, ir: GraphIR) -> None:
        self.ir = ir
        self.local = _LocalShapes(ir)
        self.parts: dict[Ref, int] = {}  # plain value -> how many ranks hold a part like it

    def cost(self, node: Node) -> tuple[str | None, int | None, int | None, int | None]:
        """(category, global FLOPs, global MACs, this rank's FLOPs) of one op."""
        if any(m.placements for m in node.outputs):
            category, f, m = op_cost(self.ir, node)
            return category, f, m, (f // _shards(self.ir, node) if f is not None else None)
        parts = self._parts(node)
        for slot in range(len(node.outputs)):
            self.parts[Ref(node.id, slot)] = parts
        category, f, m = op_cost(self.local, node)  # type: ignore[arg-type]  # a GraphIR as this rank sees it
        if f is None:
            return category, None, None, None
        return category, f * parts, (m or 0) * parts, f

    def _parts(self, node: Node) -> int:
        kind = collective_kind(node.target)
        facts = node.meta.get("collective")
        if kind is not None:
            size = facts.get("group_size") if isinstance(facts, dict) else None
            return size if kind == "reduce_scatter" and isinstance(size, int) and size > 0 else 1
        parts = 1
        for ref in node.inputs:
            meta = self.ir.value_meta(ref)
            if meta is not None and meta.placements and meta.local_numel():
                parts = max(parts, -(-meta.numel() // meta.local_numel()))
            else:
                parts = max(parts, self.parts.get(ref, 1))
        return parts


class _LocalShapes:
    """A graph whose DTensor values read as this rank's local part: what an op on the plain
    tensor ``to_local`` handed on actually read."""

    def __init__(self, ir: GraphIR) -> None:
        self._ir = ir

    def value_meta(self, ref: Ref) -> TensorMeta | None:
        meta = self._ir.value_meta(ref)
        return meta.as_local() if meta is not None else None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ir, name)


def _shards(ir: GraphIR, node: Node) -> int:
    """How many ranks share an op on DTensors: the most any of its values is split."""
    metas = [m for ref in node.inputs if (m := ir.value_meta(ref)) is not None] + list(node.outputs)
    shards = 1
    for m in metas:
        if m.placements and m.local_numel():
            shards = max(shards, -(-m.numel() // m.local_numel()))
    return shards


def _contraction(category: str, macs: int) -> Cost:
    return category, 2 * macs, macs


def _out_numel(node: Node) -> int:
    return node.outputs[0].numel() if node.outputs else 0


def _conv(ir: GraphIR, node: Node, name: str, _params: tuple[Any, ...], transposed: bool = False) -> Cost:
    x, w = operand(ir, node, 0, "input"), operand(ir, node, 1, "weight")
    if x is None or w is None or not node.outputs:
        return _UNKNOWN
    transposed = transposed or (name in ("convolution", "_convolution") and raw_arg(node, 6, "transposed") is True)
    # The weight is (C_out, C_in/groups, *k) or, transposed, (C_in, C_out/groups, *k): each
    # element of the non-channel side meets prod(w.shape[1:]) weights.
    per_position = math.prod(w.shape[1:])
    side = x.numel() if transposed else node.outputs[0].numel()
    return _contraction("conv", side * per_position)


def _conv_transpose(ir: GraphIR, node: Node, name: str, params: tuple[Any, ...]) -> Cost:
    return _conv(ir, node, name, params, transposed=True)


def _linear(ir: GraphIR, node: Node, _name: str, _params: tuple[Any, ...]) -> Cost:
    w = operand(ir, node, 1, "weight")
    if w is None or not node.outputs:
        return _UNKNOWN
    return _contraction("matmul", node.outputs[0].numel() * w.shape[-1])


def _matmul_operands(ir: GraphIR, node: Node, skip: int = 0) -> list[Any]:
    tensors = tensor_operands(ir, node)[skip:]
    return tensors[::-1] if is_reflected(node.target) else tensors


def _matmul(ir: GraphIR, node: Node, _name: str, _params: tuple[Any, ...], skip: int = 0) -> Cost:
    tensors = _matmul_operands(ir, node, skip)
    if not tensors or not node.outputs:
        return _UNKNOWN
    return _contraction("matmul", node.outputs[0].numel() * tensors[0].shape[-1])


def _addmm(ir: GraphIR, node: Node, name: str, params: tuple[Any, ...]) -> Cost:
    return _matmul(ir, node, name, params, skip=1)  # the added input comes first


def _addbmm(ir: GraphIR, node: Node, _name: str, _params: tuple[Any, ...]) -> Cost:
    """(b, n, m) @ (b, m, p) summed over b into (n, p)."""
    tensors = tensor_operands(ir, node)[1:]
    if len(tensors) < 2:
        return _UNKNOWN
    return _contraction("matmul", tensors[0].numel() * tensors[1].shape[-1])


def _dot(ir: GraphIR, node: Node, name: str, params: tuple[Any, ...]) -> Cost:
    tensors = tensor_operands(ir, node)
    if tensors and len(tensors[0].shape) <= 1:
        return _contraction("matmul", tensors[0].numel())
    return _matmul(ir, node, name, params)


def _einsum(ir: GraphIR, node: Node, _name: str, _params: tuple[Any, ...]) -> Cost:
    equation = raw_arg(node, 0, "equation")
    if isinstance(equation, dict):
        equation = str(equation.get("repr", "")).strip("'\"")
    tensors = tensor_operands(ir, node)
    if not isinstance(equation, str) or "->" not in equation or not 1 <= len(tensors) <= 2:
        return _UNKNOWN  # 3+ operands are contracted in an order torch picks at run time
    lhs = equation.replace(" ", "").split("->")[0].split(",")
    if len(lhs) != len(tensors):
        return _UNKNOWN
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
            sizes[letter] = max(sizes.get(letter, 1), size)
        # Broadcast ellipsis dimensions, aligned from the right.
        for k, size in enumerate(reversed(ell)):
            if k < len(batch):
                batch[k] = max(batch[k], size)
            else:
                batch.append(size)
    product = math.prod(sizes.values()) * math.prod(batch)
    if len(tensors) == 1:
        return "reduction", product, 0
    return _contraction("matmul", product)


def _attention(ir: GraphIR, node: Node, _name: str, _params: tuple[Any, ...]) -> Cost:
    q, k, v = (operand(ir, node, i, n) for i, n in enumerate(("query", "key", "value")))
    if q is None or k is None or v is None or len(q.shape) < 2:
        return _UNKNOWN
    batch = math.prod(q.shape[:-2])
    length, dim = q.shape[-2], q.shape[-1]
    # scores = q @ k^T (L x S x E), then scores @ v (L x S x Ev), per batch and head
    return _contraction("attention", batch * length * k.shape[-2] * (dim + v.shape[-1]))


def _multi_head_attention(ir: GraphIR, node: Node, _name: str, _params: tuple[Any, ...]) -> Cost:
    q, k, v = (operand(ir, node, i, n) for i, n in enumerate(("query", "key", "value")))
    if q is None or k is None or v is None:
        return _UNKNOWN
    embed = q.shape[-1]
    queries, keys = q.numel() // embed, k.numel() // k.shape[-1]  # (L x N) and (S x N) positions
    batch = q.shape[1] if len(q.shape) == 3 else 1
    projections = (q.numel() + k.numel() + v.numel()) * embed + queries * embed * embed  # q, k, v in; out
    # scores and weighted sum, summed over heads: L x S x E each, per batch element
    attention = 2 * (queries // batch) * (keys // batch) * embed * batch
    return _contraction("attention", projections + attention)


def _recurrent(ir: GraphIR, node: Node, _name: str, _params: tuple[Any, ...]) -> Cost:
    x = operand(ir, node, 0, "input")
    # lstm(input, hx, params, ...) or, for packed sequences, lstm(data, batch_sizes, hx, params, ...)
    second = tensor_of(ir, node, raw_arg(node, 1, "batch_sizes"))
    packed = second is not None and len(second.shape) == 1 and second.dtype == "int64"
    weights = raw_arg(node, 3 if packed else 2, "params")
    if x is None or not isinstance(weights, list):
        return _UNKNOWN
    steps = x.numel() // x.shape[-1]  # time steps x batch
    metas = [tensor_of(ir, node, w) for w in weights]
    # each 2-D weight (input-hidden, hidden-hidden, projection) multiplies one vector per step
    per_step = sum(m.numel() for m in metas if m is not None and len(m.shape) == 2)
    return _contraction("matmul", steps * per_step)


def _norm(ir: GraphIR, node: Node, _name: str, params: tuple[Any, ...]) -> Cost:
    x = operand(ir, node, 0, "input")
    numel = x.numel() if x is not None else _out_numel(node)
    per_element, weight, bias = params
    if node.target in ("torch.batch_norm", "torch.instance_norm"):  # aten order: weight, bias, stats
        weight, bias = 1, 2
    affine = sum(
        1 for pos, key in ((weight, "weight"), (bias, "bias")) if pos is not None and _is_tensor(raw_arg(node, pos, key))
    )
    return "norm", (per_element + affine) * numel, 0


def _pool(ir: GraphIR, node: Node, name: str, _params: tuple[Any, ...]) -> Cost:
    if not node.outputs:
        return _UNKNOWN
    kernel = raw_arg(node, 2 if name.startswith("lp_") else 1, "kernel_size")
    dims = int(name.split("pool")[1][0])
    if isinstance(kernel, int):
        window = kernel**dims
    elif isinstance(kernel, list) and all(isinstance(k, int) for k in kernel):
        window = math.prod(kernel)
    else:
        return _UNKNOWN
    return "pool", node.outputs[0].numel() * window, 0


def _adaptive_pool(ir: GraphIR, node: Node, _name: str, _params: tuple[Any, ...]) -> Cost:
    x = operand(ir, node, 0, "input")
    return ("pool", x.numel(), 0) if x is not None else _UNKNOWN


def _elementwise(_ir: GraphIR, node: Node, _name: str, params: tuple[Any, ...]) -> Cost:
    return "elementwise", params[0] * _out_numel(node), 0


def _reduction(ir: GraphIR, node: Node, _name: str, params: tuple[Any, ...]) -> Cost:
    x = operand(ir, node, 0, "input")
    return ("reduction", params[0] * x.numel(), 0) if x is not None else _UNKNOWN


def _dropout(_ir: GraphIR, node: Node, name: str, _params: tuple[Any, ...], training_default: bool = True) -> Cost:
    training = raw_arg(node, 2, "training")
    if training is None:
        training = training_default
    return "elementwise", (_out_numel(node) if training else 0), 0


def _alpha_dropout(ir: GraphIR, node: Node, name: str, params: tuple[Any, ...]) -> Cost:
    return _dropout(ir, node, name, params, training_default=False)  # its training flag defaults to False


def _embedding(_ir: GraphIR, _node: Node, _name: str, _params: tuple[Any, ...]) -> Cost:
    return "embedding", 0, 0


def _free(_ir: GraphIR, _node: Node, _name: str, _params: tuple[Any, ...]) -> Cost:
    return "data", 0, 0


_RULES: dict[str, Any] = {
    "conv": _conv,
    "conv_transpose": _conv_transpose,
    "linear": _linear,
    "matmul": _matmul,
    "addmm": _addmm,
    "addbmm": _addbmm,
    "dot": _dot,
    "einsum": _einsum,
    "attention": _attention,
    "multi_head_attention": _multi_head_attention,
    "recurrent": _recurrent,
    "norm": _norm,
    "pool": _pool,
    "adaptive_pool": _adaptive_pool,
    "elementwise": _elementwise,
    "reduction": _reduction,
    "dropout": _dropout,
    "alpha_dropout": _alpha_dropout,
    "embedding": _embedding,
    "free": _free,
}
"""Rule name (``OpInfo.flop_rule``) -> the function counting ``(category, flops, macs)``."""
RULES = frozenset(_RULES)


def _symbolic(ir: GraphIR, node: Node) -> bool:
    metas = [*node.outputs, *(ir.value_meta(ref) for ref in node.inputs)]
    return any(meta is not None and not all(type(size) is int for size in meta.shape) for meta in metas)


def _is_tensor(raw: Any) -> bool:
    return isinstance(raw, dict) and "tensor" in raw


PASS = Pass(
    "flops",
    flops_update,
    node_keys=frozenset({"flops", "macs", "flop_category", "flops_per_rank"}),
    scope_keys=frozenset({"flops", "macs", "flops_unknown", "flops_per_rank", "backward_flops", "backward_macs", "backward_flops_unknown"}),
    graph_keys=frozenset({"flops", "macs", "flops_unknown_ops", "flops_unknown_targets", "flops_per_rank"}),
)
