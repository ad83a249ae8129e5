"""Far reads: a value read long after it was made is drawn as a ``↪`` stand-in beside its reader.

``stand_in_reads`` is the one rule, read by every drawing: the diagram (``build_layout``) and the
web page (each node's ``fr``) draw a value into a box as a stand-in where every read of it
there is one of these, so both draw the same stand-ins for the same boxes.

A diagram draws a read as an edge from the value's producer. Read after many other module
calls ran (DenseNet's layers each reading every earlier layer's output, a UNet's skip from
its first stage to its last, a mask made before a stack of layers), that edge runs past all
of them, and ``dot`` lays out each such long edge at great cost: a DenseNet-121 of 1,800
nodes and edges did not finish in 90 s. Counting the module calls that ran in between, at
the level where producer and reader meet, is the one measure of how far a read reaches.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Collection
from typing import Any

from torchatlas._ir import GraphIR, Node

FAR_CALLS = 3
"""A read with this many module calls (of the kind that hold calls: layers, blocks, stages)
run in between is far: a stand-in, not an edge."""


BROADCAST_CALLS = 3
"""A value read inside this many different module calls (Llama's rotary cos/sin, attention masks)
keeps its edges into the first call only; the other calls get a stand-in. Long edges through
many clusters are what makes dot slow: Llama-32L at depth 2 took over 150 s with them, under 1 s
without."""


class CallDistance:
    """How many module calls ran between a value's producer and its reader."""

    def __init__(self, ir: GraphIR) -> None:
        self.ir = ir
        self.position = {n.id: i for i, n in enumerate(ir.nodes)}
        first: dict[str, int] = {}  # scope -> position of the first node inside it, at any depth
        for i, n in enumerate(ir.nodes):
            cur: str | None = n.scope
            while cur is not None and cur not in first:
                first[cur] = i
                cur = ir.scope(cur).parent
        # scope -> sorted first positions of its child calls that hold calls of their own: a
        # residual skipping a block's conv, norm and activation leaves stays an edge
        children = ir.children()
        self.composite = {sid for sid, kids in children.items() if sid and kids}
        self.starts = {
            sid: sorted(first[k] for k in kids if k in first and k in self.composite) for sid, kids in children.items() if sid
        }
        self._chains: dict[str, list[str]] = {}

    def chain(self, scope_id: str) -> list[str]:
        """The scope ids from the root down to ``scope_id`` (``GraphIR.ancestry``), kept."""
        if scope_id not in self._chains:
            self._chains[scope_id] = self.ir.ancestry(scope_id)
        return self._chains[scope_id]

    def calls_between(self, producer: Node, reader: Node) -> int:
        """Module calls holding other calls that began after the producer ran and before the
        reader read, counted at the level where both meet and at each level down to the reader
        (a DenseNet block's input, read by its 24th layer, has 23 layers between); the calls
        holding the reader are not counted, nor calls nested in the counted ones."""
        made, read = self.chain(producer.scope), self.chain(reader.scope)
        shared = 0
        while shared < min(len(made), len(read)) and made[shared] == read[shared]:
            shared += 1
        if shared == 0:
            return 0
        low, high = self.position[producer.id], self.position[reader.id]
        between = 0
        for level in range(shared, len(read) + 1):
            starts = self.starts.get(read[level - 1], [])
            # the call holding the reader began in between too
            holding = 1 if level < len(read) and read[level] in self.composite else 0
            between += max(0, bisect_left(starts, high) - bisect_right(starts, low) - holding)
        return between

    def is_far(self, producer: Node, reader: Node) -> bool:
        return self.calls_between(producer, reader) >= FAR_CALLS


def call_holding(reader_chain: list[str], producer_chain: list[str]) -> str | None:
    """The module call, just below the deepest one shared with the producer, that holds the
    reader (chains are ``GraphIR.ancestry``); None when the reader is directly in the shared one."""
    shared = _shared_depth(reader_chain, producer_chain)
    return reader_chain[shared] if shared < len(reader_chain) else None


def _shared_depth(a: list[str], b: list[str]) -> int:
    """How many leading scopes two ``GraphIR.ancestry`` chains have in common."""
    depth = 0
    while depth < min(len(a), len(b)) and a[depth] == b[depth]:
        depth += 1
    return depth


def _repeated_layers_holding(ir: GraphIR, reader_chains: dict[str, list[str]]) -> dict[str, str | None] | None:
    """Reader -> the call just below the readers' deepest shared scope that holds it, when at
    least ``BROADCAST_CALLS`` of those calls are repeats of one layer; else None."""
    chains = list(reader_chains.values())
    shared = chains[0]
    for c in chains[1:]:
        shared = shared[: _shared_depth(shared, c)]
    holding = {r: call_holding(c, shared) for r, c in reader_chains.items()}
    groups: dict[Any, set[str]] = {}
    for call in holding.values():
        repeat = ir.scope(call).meta.get("repeat") if call is not None else None
        if isinstance(repeat, dict):
            groups.setdefault(repeat.get("group"), set()).add(call)
    return holding if any(len(calls) >= BROADCAST_CALLS for calls in groups.values()) else None


def stand_in_reads(ir: GraphIR, folded: Collection[str] = (), state_kinds: Collection[str] = ()) -> set[tuple[str, int]]:
    """(reader node id, input position) of every read drawn as a ``↪`` stand-in instead of an edge:

    * far: ``FAR_CALLS`` or more module calls holding calls ran between the producer and the
      reader (``CallDistance``), unless the value is a module's state (``state_kinds``) or either
      end lies in a folded run (``folded``: its scope ids; a run is drawn once, by its first member,
      whose place is not the reader's);
    * broadcast: the value is read inside ``BROADCAST_CALLS`` or more module calls below the
      scope it shares with its producer (or in as many repeats of one layer inside one such call:
      the encoder's output read by every decoder layer), and this read is not in the first.
    """
    distance = CallDistance(ir)
    chain = distance.chain
    out: set[tuple[str, int]] = set()
    readers: dict[tuple[str, int], dict[str, None]] = {}  # value -> the nodes reading it, in order
    for n in ir.nodes:
        for position, (src_id, slot) in enumerate(n.inputs):
            src = ir.node(src_id)
            # made and read in one call that holds no calls of its own: near (most reads), not measured
            inside_one = src.scope == n.scope and not distance.starts.get(n.scope)
            if not inside_one and src.kind not in state_kinds and n.scope not in folded and src.scope not in folded and distance.is_far(src, n):
                out.add((n.id, position))
            readers.setdefault((src_id, slot), {})[n.id] = None
    for (src_id, slot), value_readers in readers.items():
        if len(value_readers) < BROADCAST_CALLS:  # too few readers to sit in that many calls
            continue
        src_chain = chain(ir.node(src_id).scope)
        reader_chains = {r: chain(ir.node(r).scope) for r in value_readers}
        holding = {r: call_holding(c, src_chain) for r, c in reader_chains.items()}
        calls = set(holding.values()) - {None}
        if len(calls) < BROADCAST_CALLS:
            for call in calls:  # look inside each call for repeated layers that all read the value
                inside = {r: c for r, c in reader_chains.items() if holding[r] == call}
                holding.update(_repeated_layers_holding(ir, inside) or {})
        ordered = list(dict.fromkeys(call for call in holding.values() if call is not None))
        if len(ordered) < BROADCAST_CALLS:
            continue
        kept = ordered[0]
        for reader, call in holding.items():
            if call not in (None, kept):
                out.update((reader, p) for p, (i, s) in enumerate(ir.node(reader).inputs) if i == src_id and s == slot)
    return out
