"""What a capture records while the model runs: plain data, no torch objects kept alive.

Records refer to each other by index (a :data:`Slot` is ``(record index, output
slot)``); ``_build.py`` turns a finished :class:`Recording` into a ``GraphIR``
without touching anything live.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# (producer record index, output slot): an edge while recording, before ids exist
Slot = tuple[int, int]
# (shape, dtype, device) as torch gives them, and a DTensor's (placements, mesh, local shape);
# converted to TensorMeta at build time
RawMeta = tuple[Any, ...]
# (how, output slot, user code object, line, value given to Python, offset of the instruction
# that read it or -1): one read into Python
Read = tuple[str, int, Any, int, Any, int]


@dataclass(slots=True)
class NodeRecord:
    kind: str
    scope: int
    inputs: list[Slot]
    target: str | None = None
    path: str | None = None
    outputs: list[RawMeta] = field(default_factory=list)
    args: Any = None
    kwargs: Any = None
    inplace: bool = False
    code: Any = None
    """Code object of the user frame that ran it."""
    line: int = 0
    frame: int = 0
    """Which run of its function ran it (``_source.FrameSerials``), only to group ops by line execution."""
    direct: bool = True
    """The op was called from the user's line itself, not from library code it called."""
    error: str | None = None
    extra: dict[str, Any] | None = None
    shape_inputs: list[Slot] | None = None
    reads: list[Read] | None = None
    """Where its values were read into Python, in the order they were."""


@dataclass(slots=True)
class ScopeRecord:
    parent: int | None
    path: str
    cls: str
    call: int
    code: Any
    line: int
    frame: int
    passthrough: bool = False
    extra: dict[str, Any] | None = None
    """Facts recorded about the call (its time)."""


@dataclass(slots=True)
class Failure:
    """An op that raised during the forward pass."""

    target: str | None
    scope: int | None
    code: Any
    line: int
    record: int
    exc: BaseException | None


@dataclass
class Recording:
    """Everything one level of one capture recorded, ready for ``build_graph``."""

    level: str
    scopes: list[ScopeRecord]
    """Shared by every level of one capture: module calls happen once."""
    nodes: list[NodeRecord] = field(default_factory=list)
    scope_outputs: dict[int, list[Slot]] = field(default_factory=dict)
    scope_inputs: dict[int, list[Slot]] = field(default_factory=dict)
    """Scope index -> the values of the tensors the call was given, in argument order, where known."""
    scope_input_names: dict[int, list[str]] = field(default_factory=dict)
    """Scope index -> the parameter each of ``scope_inputs`` was passed as."""
    timeline: list[int] = field(default_factory=list)
    """Op record index, or ``-(scope index + 1)`` when a scope returns: the order lines finished."""
    outputs: list[tuple[str, Slot, RawMeta, dict[str, Any]]] = field(default_factory=list)
    """What the model returned (and, for backward, the gradients): (path, value, its meta, node meta)."""
    failure: Failure | None = None
    parameters: list[dict[str, Any]] | None = None
    buffers: list[dict[str, Any]] | None = None
    model: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    """Extra graph meta facts (backward tables...)."""
    outer_frame: int | None = None
    """The frame that called trace(): its lines name nothing."""
    frame_callers: dict[int, tuple[Any, int]] = field(default_factory=dict)
    """A helper function's run (``NodeRecord.frame``) -> (code, line) of the user line that called it."""

    def clear(self) -> None:
        """Drop every record (the graph is built): their memory is freed at once."""
        self.nodes.clear()
        self.scope_outputs.clear()
        self.scope_inputs.clear()
        self.scope_input_names.clear()
        self.timeline.clear()
        self.outputs.clear()
