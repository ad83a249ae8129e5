"""Per-scope data flow: the items a module call is made of, and the edges between them.

An *item* of a scope is either an op recorded directly in it or one of its child
module calls; items are typed (:class:`Item`), so no id scheme is assumed. Each
edge of the graph belongs to exactly one scope: the deepest one containing both
ends. Edges entering or leaving a scope's subtree become edges from its virtual
source or to its virtual sink.

Edges are of two kinds, as a person drawing the model tells them apart:

* *structural* edges carry the value a step works on: a call's first argument, any
  input of an op (an ``add`` joins what it reads), the scope's own first input from
  outside, and its first output to the sink;
* *reference* edges carry a side value: a further argument of a module call
  (``position_embeddings`` into every decoder layer), any other input read from
  outside, further returned values, and a value that does not depend on the main
  input but is read by several items. The tree nests by structural edges and names
  references beside the items that read them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from torchatlas._ir import GraphIR, Node, Ref, Scope


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
    """item -> items it feeds structurally, including ``SINK``; ``SOURCE`` -> items reading the main input."""
    references: dict[Item, list[tuple[Item, Ref]]] = field(default_factory=dict)
    """item -> (producer, value) of each side value it reads (``SOURCE``: from outside; the
    consumer ``SINK``: a further returned value)."""
    inputs: list[Ref] = field(default_factory=list)
    """Values read from outside the scope, those the call was given first (in argument order),
    then the rest as first read: ``inputs[0]`` is the main input."""
    carried: dict[tuple[Item, Item], list[Ref]] = field(default_factory=dict)
    """(item, item it feeds) -> the values that edge or reference carries, in order."""


def scope_flows(ir: GraphIR) -> dict[str, ScopeFlow]:
    flows = {s.id: ScopeFlow() for s in ir.scopes}
    chains = {s.id: ir.ancestry(s.id) for s in ir.scopes}
    first_seen: set[tuple[str, Item]] = set()
    carried: dict[tuple[str, Item, Item], dict[Ref, None]] = {}  # (scope, a, b) -> values, in order
    inputs_seen: dict[str, set[Ref]] = {s.id: set() for s in ir.scopes}  # an op may read thousands

    def add_item(scope_id: str, item: Item) -> None:
        if (scope_id, item) not in first_seen:
            first_seen.add((scope_id, item))
            flows[scope_id].items.append(item)

    def item_at(chain: list[str], node: Node, level: int) -> Item:
        return Item(True, chain[level + 1]) if level + 1 < len(chain) else Item(False, node.id)

    def carry(scope_id: str, a: Item, b: Item, ref: Ref) -> None:
        carried.setdefault((scope_id, a, b), {})[ref] = None

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
            src_chain = chains[src.scope] if src.kind == "op" else []
            common = 0
            while common < min(len(chain), len(src_chain)) and chain[common] == src_chain[common]:
                common += 1
            if common:
                level = common - 1
                a, b = item_at(src_chain, src, level), item_at(chain, node, level)
                if a != b:
                    carry(chain[level], a, b, ref)
            for level in range(common, len(chain)):  # value enters these scopes from outside
                if ref not in inputs_seen[chain[level]]:
                    inputs_seen[chain[level]].add(ref)
                    flows[chain[level]].inputs.append(ref)
                carry(chain[level], SOURCE, item_at(chain, node, level), ref)
            for level in range(common, len(src_chain)):  # value leaves these scopes
                carry(src_chain[level], item_at(src_chain, src, level), SINK, ref)
    for scope in ir.scopes:  # its first argument, not its first read, is the value a call works on
        flows[scope.id].inputs = _works_on_first(scope, scope.given_first(flows[scope.id].inputs))
    for (scope_id, a, b), values in carried.items():
        flows[scope_id].carried[(a, b)] = list(values)
        _classify(ir, flows, scope_id, a, b, list(values))
    dead = unused_ops(ir)
    for flow in flows.values():
        for a, b in _broadcast_edges(flow, dead):
            flow.edges[a].remove(b)
            flow.references.setdefault(b, []).extend((a, v) for v in flow.carried[(a, b)])
    return flows


def _works_on_first(scope: Scope, inputs: list[Ref]) -> list[Ref]:
    """A call given a list first works on its last value (``works_on``): that one is its main input."""
    k = scope.meta.get("works_on")
    if not isinstance(k, int) or not 0 < k < len(scope.inputs) or scope.inputs[k] not in inputs:
        return inputs
    main = scope.inputs[k]
    return [main, *(r for r in inputs if r != main)]


def unused_ops(ir: GraphIR) -> set[Item]:
    """The ops whose results nothing reads (``meta["dead"]``)."""
    return {Item(False, n.id) for n in ir.nodes if n.kind == "op" and n.meta.get("dead")}


def _broadcast_edges(flow: ScopeFlow, dead: set[Item]) -> list[tuple[Item, Item]]:
    """Structural edges that are side values after all: from an item that does not depend
    on the scope's main input and is read by several live items (rotary ``cos`` unsqueezed
    once, then read by the query and the key paths)."""
    if not flow.edges.get(SOURCE):
        return []
    reached: set[Item] = set()
    stack = [SOURCE]
    while stack:
        for b in flow.edges.get(stack.pop(), ()):
            if b not in reached:
                reached.add(b)
                stack.append(b)
    return [
        (a, b)
        for a, targets in flow.edges.items()
        if a != SOURCE and a not in reached and len([t for t in targets if t != SINK and t not in dead]) > 1
        for b in targets
        if b != SINK
    ]


def _classify(ir: GraphIR, flows: dict[str, ScopeFlow], scope_id: str, a: Item, b: Item, values: list[Ref]) -> None:
    flow = flows[scope_id]
    main: list[Ref] | None  # None: every value carried is a main one
    if a == SOURCE:
        main = flow.inputs[:1]
    elif b == SINK:
        outputs = ir.scope(scope_id).outputs
        main = outputs[:1] if outputs else None
    elif b.is_scope:
        main = flows[b.id].inputs[:1]
    else:
        main = None  # an op reads all it joins
    if main is None or any(v in main for v in values):
        flow.edges.setdefault(a, []).append(b)  # one call per (a, b): no duplicate to check for
        return
    flow.references.setdefault(b, []).extend((a, v) for v in values)
