"""The records a diff is made of: changes, node matches and the merged calls."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torchatlas._text import change_words

NAMING_FIELDS = frozenset({"path", "class"})
"""Fields that name a call rather than say what it computes: ``GraphDiff.equal`` ignores them."""


@dataclass(frozen=True)
class ScopeChange:
    """One changed quantity of a module call present in both graphs."""

    scope: str
    """The call's label, ``path (Class)``: in the second graph, or the first for a removed one."""
    field: str
    """``class``, ``path``, ``input shapes``, ``output shapes``, ``parameters``, ``parameter shapes``,
    ``FLOPs``; for ops inside the call ``op``, ``op shapes``, ``op dtypes``, ``op arguments``,
    ``data flow``, ``op added``, ``op removed``."""
    before: Any
    """The value in ``a``: an int (None: unknown) for ``parameters`` and ``FLOPs``, a tuple of shapes
    for ``input shapes`` and ``output shapes``, text for the rest (``—`` where ``a`` lacks an op)."""
    after: Any
    """The value in ``b``, as ``before``."""

    @property
    def words(self) -> str:
        """``params 20 → 40``, ``output shapes 2×4 → 2×8``: the one spelling ``str(diff)``,
        ``diff.tree()`` and ``diff.summary()`` write a change in; an op one side lacks, ``added op
        mul(2×8, 2×8): 2×8`` (its ``before`` or ``after`` is ``—``)."""
        if self.field in ("op added", "op removed"):
            return f"{self.field.removeprefix('op ')} op {self.after if self.field == 'op added' else self.before}"
        return change_words(self.field, self.before, self.after)


def shape_values(shapes: list[Any]) -> tuple[Any, ...]:
    """``[[2, 4], [4]]`` -> ``((2, 4), (4,))``: a call's shapes as a record keeps them."""
    return tuple(tuple(s) if isinstance(s, (list, tuple)) else s for s in shapes)


@dataclass(frozen=True)
class NodeMatch:
    """Where one node of either graph went."""

    a: str | None
    """Its id in ``a`` (None: only in ``b``)."""
    b: str | None
    """Its id in ``b`` (None: only in ``a``)."""
    status: str
    """``same``, ``changed``, ``removed``, ``added``, ``pass-through`` (a copy, or a tied weight's
    other name, read through) or ``unread``
    (a parameter or buffer no op reads: an export lists every one)."""
    reason: str = ""
    """Why a node has no match."""


@dataclass(frozen=True)
class DiffCall:
    """One module call of the merged picture of two graphs, in tree order."""

    depth: int
    """Nesting: the model's own call is 0."""
    label: str
    """``fc (Linear)``: the call's label in ``b`` (in ``a`` for a removed call)."""
    status: str
    """``same``, ``changed``, ``added`` (only in ``b``), ``removed`` (only in ``a``) or ``pass-through``
    (only on one side, handing its input on unchanged)."""
    before: dict[str, Any] | None
    """The call's facts in ``a`` (label, class, input and output shapes, parameters, FLOPs), as
    :attr:`ScopeChange.before` holds them; None when added."""
    after: dict[str, Any] | None
    """The same facts in ``b``; None when removed."""
    changed: tuple[str, ...] = ()
    """The fields that differ (``output shapes``, ``parameters``, ``op``...)."""
    path: str = ""
    """The call's module path (in ``b``; in ``a`` for a removed call)."""
    cls: str = ""
    """Its class name."""
    notes: tuple[str, ...] = ()
    """What changed, each ``field before → after``, for its line in the tree."""
