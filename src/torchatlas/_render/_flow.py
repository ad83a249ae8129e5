"""Per-scope data flow: the items a module call is made of, and the edges between them.

An *item* of a scope is either an op recorded directly in it or one of its child
module calls. Each edge of the graph belongs to exactly one scope: the deepest
one containing both ends. Edges entering or leaving a scope's subtree become
edges from its virtual source or to its virtual sink.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .._ir import GraphIR, Node
from .._passes._common import op_name

SOURCE = "<source>"
SINK = "<sink>"
_EXTERNAL_KINDS = ("input",)
_LOCAL_LEAF_KINDS = ("param", "buffer", "constant")


@dataclass
class ScopeFlow:
    """Items of one scope in execution order and the edges between them."""

    items: list[str] = field(default_factory=list)
    """Node ids (ops directly in the scope) and scope ids (child calls)."""
    edges: dict[str, list[str]] = field(default_factory=dict)
    """item -> items it feeds, including ``SINK``; ``SOURCE`` -> items reading from outside."""
    inputs: list[tuple[str, int]] = field(default_factory=list)
    """(node id, slot) values read from outside the scope, first read first."""


def scope_flows(ir: GraphIR) -> dict[str, ScopeFlow]:
    flows = {s.id: ScopeFlow() for s in ir.scopes}
    chains = {s.id: ir.ancestry(s.id) for s in ir.scopes}
    first_seen: set[tuple[str, str]] = set()

    def add_item(scope_id: str, item: str) -> None:
        if (scope_id, item) not in first_seen:
            first_seen.add((scope_id, item))
            flows[scope_id].items.append(item)

    def item_at(chain: list[str], node: Node, level: int) -> str:
        return chain[level + 1] if level + 1 < len(chain) else node.id

    def add_edge(scope_id: str, a: str, b: str) -> None:
        targets = flows[scope_id].edges.setdefault(a, [])
        if b not in targets:
            targets.append(b)

    users: dict[str, int] = {}
    for node in ir.nodes:
        if node.kind not in ("op", "output"):
            continue
        chain = chains[node.scope] if node.kind == "op" else []
        for level in range(len(chain)):
            add_item(chain[level], item_at(chain, node, level))
        for src_id, slot in zip(node.inputs, node.input_slots):
            src = ir.node(src_id)
            if src.kind in _LOCAL_LEAF_KINDS:
                continue
            users[src_id] = users.get(src_id, 0) + 1
            src_chain = chains[src.scope] if src.kind == "op" else []
            common = 0
            while common < min(len(chain), len(src_chain)) and chain[common] == src_chain[common]:
                common += 1
            if common and common <= len(chain) and common <= len(src_chain):
                level = common - 1
                a, b = item_at(src_chain, src, level), item_at(chain, node, level)
                if a != b:
                    add_edge(chain[level], a, b)
            for level in range(common, len(chain)):  # value enters these scopes from outside
                add_edge(chain[level], SOURCE, item_at(chain, node, level))
                if (src_id, slot) not in flows[chain[level]].inputs:
                    flows[chain[level]].inputs.append((src_id, slot))
            for level in range(common, len(src_chain)):  # value leaves these scopes
                add_edge(src_chain[level], item_at(src_chain, src, level), SINK)
    for node in ir.nodes:  # ops nobody reads still end somewhere
        if node.kind == "op" and node.id not in users:
            chain = chains[node.scope]
            for level in range(len(chain)):
                add_edge(chain[level], item_at(chain, node, level), SINK)
    return flows


def op_display(node: Node) -> str:
    """``conv2d``, ``view``, ``add (+)``, ``addmm`` (for ``aten.addmm.default``)."""
    target = node.target or node.kind
    symbol = _OPERATOR_SYMBOLS.get(target.rsplit(".", 1)[-1])
    name = op_name(target)
    return f"{name} ({symbol})" if symbol else name


_OPERATOR_SYMBOLS = {
    "__add__": "+", "__sub__": "-", "__mul__": "*", "__truediv__": "/", "__floordiv__": "//",
    "__mod__": "%", "__pow__": "**", "__matmul__": "@", "__and__": "&", "__or__": "|", "__xor__": "^",
    "__lshift__": "<<", "__rshift__": ">>", "__neg__": "-x", "__invert__": "~", "__pos__": "+x",
    "__lt__": "<", "__le__": "<=", "__eq__": "==", "__ne__": "!=", "__gt__": ">", "__ge__": ">=",
    "__iadd__": "+=", "__isub__": "-=", "__imul__": "*=", "__itruediv__": "/=", "__ifloordiv__": "//=",
    "__imod__": "%=", "__ipow__": "**=", "__imatmul__": "@=", "__iand__": "&=", "__ior__": "|=",
    "__ixor__": "^=", "__ilshift__": "<<=", "__irshift__": ">>=", "__getitem__": "[]", "__setitem__": "[]=",
}
