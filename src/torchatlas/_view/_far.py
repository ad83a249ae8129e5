"""Far reads: a value read long after it was made is drawn as a ``↪`` stand-in beside its reader.

A diagram draws a read as an edge from the value's producer. Read after many other module
calls ran (DenseNet's layers each reading every earlier layer's output, a UNet's skip from
its first stage to its last, a mask made before a stack of layers), that edge runs past all
of them, and ``dot`` lays out each such long edge at great cost: a DenseNet-121 of 1,800
nodes and edges did not finish in 90 s. Counting the module calls that ran in between, at
the level where producer and reader meet, is the one measure of how far a read reaches.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right

from torchatlas._ir import GraphIR, Node

FAR_CALLS = 3
"""A read with this many module calls (of the kind that hold calls: layers, blocks, stages)
run in between is far: a stand-in, not an edge."""


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

    def _chain(self, scope_id: str) -> list[str]:
        if scope_id not in self._chains:
            self._chains[scope_id] = self.ir.ancestry(scope_id)
        return self._chains[scope_id]

    def calls_between(self, producer: Node, reader: Node) -> int:
        """Module calls holding other calls that began after the producer ran and before the
        reader read, counted at the level where both meet and at each level down to the reader
        (a DenseNet block's input, read by its 24th layer, has 23 layers between); the calls
        holding the reader are not counted, nor calls nested in the counted ones."""
        made, read = self._chain(producer.scope), self._chain(reader.scope)
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
