"""Lining two graphs up without shared ids: module calls first, then the ops inside them.

Calls are matched by ``(path, call)``; a call left over is matched under its matched
parent by its relative name, then by structure (same class and structural hash), then
by shape signature (same class, input and output shapes) among its parent's leftovers.
Inputs, outputs, parameters and buffers are matched by path (a parameter's module part
through the call matching). Ops are matched inside each matched pair of calls (whose pool
also holds the ops of calls only one side has, so a wrapper added around the same ops
lines them up): first along the data flow, forwards (the same op on the same shapes reading
the matches of what it reads) and backwards (read by the matches of its readers), then what
is left of each call by the least edits between the two op sequences of (op, input shapes,
output shapes). Targets are normalised (``torch.relu``, ``torch.Tensor.relu`` and
``aten.relu.default`` are all ``relu``), a chain of indexing ops is one step (``x[:, 1:, 0]``
is one ``getitem`` eagerly and two or three ops in ``torch.export``), ATen's ``t`` + ``addmm``
is a ``linear``, and copies that pass their input through (``clone``, ``contiguous``,
``Identity``, an eval ``dropout``...) are left out and read through.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any

from torchatlas._ir import GraphIR, Node, Ref, Scope
from torchatlas._ops import op_name
from torchatlas._passes._diff_align import Step, align

_ALIASES = {
    "getitem": "index", "slice": "index", "select": "index", "narrow": "index", "unsqueeze": "index",
    "reshape": "view", "flatten": "view", "unflatten": "view", "view_as": "view", "reshape_as": "view",
    "_unsafe_view": "view", "true_divide": "div", "truediv": "div", "float": "to", "double": "to",
    "half": "to", "bfloat16": "to", "long": "to", "int": "to", "bool": "to", "type": "to", "_to_copy": "to",
    "conv1d": "convolution", "conv2d": "convolution", "conv3d": "convolution", "_convolution": "convolution",
    "conv_transpose1d": "convolution", "conv_transpose2d": "convolution", "conv_transpose3d": "convolution",
    "max_pool1d_with_indices": "max_pool1d", "max_pool2d_with_indices": "max_pool2d", "max_pool3d_with_indices": "max_pool3d",
}
_INDEXING = frozenset({"index"})
_PASS_THROUGH = frozenset({
    "identity", "clone", "contiguous", "alias", "detach", "lift_fresh_copy", "to", "type_as", "copy",
    "dropout", "feature_dropout", "alpha_dropout", "index", "view", "expand",
})
"""Ops that hand their one tensor input on when the result has its shape and dtype: a copy, a
same-dtype cast, a full slice (``x[:, :]``, which ``torch.export`` drops), a view to the same shape."""


def normal_name(target: str | None) -> str:
    """The op a target names, the same for the eager and the ATen spelling."""
    name = op_name(target)
    return _ALIASES.get(name, name)


def target_family(target: str | None) -> str:
    """``aten`` for ATen targets, ``torch`` for the Python API's: arguments compare only within one."""
    return "aten" if (target or "").startswith("aten.") else "torch"


@dataclass
class Matching:
    """What lines up between graphs ``a`` and ``b``."""

    calls: dict[str, str] = field(default_factory=dict)
    """Scope id in ``a`` -> its match in ``b``."""
    call_reasons: dict[str, str] = field(default_factory=dict)
    """Scope id in ``a`` left unmatched -> why."""
    nodes: dict[str, str] = field(default_factory=dict)
    """Node id in ``a`` -> its match in ``b``."""
    node_reasons: dict[str, str] = field(default_factory=dict)
    """Node id in ``a`` left unmatched -> why."""
    pass_through: dict[str, set[str]] = field(default_factory=lambda: {"a": set(), "b": set()})
    """Per side, the ops that pass their input through (left out of the alignment)."""
    op_pairs: list[tuple[Step, Step]] = field(default_factory=list)
    """Matched steps (an op, or a chain of indexing ops) in ``b``'s execution order: the ones to compare."""
    matched_b: set[str] = field(default_factory=set)
    """Nodes of ``b`` something in ``a`` lines up with (every op of a matched step)."""
    only_b_ops: list[str] = field(default_factory=list)
    """Ops of ``b`` that nothing in ``a`` lines up with."""


# -- module calls ------------------------------------------------------------------


def _relative(path: str, parent_path: str) -> str:
    return path[len(parent_path) + 1:] if parent_path and path.startswith(parent_path + ".") else path


def match_calls(a: GraphIR, b: GraphIR, hashes: tuple[dict[str, str], dict[str, str]]) -> tuple[dict[str, str], dict[str, str]]:
    """Scope id in ``a`` -> its match in ``b``, and why each unmatched one is unmatched."""
    by_key = {(s.path, s.call): s.id for s in b.scopes}
    pairs: dict[str, str] = {}
    taken: set[str] = set()
    for s in a.scopes:
        other = by_key.get((s.path, s.call))
        if other is not None:
            pairs[s.id] = other
            taken.add(other)
    left = [s for s in a.scopes if s.id not in pairs]
    if not left:
        return pairs, {}
    b_children = b.children()
    hash_a, hash_b = hashes
    by_structure: dict[tuple[str, str], list[str]] = {}
    for s in b.scopes:
        if s.id not in taken:
            by_structure.setdefault((s.cls, hash_b[s.id]), []).append(s.id)
    reasons: dict[str, str] = {}
    for s in left:  # call order: a parent is settled before its children
        parent = pairs.get(s.parent) if s.parent is not None else None
        siblings = [b.scope(c) for c in b_children.get(parent, [])] if parent is not None else []
        free = [o for o in siblings if o.id not in taken and o.cls == s.cls]
        rel = _relative(s.path, a.scope(s.parent).path) if s.parent is not None else s.path
        parent_path = b.scope(parent).path if parent is not None else ""
        found = next((o.id for o in free if o.call == s.call and _relative(o.path, parent_path) == rel), None)
        if found is None:
            queue = [o for o in by_structure.get((s.cls, hash_a[s.id]), []) if o not in taken]
            found = queue[0] if queue else None
        if found is None:
            shapes = _shape_signature(s)
            found = next((o.id for o in free if _shape_signature(o) == shapes), None)
        if found is None:
            reasons[s.id] = (
                f"no call of {s.path or '<root>'} in B, and no call of {s.class_name} there "
                "with the same structure or shapes"
            )
            continue
        pairs[s.id] = found
        taken.add(found)
    return pairs, reasons


def _shape_signature(s: Scope) -> tuple[Any, Any]:
    return (repr(s.meta.get("input_shapes")), repr(s.meta.get("output_shapes")))


# -- ops -----------------------------------------------------------------------------


def is_pass_through(ir: GraphIR, n: Node) -> bool:
    """An op that hands its input on unchanged: a copy, a same-dtype cast, an eval dropout."""
    if n.kind != "op":
        return False
    name = normal_name(n.target)
    if not n.outputs and name.startswith("_assert"):
        return True  # export's _assert_tensor_metadata and the like compute nothing
    if name not in _PASS_THROUGH or len(n.inputs) != 1 or len(n.outputs) != 1:
        return False
    if name.endswith("dropout") and _training(n) is not False:
        return False
    if name == "index" and not _full_slices(n):
        return False  # x[[1, 0]] keeps the shape and reorders
    first = ir.value_meta(n.inputs[0])
    out = n.outputs[0]
    return first is not None and (first.shape, first.dtype, first.device) == (out.shape, out.dtype, out.device)


def _full_slices(n: Node) -> bool:
    """``x[:, :]``, ``aten.slice(x, dim, 0, big)``: an index that takes everything, as far as its
    arguments say (the same shape in and out says the rest)."""
    target = n.target or ""
    if target.endswith("__getitem__"):
        index = n.args[1] if len(n.args) > 1 else None
        items = index if isinstance(index, list) else [index]
        return all(isinstance(i, dict) and "slice" in i for i in items)
    if ".slice" in target or target.endswith("narrow"):
        step = n.args[4] if len(n.args) > 4 else n.kwargs.get("step", 1)
        return step in (1, None)
    return False


def _training(n: Node) -> Any:
    """The ``training`` flag of a dropout: keyword eagerly, third argument in ATen."""
    if "training" in n.kwargs:
        return n.kwargs["training"]
    return n.args[2] if len(n.args) > 2 else None


def resolve(ir: GraphIR, ref: Ref, through: set[str]) -> Ref:
    """``ref`` read through the pass-through ops in ``through``."""
    while ref.node in through:
        ref = ir.node(ref).inputs[0]
    return ref


_COMMUTATIVE = frozenset({"add", "mul", "maximum", "minimum", "eq", "ne", "logical_and", "logical_or", "bitwise_and"})
_TRANSPOSES = frozenset({"t", "permute", "transpose"})


def is_unordered(x: Step, y: Step, a: GraphIR, b: GraphIR) -> bool:
    """Inputs compare as a set: a commutative op, a folded linear, or one whose ATen spelling orders them differently."""
    ta, tb = a.node(x.main).target, b.node(y.main).target
    return y.name in _COMMUTATIVE or len(x.nodes) != len(y.nodes) or target_family(ta) != target_family(tb)


def _steps(ir: GraphIR, ops: list[Node], through: set[str]) -> list[Step]:
    users: dict[str, int] = {}
    for n in ops:
        for r in n.inputs:
            users[r.node] = users.get(r.node, 0) + 1
    steps: list[Step] = []
    step_of: dict[str, Step] = {}

    def key(name: str, sources: list[Ref], outs: tuple[Any, ...], inplace: bool = False) -> tuple[Any, ...]:
        metas = [ir.value_meta(r) for r in sources]
        shapes = tuple(sorted(repr((m.shape, m.dtype) if m else None) for m in metas))  # eager and ATen order differ
        return (name, shapes, outs, inplace)

    for n in ops:
        name = normal_name(n.target)
        ins = [resolve(ir, r, through) for r in n.inputs]
        outs = tuple((m.shape, m.dtype) for m in n.outputs)
        head = step_of.get(ins[0].node) if name in _INDEXING and ins else None
        if head is not None and head.name in _INDEXING and users.get(ins[0].node) == 1:
            head.nodes.append(n.id)
            head.key = (head.key[0], head.key[1], outs, head.key[3])
            step_of[n.id] = head
            continue
        weight = _transposed_weight(ir, name, ins, step_of, users)
        if weight is not None:  # ATen's linear: addmm(bias, x, t(w)) or mm(x, t(w))
            steps.remove(weight)
            sources = [ins[-2], ir.node(weight.nodes[0]).inputs[0], *ins[:-2]]
            step = Step([*weight.nodes, n.id], key("linear", sources, outs), "linear", sources, n.id)
        else:
            step = Step([n.id], key(name, ins, outs, n.inplace), name, ins, n.id)
        step_of[n.id] = step
        steps.append(step)
    return steps


def _transposed_weight(ir: GraphIR, name: str, ins: list[Ref], step_of: dict[str, Step], users: dict[str, int]) -> Step | None:
    if name not in ("addmm", "mm") or len(ins) != (3 if name == "addmm" else 2):
        return None
    t = step_of.get(ins[-1].node)
    if t is None or t.name not in _TRANSPOSES or len(t.nodes) != 1 or users.get(ins[-1].node) != 1:
        return None
    source = ir.node(t.nodes[0]).inputs
    return t if source and ir.node(source[0]).kind == "param" else None


def _source_key(ir: GraphIR, ref: Ref, mapped: dict[str, str] | None) -> tuple[Any, ...] | None:
    """Where a value comes from, in ``b``'s terms: a (matched) node, or a constant's shape."""
    n = ir.node(ref)
    if n.kind == "constant":
        meta = ir.value_meta(ref)
        return ("c", meta.shape if meta else None, meta.dtype if meta else None)
    node = ref.node if mapped is None else mapped.get(ref.node)
    return None if node is None else ("n", node, ref.slot)


def _anchor_key(ir: GraphIR, step: Step, pool: str, mapped: dict[str, str] | None) -> tuple[Any, ...] | None:
    keys = [_source_key(ir, r, mapped) for r in step.sources]
    if any(k is None for k in keys):
        return None
    # as a set: the ATen spelling may order them differently; the comparison afterwards sees order
    return (pool, step.key, tuple(sorted(keys, key=repr)))


_COMPOSITES = frozenset({
    "multi_head_attention_forward", "scaled_dot_product_attention", "layer_norm", "group_norm", "batch_norm",
    "instance_norm", "rms_norm", "gelu", "silu", "mish", "hardswish", "hardsigmoid", "softmax", "log_softmax",
    "cross_entropy", "nll_loss", "mse_loss", "binary_cross_entropy_with_logits", "linear", "bilinear", "interpolate",
    "upsample_nearest2d", "upsample_bilinear2d", "pixel_shuffle", "embedding_bag", "lstm", "gru", "rnn_tanh",
    "rnn_relu", "normalize", "pad", "unfold", "fold", "einsum", "cosine_similarity", "pairwise_distance",
})
"""Ops eager records as one call that ATen (an export, an ``aten``-level trace) may record as several."""


def _decomposed(a: GraphIR, b: GraphIR, left_a: list[Step], left_b: list[Step], m: Matching,
                users_a: dict[str, list[str]], users_b: dict[str, list[str]]) -> bool:
    """One op on one side, the ops it decomposes into on the other (eager ``multi_head_attention_forward``
    against export's projections, views and ``scaled_dot_product_attention``): the same values in,
    one value out of the same shape. Matched as one: every op of the many stands for the one."""
    if not left_a or not left_b or (len(left_a) == 1) == (len(left_b) == 1) or min(len(left_a), len(left_b)) != 1:
        return False
    one_side_a = len(left_a) == 1
    one, many = (left_a[0], left_b) if one_side_a else (left_b[0], left_a)
    if one.name not in _COMPOSITES:  # relu against sigmoid(x) * x is a change, not a decomposition
        return False
    one_ir, many_ir = (a, b) if one_side_a else (b, a)
    inside = {nid for st in many for nid in st.nodes}

    def key(ir: GraphIR, ref: Ref) -> tuple[Any, ...] | None:
        if ir.node(ref).kind == "constant":
            return None  # a decomposition makes its own scalars
        if ir is a:
            return _source_key(a, ref, m.nodes) or ("unmatched",)
        return _source_key(b, ref, None)

    outer = {key(many_ir, r) for st in many for r in st.sources if r.node not in inside} - {None}
    if outer != {key(one_ir, r) for r in one.sources} - {None} or ("unmatched",) in outer:
        return False
    users = users_b if one_side_a else users_a
    through = m.pass_through["b" if one_side_a else "a"]

    def read_outside(nid: str) -> bool:  # by a reader that is not one of the many, copies read through
        return any(
            (read_outside(u) if many_ir.node(u).outputs else False) if u in through else u not in inside
            for u in users.get(nid, [])
        )

    read_outside_ = [nid for nid in inside if read_outside(nid)]
    last = one_ir.node(one.nodes[-1])
    if len(read_outside_) != 1 or not last.outputs:
        return False
    made = many_ir.node(read_outside_[0])
    if not made.outputs or made.outputs[0].shape != last.outputs[0].shape:
        return False
    if one_side_a:
        for nid in one.nodes:
            m.nodes[nid] = made.id
        m.matched_b.update(inside)
    else:
        for nid in inside:
            m.nodes[nid] = one.nodes[-1]
        m.matched_b.update(one.nodes)
    return True


def _by_key(ir: GraphIR, steps: dict[str | None, list[Step]], key_of: Any) -> dict[Any, list[Step]]:
    out: dict[Any, list[Step]] = {}
    for pool, members in steps.items():
        for y in members:
            key = key_of(y, pool or "")
            if key is not None:
                out.setdefault(key, []).append(y)
    return out


def _take(waiting: dict[Any, list[Step]], key: Any, paired: set[int], pair: Any) -> None:
    """Pair with the one step of ``b`` waiting under ``key``; none where there are several or none."""
    queue = [y for y in waiting.get(key, []) if id(y) not in paired] if key is not None else []
    if len(queue) == 1:
        pair(queue[0])


def _reader_key(step: Step, pool: str, users: dict[str, list[str]], mapped: Any) -> tuple[Any, ...] | None:
    """(call, step, where its result goes): the readers of its last op, as ``b``'s nodes."""
    readers = []
    for r in users.get(step.nodes[-1], []):
        other = mapped(r)
        if other is None:
            return None
        readers.append(other)
    return (pool, step.key, tuple(sorted(readers))) if readers else None


def match(a: GraphIR, b: GraphIR, hashes: tuple[dict[str, str], dict[str, str]]) -> Matching:
    """Calls; the graph's inputs, outputs and state by path; then the ops inside matched calls:
    first those whose op, shapes and (matched) inputs agree, in execution order, then the rest
    of each call by sequence alignment."""
    m = Matching()
    m.calls, m.call_reasons = match_calls(a, b, hashes)
    for side, ir in (("a", a), ("b", b)):
        m.pass_through[side] = {n.id for n in ir.nodes if is_pass_through(ir, n)}
    _match_values(a, b, m)
    ops_a = _ops_by_pool(a, _pools(a, set(m.calls)), m.pass_through["a"])
    ops_b = _ops_by_pool(b, _pools(b, set(m.calls.values())), m.pass_through["b"])
    steps_a = {pool: _steps(a, ops, m.pass_through["a"]) for pool, ops in ops_a.items()}
    steps_b = {pool: _steps(b, ops, m.pass_through["b"]) for pool, ops in ops_b.items()}
    paired: set[int] = set()

    def pair(x: Step, y: Step) -> None:
        for nid in x.nodes:
            m.nodes[nid] = y.nodes[-1]
        m.op_pairs.append((x, y))
        m.matched_b.update(y.nodes)
        paired.update((id(x), id(y)))

    # Along the data flow, forward: an op reading what its match reads. A twin in a (the same op
    # on the same values, made twice) is left to the backward pass, which tells twins apart by
    # who reads them.
    twins = collections.Counter(_anchor_key(a, x, pool or "", None) for pool, steps in steps_a.items() for x in steps)
    waiting = _by_key(b, steps_b, lambda y, pool: _anchor_key(b, y, pool, None))
    position = {n.id: i for i, n in enumerate(a.nodes)}
    in_order = sorted(((pool, x) for pool, steps in steps_a.items() for x in steps), key=lambda px: position[px[1].nodes[0]])
    for pool, x in in_order:
        if twins[_anchor_key(a, x, pool or "", None)] > 1:
            continue
        _take(waiting, _anchor_key(a, x, m.calls.get(pool or "", ""), m.nodes), paired, lambda y, x=x: pair(x, y))
    # Backward: an op read by the matches of its readers.
    users_a, users_b = a.users(), b.users()
    last_b = {nid: y.nodes[-1] for steps in steps_b.values() for y in steps for nid in y.nodes}
    waiting = _by_key(b, steps_b, lambda y, pool: _reader_key(y, pool, users_b, lambda r: last_b.get(r, r)))
    for pool, x in reversed(in_order):
        if id(x) not in paired:
            key = _reader_key(x, m.calls.get(pool or "", ""), users_a, m.nodes.get)
            _take(waiting, key, paired, lambda y, x=x: pair(x, y))
    for pool_a, pool_b in m.calls.items():
        left_a = [x for x in steps_a.get(pool_a, []) if id(x) not in paired]
        left_b = [y for y in steps_b.get(pool_b, []) if id(y) not in paired]
        if _decomposed(a, b, left_a, left_b, m, users_a, users_b):
            continue
        pairs, only_a, _ = align(left_a, left_b)
        for x, y in pairs:
            pair(x, y)
        for x in only_a:
            for nid in x.nodes:
                m.node_reasons[nid] = "no op of the matched call in B lines up with it"
    order_b = {n.id: i for i, n in enumerate(b.nodes)}
    m.op_pairs.sort(key=lambda p: order_b[p[1].nodes[0]])
    _match_constants(a, b, m)
    _match_pass_through(a, b, m)
    m.matched_b.update(m.nodes.values())
    m.only_b_ops = [n.id for n in b.nodes if n.kind == "op" and n.id not in m.matched_b and n.id not in m.pass_through["b"]]
    for n in a.nodes:
        if n.id not in m.nodes and n.id not in m.node_reasons:
            m.node_reasons[n.id] = _why_unmatched(a, n)
    return m


def _pools(ir: GraphIR, matched: set[str]) -> dict[str | None, list[str]]:
    """Scope id -> the matched call whose op pool holds its ops (itself, or its nearest matched ancestor)."""
    owner: dict[str, str | None] = {}
    for s in ir.scopes:
        owner[s.id] = s.id if s.id in matched else (owner[s.parent] if s.parent is not None else None)
    pools: dict[str | None, list[str]] = {}
    for s in ir.scopes:
        pools.setdefault(owner[s.id], []).append(s.id)
    return pools


def _ops_by_pool(ir: GraphIR, pools: dict[str | None, list[str]], through: set[str]) -> dict[str | None, list[Node]]:
    pool_of = {sid: owner for owner, members in pools.items() for sid in members}
    out: dict[str | None, list[Node]] = {}
    for n in ir.nodes:
        if n.kind == "op" and n.id not in through:
            out.setdefault(pool_of[n.scope], []).append(n)
    return out


def _match_pass_through(a: GraphIR, b: GraphIR, m: Matching) -> None:
    """A copy in ``a`` matches a copy of the same kind in ``b`` reading the matched value."""
    waiting: dict[tuple[str, str, int], list[str]] = {}
    for nid in m.pass_through["b"]:
        n = b.node(nid)
        if n.outputs:
            src = resolve(b, n.inputs[0], m.pass_through["b"])
            waiting.setdefault((normal_name(n.target), src.node, src.slot), []).append(nid)
    for nid in sorted(m.pass_through["a"], key=lambda i: int(i[1:]) if i[1:].isdigit() else 0):
        n = a.node(nid)
        reason = f"passes its input through ({normal_name(n.target) or 'no output'}), read through"
        if not n.outputs:
            m.node_reasons[nid] = reason
            continue
        src = resolve(a, n.inputs[0], m.pass_through["a"])
        queue = waiting.get((normal_name(n.target), m.nodes.get(src.node, ""), src.slot))
        if queue:
            m.nodes[nid] = queue.pop(0)
        else:
            m.node_reasons[nid] = reason


def map_state_path(path: str, module_map: dict[str, str]) -> str:
    """``blocks.0.fc.weight`` -> ``layers.0.fc.weight`` when module ``blocks.0.fc`` matched ``layers.0.fc``."""
    module, _, name = path.rpartition(".")
    while module and module not in module_map:
        module, _, rest = module.rpartition(".")
        name = f"{rest}.{name}"
    if not module:
        return path
    target = module_map[module]
    return f"{target}.{name}" if target else name


def module_map(a: GraphIR, b: GraphIR, calls: dict[str, str]) -> dict[str, str]:
    return {a.scope(sa).path: b.scope(sb).path for sa, sb in calls.items()}


def _match_values(a: GraphIR, b: GraphIR, m: Matching) -> None:
    """Inputs and outputs by path, parameters and buffers by (mapped) path."""
    paths = module_map(a, b, m.calls)
    by_key: dict[tuple[str, str], str] = {}
    for n in b.nodes:
        if n.kind in ("input", "output", "param", "buffer") and n.path is not None:
            by_key.setdefault((n.kind, n.path), n.id)
    for n in a.nodes:
        if n.kind in ("input", "output") and n.path is not None:
            path = n.path
        elif n.kind in ("param", "buffer") and n.path is not None:
            path = map_state_path(n.path, paths)
        else:
            continue
        other = by_key.get((n.kind, path))
        if other is not None:
            m.nodes[n.id] = other
    # Inputs named otherwise (an fx graph calls args[0] by its parameter name, x) pair in order.
    taken = set(m.nodes.values())
    left_b = [n.id for n in b.nodes if n.kind == "input" and n.id not in taken]
    for n, other in zip([n for n in a.nodes if n.kind == "input" and n.id not in m.nodes], left_b):
        m.nodes[n.id] = other


def _match_constants(a: GraphIR, b: GraphIR, m: Matching) -> None:
    """Constants, and parameters or buffers without a path (nothing to match them by), by the
    matched ops that read them."""
    for x, y in m.op_pairs:
        for ra, rb in zip(x.sources, y.sources):
            pa, pb = a.node(ra), b.node(rb)
            if pa.kind == pb.kind and pa.id not in m.nodes and (
                pa.kind == "constant" or (pa.kind in ("param", "buffer") and pa.path is None and pb.path is None)
            ):
                m.nodes[pa.id] = pb.id


def _why_unmatched(a: GraphIR, n: Node) -> str:
    scope = a.scope(n.scope)
    if n.kind == "op":
        return "no op of the matched call in B lines up with it"
    if n.kind in ("param", "buffer"):
        return f"no {n.kind} {n.path} in B"
    if n.kind in ("input", "output"):
        return f"no {n.kind} {n.path} in B"
    return f"no op reading it in {scope.label} lines up with one in B"
