"""Per-scope data flow: the items a module call is made of, and the edges between them.

An *item* of a scope is either an op recorded directly in it or one of its child
module calls; items are typed (:class:`Item`), so no id scheme is assumed. Each
edge of the graph belongs to exactly one scope: the deepest one containing both
ends. Edges entering or leaving a scope's subtree become edges from its virtual
source or to its virtual sink.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from torchatlas._ir import GraphIR, Node, Ref


class Item(NamedTuple):
    """An op (``is_scope`` False: ``id`` is a node id) or a child module call (a scope id)."""

    is_scope: bool
    id: str


SOURCE = Item(False, "<source>")
SINK = Item(False, "<sink>")
_LOCAL_LEAF_KINDS = ("param", "buffer", "constant")


@dataclass
class ScopeFlow:
    """Items of one scope in execution order and the edges between them."""

    items: list[Item] = field(default_factory=list)
    """Ops directly in the scope and child calls."""
    edges: dict[Item, list[Item]] = field(default_factory=dict)
    """item -> items it feeds, including ``SINK``; ``SOURCE`` -> items reading from outside."""
    inputs: list[Ref] = field(default_factory=list)
    """Values read from outside the scope, first read first."""


def scope_flows(ir: GraphIR) -> dict[str, ScopeFlow]:
    flows = {s.id: ScopeFlow() for s in ir.scopes}
    chains = {s.id: ir.ancestry(s.id) for s in ir.scopes}
    first_seen: set[tuple[str, Item]] = set()

    def add_item(scope_id: str, item: Item) -> None:
        if (scope_id, item) not in first_seen:
            first_seen.add((scope_id, item))
            flows[scope_id].items.append(item)

    def item_at(chain: list[str], node: Node, level: int) -> Item:
        return Item(True, chain[level + 1]) if level + 1 < len(chain) else Item(False, node.id)

    def add_edge(scope_id: str, a: Item, b: Item) -> None:
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
        for ref in node.inputs:
            src = ir.node(ref)
            if src.kind in _LOCAL_LEAF_KINDS:
                continue
            users[ref.node] = users.get(ref.node, 0) + 1
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
                if ref not in flows[chain[level]].inputs:
                    flows[chain[level]].inputs.append(ref)
            for level in range(common, len(src_chain)):  # value leaves these scopes
                add_edge(src_chain[level], item_at(src_chain, src, level), SINK)
    for node in ir.nodes:  # ops nobody reads still end somewhere
        if node.kind == "op" and node.id not in users:
            chain = chains[node.scope]
            for level in range(len(chain)):
                add_edge(chain[level], item_at(chain, node, level), SINK)
    return flows
