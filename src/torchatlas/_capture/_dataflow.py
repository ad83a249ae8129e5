"""Who produced each tensor value: the data-flow table of one capture level.

Tensors are tracked by identity (weak references, never kept alive), plus, for
in-place writes, the storage each tensor aliases: a reader of a tensor whose
storage was written after the tensor was made reads from the last writer. A
tensor nobody produced becomes a leaf node when first read (an input, a
parameter or buffer, or a constant). A tensor read after a write through another
view of its storage (``y[:, :2].mul_(0.5)``, then ``y``) reads a ``torchatlas.updated``
node made at that read: its value now, from its value before and the write, with its
own shape (the write's is the view's).

A wrapper tensor (a DTensor, an ``AsyncCollectiveTensor``) holds the same value as the
tensor it wraps: each is read as the other (``_distributed.inner_tensor``). Under a process
group, a tensor nobody produced that views exactly what a recorded op made (FSDP2's
unsharded parameter, an ``nn.Parameter`` around its all-gathered view) reads that op.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch

from . import _distributed
from ._passthrough import PassThroughs
from ._records import NodeRecord, Recording, Slot
from ._values import TENSOR_ARGS

Tensor = torch.Tensor
_PLAIN = (Tensor, torch.nn.Parameter)
UPDATED = "torchatlas.updated"
"""Target of the node a tensor becomes when read after a write through another view of its storage."""
Classifier = Callable[[Tensor], tuple[str, str | None]]
"""A tensor nobody produced -> (leaf kind, path): ``("param", "fc.weight")``, ``("constant", None)``."""


class DataFlow:
    """Producers by tensor identity and last writers by storage, for one :class:`Recording`."""

    def __init__(
        self,
        recording: Recording,
        current_scope: Callable[[], int],
        classify: Classifier,
        op_extra: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        self.nodes = recording.nodes
        self.timeline = recording.timeline
        self.current_scope = current_scope
        self.classify = classify
        self.op_extra = op_extra
        """The level's facts for each op node it makes (the ATen level's phase)."""
        self._producer: dict[int, tuple[Any, int, int]] = {}  # id(t) -> (weakref, record, slot)
        # storage key -> (last writer, the geometry of the tensor it wrote)
        self._writes: dict[int, tuple[Slot, tuple[Any, ...] | None]] = {}
        self.passes: PassThroughs | None = None
        """Pass-through calls' nodes, which only the readers that got their result read."""
        self.returning: int | None = None
        """The module call whose return reads now, if one does."""
        self.views: dict[tuple[int | None, tuple[Any, ...] | None], Slot] | None = None
        """(storage, geometry) -> the value made there; kept only under a process group (``watch_views``)."""

    def watch_views(self) -> None:
        """Remember where each value lives, so a tensor made outside any op over it reads its maker."""
        self.views = {}

    def register(self, t: Tensor, record: int, slot: int) -> None:
        self._producer[id(t)] = (weakref.ref(t), record, slot)

    def new_leaf(self, kind: str, path: str | None, t: Tensor) -> Slot:
        index = len(self.nodes)
        plain = type(t) in _PLAIN  # most leaves: parameters, read once each per trace
        try:
            meta = (t.shape, t.dtype, t.device) if plain else raw_meta(t)
        except RuntimeError:  # a nested tensor
            meta = raw_meta(t)
        record = NodeRecord(kind, self.current_scope(), [], None, path, [meta])
        if kind in ("param", "buffer"):
            record.extra = {"requires_grad": bool(t.requires_grad)}
        self.nodes.append(record)
        self._producer[id(t)] = (weakref.ref(t), index, 0)
        inner = None if plain else _distributed.inner_tensor(t)
        if inner is not None:  # a DTensor parameter or input: its local shard is the same leaf
            self.register(inner, index, 0)
        return index, 0

    def known(self, t: Tensor, scope: int | None = None) -> Slot | None:
        """The value ``t`` holds if a record made it, without making a leaf: a new
        ``torchatlas.updated`` node (in ``scope``, default the running one) if its storage was
        written through another view since."""
        made = self.lookup(t)
        if made is None:
            return None
        write = self._write_since(t, made)
        if write is None:
            return made
        writer, geometry = write
        if _geometry(t) == geometry:
            return writer  # the same view of the storage (x.data): the write made its value
        return self._updated(t, made, writer, scope)

    def lookup(self, t: Tensor) -> Slot | None:
        """The value a record made ``t`` hold, by identity alone: no write is looked at, no node made.
        A pass-through call's node, only if the reader running now got the call's result."""
        entry = self._producer.get(id(t))
        if entry is None or entry[0]() is not t:
            return None
        passes = self.passes
        if passes is not None and entry[1] in passes.nodes:
            return passes.resolve(t, (entry[1], entry[2]), self.returning)
        return entry[1], entry[2]

    def made_by(self, t: Tensor) -> int | None:
        """The record that last made or wrote ``t``'s value, making no node (run-time bookkeeping)."""
        made = self.lookup(t)
        if made is None:
            return None
        write = self._write_since(t, made)
        return write[0][0] if write is not None else made[0]

    def latest(self, t: Tensor, scope: int) -> tuple[int, Slot] | None:
        """``(made_by(t), known(t, scope))`` with one lookup (a pass-through's value is resolved
        once): the record that last made or wrote ``t``'s value, and the value it holds."""
        made = self.lookup(t)
        if made is None:
            return None
        write = self._write_since(t, made)
        if write is None:
            return made[0], made
        writer, geometry = write
        if _geometry(t) == geometry:
            return writer[0], writer
        return writer[0], self._updated(t, made, writer, scope)

    def _write_since(self, t: Tensor, made: Slot) -> tuple[Slot, tuple[Any, ...] | None] | None:
        """The last write into ``t``'s storage, if it came after the record that made ``t``."""
        if not self._writes:
            return None
        write = self._writes.get(storage_key(t))
        return write if write is not None and write[0][0] > made[0] else None

    def _updated(self, t: Tensor, before: Slot, write: Slot, scope: int | None) -> Slot:
        index = len(self.nodes)
        self.nodes.append(
            NodeRecord(
                "op", self.current_scope() if scope is None else scope, [before, write], UPDATED,
                outputs=[raw_meta(t)], args=[TENSOR_ARGS[0], TENSOR_ARGS[1]],
                extra=self.op_extra() if self.op_extra is not None else None,
            )
        )
        self.produced(index, [t], [])
        return index, 0

    def ref(self, t: Tensor) -> Slot:
        """The value a read of ``t`` depends on (a new leaf for a tensor nobody produced)."""
        found = self.known(t)
        if found is not None:
            return found
        inner = _distributed.inner_tensor(t)
        if self.views is not None and inner is None:
            key = storage_key(t)
            found = self.views.get((key, _geometry(t))) if key is not None else None
            if found is not None:
                self.register(t, *found)
                return found
        kind, path = self.classify(t)
        if kind == "constant" and inner is not None:  # DTensor.from_local's result, a waiting collective's
            found = self.ref(inner)
            self.register(t, *found)
            return found
        leaf = self.new_leaf(kind, path, t)
        if self.views is not None and self._writes:
            # FSDP2's unsharded parameter, all-gathered into in place (on a 2-D mesh a DTensor
            # whose local part holds the gathered storage)
            write = self._writes.get(storage_key(t if inner is None else inner))
            if write is not None:
                return self._updated(t, leaf, write[0], None)
        return leaf

    def alias(self, t: Tensor, source: Tensor) -> None:
        """``t`` holds ``source``'s value: a call that computed nothing made it."""
        self.register(t, *self.ref(source))

    def refs(self, tensors: list[Tensor]) -> list[Slot]:
        # Hot path: a tensor a record made, not a pass-through's value, whose storage no record
        # wrote since (identity alone decides); anything else goes through ``ref``.
        out = []
        get = self._producer.get
        passed = self.passes.nodes if self.passes is not None else ()
        writes = self._writes
        for t in tensors:
            entry = get(id(t))
            if entry is not None and entry[0]() is t and entry[1] not in passed:
                if writes:
                    write = writes.get(storage_key(t))
                    if write is not None and write[0][0] > entry[1]:
                        out.append(self.ref(t))
                        continue
                out.append((entry[1], entry[2]))
            else:
                out.append(self.ref(t))
        return out

    def produced(self, index: int, outs: list[Tensor], written: list[Tensor]) -> None:
        """Record ``index`` as the producer of ``outs`` and the last writer of ``written``."""
        self.timeline.append(index)
        producer, views = self._producer, self.views
        for slot, t in enumerate(outs):
            producer[id(t)] = (weakref.ref(t), index, slot)
            inner = _distributed.inner_tensor(t) if type(t) is not Tensor else None
            if inner is not None:  # a DTensor result: its local part is the same value
                producer[id(inner)] = (weakref.ref(inner), index, slot)
            elif views is not None:
                key = storage_key(t)
                if key is not None:
                    views[(key, _geometry(t))] = (index, slot)
        for t in written:
            slot = next((i for i, o in enumerate(outs) if o is t), 0)
            key = storage_key(t)
            if key is not None:
                self._writes[key] = ((index, slot), _geometry(t))
            self.register(t, index, slot)

    def clear(self) -> None:
        self._producer.clear()
        self._writes.clear()
        if self.views is not None:
            self.views.clear()


def raw_meta(t: Tensor) -> tuple[Any, ...]:
    """Raw (torch.Size, dtype, device), and a DTensor's (placements, mesh, local shape): no
    reference to the tensor, converted at build time."""
    try:
        if type(t) is not Tensor:
            placed = _distributed.dist_meta(t)
            if placed is not None:
                return t.shape, t.dtype, t.device, placed
        return t.shape, t.dtype, t.device
    except RuntimeError:  # a (strided) nested tensor: its ragged dims have no size
        return _nested_shape(t), t.dtype, t.device


def _nested_shape(t: Tensor) -> tuple[Any, ...]:
    """``(2, "j", 16)``: each dim's size, ``"j"`` for a ragged one (a jagged tensor says ``j1``)."""
    shape: list[Any] = []
    for dim in range(t.dim()):
        try:
            shape.append(t.size(dim))
        except RuntimeError:
            shape.append("j")
    return tuple(shape)


def _geometry(t: Tensor) -> tuple[Any, ...] | None:
    """Which elements of its storage ``t`` views, and as what."""
    try:
        return t.shape, t.stride(), t.storage_offset(), t.dtype
    except RuntimeError:  # a nested tensor has no strides
        return None


def storage_key(t: Tensor) -> int | None:
    try:
        return t.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError, AttributeError):
        return None
