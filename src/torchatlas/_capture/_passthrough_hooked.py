"""Tensors handed to a module call whose hooks may keep them (``_passthrough``).

A forward hook gets the arguments its call was given, and may keep one (transformers' first
hidden state is the first layer's ``args[0]``). A pass-through that ran on that tensor inside
the call (an Identity norm first in the layer) made a value the hook never saw: a reader that
got the tensor from the hook reads what the call was given. Nothing shows the path from a
hook to its reader, so this is the reading of last resort, for a reader no path of any
pass-through result is seen to reach, once the hooked call has ended without returning the
tensor (a call that returns it hands its hooks the result as well).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from ._records import Slot

Latest = Callable[[Any], "Slot | None"]
"""The latest pass-through node of a tensor, or None."""


@dataclass(slots=True)
class Handed:
    """One tensor given to one hooked module call."""

    tensor: weakref.ref
    scope: int
    value: Slot
    """What the call was given: the value a hook that keeps its argument holds."""
    passed_before: Slot | None
    """The latest pass-through of the tensor when the call began (None: none had run)."""
    passed_after: Slot | None = None
    """The latest when the call ended: another means one ran on it inside the call."""
    returned: bool = False


class HookedCalls:
    """Every tensor given to a module call with forward hooks, in call order."""

    def __init__(self) -> None:
        self._by_tensor: dict[int, list[Handed]] = {}
        self._open: dict[int, list[Handed]] = {}
        """Module call -> what it was given, while it runs."""

    def clear(self) -> None:
        self._by_tensor.clear()
        self._open.clear()

    def started(self, scope: int, t: Any, value: Slot, latest: Latest) -> None:
        handed = Handed(weakref.ref(t), scope, value, latest(t))
        self._by_tensor.setdefault(id(t), []).append(handed)
        self._open.setdefault(scope, []).append(handed)

    def ended(self, scope: int, returned: Collection[int], latest: Latest) -> None:
        """Call ``scope`` returned the tensors whose ids are ``returned``."""
        for handed in self._open.pop(scope, ()):
            t = handed.tensor()
            if t is not None:
                handed.passed_after = latest(t)
                handed.returned = id(t) in returned

    def kept(self, t: Any, chain: Collection[Slot]) -> Slot | None:
        """What the latest hooked call that ended was given, where a pass-through of ``t`` (one
        of ``chain``, its pass-throughs now) ran inside it and it did not return ``t``."""
        for handed in reversed(self._by_tensor.get(id(t), ())):
            if handed.tensor() is not t or handed.scope in self._open or handed.returned:
                continue  # another tensor at the address, a call still running, or one returning it
            if handed.passed_after != handed.passed_before and handed.passed_after in chain:
                return handed.value
        return None
