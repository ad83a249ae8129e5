"""Whether a recorded value's shape was fixed by the shapes of the inputs, or by values.

``len(torch.nonzero(h > 0))`` reads a count that ``h``'s values decide: a size read of such a
tensor is a read of values (kind ``count``), never "size only". A value's shape is decided by
values when an op that sizes its result by its data made it (``nonzero``, ``masked_select``,
``unique``, indexing by a boolean mask...) or anything it was computed from had such a shape
(conservatively: ``nz.sum()`` counts too, though a scalar's shape is fixed).
"""

from __future__ import annotations

import torch

from .._ops import op_name
from ._records import NodeRecord

# ops whose result's size is a count of values: always, or given a tensor beyond their first argument
_SIZED_BY_VALUES = frozenset({"nonzero", "argwhere", "masked_select", "unique", "unique_consecutive", "_unique", "_unique2", "bincount"})
_SIZED_BY_A_TENSOR_ARGUMENT = frozenset({"repeat_interleave"})
_INDEXING = frozenset({"getitem", "index", "take_along_dim"})


class ValueSizes:
    """Answers, memoised per record, for one trace."""

    __slots__ = ("_nodes", "_known")

    def __init__(self, nodes: list[NodeRecord]) -> None:
        self._nodes = nodes
        self._known: dict[int, bool] = {}

    def decided_by_values(self, index: int) -> bool:
        """True when record ``index``'s output shapes depend on values, not only on input shapes."""
        known, nodes = self._known, self._nodes
        answer = known.get(index)
        if answer is not None:
            return answer
        pending = [index]
        while pending:  # depth first, iteratively: graphs are deeper than the recursion limit
            i = pending[-1]
            if i in known:
                pending.pop()
                continue
            record = nodes[i]
            sources = [p for p, _ in record.inputs] + [p for p, _ in record.shape_inputs or ()]
            unknown = [p for p in sources if p not in known and p < i]
            if unknown:
                pending.extend(unknown)
                continue
            known[i] = self._sized_by_its_data(record) or any(known.get(p, False) for p in sources)
            pending.pop()
        return known[index]

    def _sized_by_its_data(self, record: NodeRecord) -> bool:
        if record.kind != "op" or record.target is None:
            return False
        name = op_name(record.target)
        if name in _SIZED_BY_VALUES:
            return True
        if name == "where":
            return len(record.inputs) == 1 and not record.kwargs  # torch.where(cond): nonzero
        if name in _SIZED_BY_A_TENSOR_ARGUMENT:
            return len(record.inputs) > 1
        if name in _INDEXING:  # x[mask]: as many rows as the mask has True
            return any(self._is_bool(slot) for slot in record.inputs[1:])
        return False

    def _is_bool(self, slot: tuple[int, int]) -> bool:
        outputs = self._nodes[slot[0]].outputs
        return slot[1] < len(outputs) and len(outputs[slot[1]]) > 1 and outputs[slot[1]][1] == torch.bool
