"""The frames that held a pass-through's tensor under a name when the call was made
(``_passthrough``): the only frames where a name can hold what the call was given."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from . import _source


class Holder(NamedTuple):
    """A user frame that held a pass-through's tensor under ``names`` when the call was made."""

    frame: int
    code: Any
    names: tuple[str, ...]
    guard: int | None
    """The module call running the frame: once it has returned, a frame at that address is another."""


def holds(value: Any, t: Any, depth: int = 2) -> bool:
    """``value`` is ``t``, or a list, tuple or dict with ``t`` in it, two levels deep (HRNet's
    branches ``x[i]``, an input ``pack["zs"][0]``)."""
    if value is t:
        return True
    if depth == 0 or type(value) not in (list, tuple, dict):
        return False
    items = value.values() if type(value) is dict else value
    return any(holds(item, t, depth - 1) for item in items)


def holders_of(t: Any, frame: Any, innermost: int | None, made_by: Mapping[int, int]) -> tuple[Holder, ...]:
    """Each user frame from ``frame`` up that holds ``t`` in variables (or in a list, tuple or
    dict they hold), with the module call running it: ``innermost`` runs ``frame``, and
    ``made_by`` maps the id of a frame that made a running call to the call running that frame
    (and those above it, up to the next)."""
    found = []
    guard = innermost
    while frame is not None:
        if id(frame) in made_by:
            guard = made_by[id(frame)]
        code = frame.f_code
        if not _source.is_library_file(code.co_filename):
            names = tuple(name for name, value in frame.f_locals.items() if holds(value, t))
            if names:
                found.append(Holder(id(frame), code, names, guard))
        frame = frame.f_back
    return tuple(found)
