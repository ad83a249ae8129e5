"""Helpers shared by the analysis passes: operands, dtype sizes, storage, scope trees."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from torchatlas._ir import GraphIR, Node, TensorMeta
from torchatlas._ops import is_view


@dataclass
class MetaUpdate:
    """What a pass adds to node, scope and graph meta, before it is applied.

    ``analyze`` merges every pass's update and applies them in one copy of the graph.
    """

    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    scopes: dict[str, dict[str, Any]] = field(default_factory=dict)
    graph: dict[str, Any] = field(default_factory=dict)

    def apply(self, ir: GraphIR) -> GraphIR:
        return ir.with_meta(nodes=self.nodes, scopes=self.scopes, graph=self.graph)

    def merge(self, other: MetaUpdate) -> None:
        for mine, theirs in ((self.nodes, other.nodes), (self.scopes, other.scopes)):
            for key, values in theirs.items():
                mine.setdefault(key, {}).update(values)
        self.graph.update(other.graph)


@dataclass(frozen=True)
class Pass:
    """One analysis: what it computes from capture facts, and the meta keys it writes.

    The keys let a loaded document's stale or forged results be dropped before the
    passes run again (``strip_analyses``).
    """

    name: str
    update: Callable[[GraphIR], MetaUpdate]
    """Reads only capture facts, so every pass can share one input."""
    node_keys: frozenset[str] = frozenset()
    scope_keys: frozenset[str] = frozenset()
    graph_keys: frozenset[str] = frozenset()
    after: Callable[[GraphIR, MetaUpdate], MetaUpdate] | None = None
    """A second step reading every pass's results (merged, not yet applied), run once they
    are all in: the repeats pass totals each run's FLOPs and parameters there."""


_DTYPE_BYTES: dict[str, float] = {
    "float64": 8, "double": 8, "float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2,
    "complex128": 16, "cdouble": 16, "complex64": 8, "cfloat": 8, "complex32": 4, "chalf": 4,
    "int64": 8, "long": 8, "int32": 4, "int": 4, "int16": 2, "short": 2, "int8": 1,
    "uint64": 8, "uint32": 4, "uint16": 2, "uint8": 1, "bool": 1,
    "float8_e4m3fn": 1, "float8_e4m3fnuz": 1, "float8_e5m2": 1, "float8_e5m2fnuz": 1, "float8_e8m0fnu": 1,
    "float4_e2m1fn_x2": 1, "qint8": 1, "quint8": 1, "qint32": 4, "quint4x2": 0.5, "quint2x4": 0.25,
    "bits8": 1, "bits16": 2,
}

def dtype_bytes(dtype: str) -> float | None:
    """Bytes per element of a dtype string such as ``"float32"``; None if unknown."""
    return _DTYPE_BYTES.get(dtype.removeprefix("torch."))


def tensor_bytes(meta: TensorMeta) -> int | None:
    size = dtype_bytes(meta.dtype)
    return None if size is None else int(meta.numel() * size)


def raw_arg(node: Node, position: int, name: str) -> Any:
    """The JSON value of an argument given by position or keyword (None when absent)."""
    if position < len(node.args):
        return node.args[position]
    return node.kwargs.get(name)


def operand(ir: GraphIR, node: Node, position: int, name: str = "") -> TensorMeta | None:
    """The shape/dtype of a tensor argument, by position or keyword.

    Hand-built nodes without encoded arguments fall back to ``inputs`` order.
    """
    if not node.args and not node.kwargs:
        return ir.value_meta(node.inputs[position]) if position < len(node.inputs) else None
    return tensor_of(ir, node, raw_arg(node, position, name))


def tensor_of(ir: GraphIR, node: Node, raw: Any) -> TensorMeta | None:
    if isinstance(raw, dict) and isinstance(raw.get("tensor"), int) and 0 <= raw["tensor"] < len(node.inputs):
        return ir.value_meta(node.inputs[raw["tensor"]])
    return None


# Keywords a tensor operand can be passed by, in the order the signatures that have them
# take them (addmm(input, mat1, mat2), baddbmm(input, batch1, batch2), addmv(input, mat, vec)...).
_OPERAND_KEYWORDS = (
    "input", "self", "mat1", "mat2", "batch1", "batch2", "mat", "vec", "vec1", "vec2", "other", "tensor",
    "tensor1", "tensor2",
)


def tensor_operands(ir: GraphIR, node: Node) -> list[TensorMeta]:
    """Every tensor argument in positional order, lists flattened (``einsum(eq, [a, b])``),
    then those passed by keyword (``x.baddbmm(batch1=a, batch2=b)``) in signature order."""
    if not node.args and not node.kwargs:
        return [m for ref in node.inputs if (m := ir.value_meta(ref)) is not None]
    found: list[TensorMeta] = []

    def walk(value: Any) -> None:
        if isinstance(value, list):
            for item in value:
                walk(item)
        elif (meta := tensor_of(ir, node, value)) is not None:
            found.append(meta)

    walk(node.args)
    for keyword in _OPERAND_KEYWORDS:
        if keyword in node.kwargs:
            walk(node.kwargs[keyword])
    return found


def written_input(node: Node) -> int | None:
    """Index into ``node.inputs`` of the tensor an in-place op wrote (``out=`` or its first argument)."""
    if not node.inplace or not node.inputs:
        return None
    out = node.kwargs.get("out")
    if isinstance(out, dict) and isinstance(out.get("tensor"), int):
        return out["tensor"]
    first = node.args[0] if node.args else None
    if isinstance(first, dict) and isinstance(first.get("tensor"), int):
        return first["tensor"]
    return 0


def storage_roots(ir: GraphIR) -> list[int]:
    """For each node (by position), the position of the node that allocated its storage.

    Views and in-place writes reuse their argument's storage, and so does a module call that
    returned its input (capture's ``passthrough``: an eval ``Dropout``, as ``Identity``);
    everything else owns its own.
    """
    position = {n.id: i for i, n in enumerate(ir.nodes)}
    roots: list[int] = []
    for i, n in enumerate(ir.nodes):
        source: int | None = None
        if n.kind == "op" and n.inputs:
            if n.inplace:
                source = written_input(n)
            elif is_view(n.target) or n.meta.get("passthrough"):
                source = 0
        if source is not None and source < len(n.inputs):
            roots.append(roots[position[n.inputs[source].node]])
        else:
            roots.append(i)
    return roots


def subtree_ends(ir: GraphIR) -> dict[str, int]:
    """Scope id -> position of its last descendant in ``ir.scopes``.

    Scopes are listed in call order, which is a depth-first pre-order of the call tree,
    so a scope's subtree is the contiguous run ``[its position, end]``.
    """
    position = {s.id: i for i, s in enumerate(ir.scopes)}
    ends = list(range(len(ir.scopes)))
    for i in range(len(ir.scopes) - 1, -1, -1):
        parent = ir.scopes[i].parent
        if parent is not None:
            p = position[parent]
            ends[p] = max(ends[p], ends[i])
    return {s.id: ends[i] for i, s in enumerate(ir.scopes)}


def roll_up(ir: GraphIR, own: dict[str, float]) -> dict[str, float]:
    """Per-scope totals including all descendants, from per-scope own values."""
    total = {s.id: own.get(s.id, 0) for s in ir.scopes}
    for s in reversed(ir.scopes):
        if s.parent is not None:
            total[s.parent] += total[s.id]
    return total
