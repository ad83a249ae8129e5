"""What every output shows of a graph's overlays (``graph.overlay``; ``torchatlas.compare``'s error).

An overlay holds a value per op or per module call (``_ir._overlays``). A call shows its own
value, or where it has none, its ops' and inner calls' together: a number's largest, a
category's first in execution order (so a closed layer holding the first divergence says
so). Numbers read ``error 2.1e-03``, categories their text; a line or box carries every
overlay's, in the overlay's order: ``[error 2.1e-03, ✗ diverges here]``. A fill colours by
one overlay: a number on the palette's overlay steps (its own scale, linear or log from the
smallest to the largest value), a category by a colour per value in order of appearance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from torchatlas._ir import GraphIR, overlays

CATEGORY_FILLS = ("#fbe3e1", "#fff1c9", "#e0f0e3", "#e6e1f5", "#dcebf7", "#f3e0ec", "#e9e9e9")
"""Fills of a category overlay's values, in order of appearance (light, so text stays readable)."""
DIVERGES_FILL = "#f4b4ae"
"""The fill of a value that starts with ``✗`` (compare's divergences): the strongest."""
DIVERGES_HERE = "✗ diverges here"
"""compare's mark on each run's first divergence."""
DIVERGES = "✗ diverges"
"""compare's mark on an op past the tolerance whose inputs were within it (not the first)."""
INHERITS = "inherits from "
"""compare's mark on an op past the tolerance because an input was: ``inherits from <call>``."""


def number_text(value: float) -> str:
    return f"{value:.3g}" if 1e-3 <= abs(value) < 1e5 or value == 0 else f"{value:.2e}"


@dataclass
class OverlayMarks:
    """The graph's overlays, each call's value worked out once."""

    entries: dict[str, dict[str, Any]]
    inclusive: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Overlay name -> scope id -> the call's value: its own, else its ops' and inner calls' together."""

    @property
    def names(self) -> list[str]:
        return list(self.entries)

    def value(self, name: str, item_id: str, inside: bool = True) -> Any:
        """An op's value, or a call's (its own, or with ``inside`` its inside's); None where it has none."""
        if item_id.startswith("s") and inside:
            return self.inclusive.get(name, {}).get(item_id)
        return self.entries[name]["values"].get(item_id)

    def word(self, name: str, value: Any) -> str:
        return f"{name} {number_text(value)}" if self.entries[name]["kind"] == "number" else str(value)

    def text(self, item_id: str, inside: bool = True) -> str:
        """``error 2.1e-03, ✗ diverges here``: every overlay's value of an op or call (``inside``:
        a call's inside's where it has none of its own); "" where none."""
        words = [self.word(name, v) for name in self.entries if (v := self.value(name, item_id, inside)) is not None]
        return ", ".join(words)

    def fill_name(self, requested: str | None) -> str | None:
        """The overlay a fill colours by: ``requested``, else the first number overlay, else the first."""
        if requested is not None:
            if requested not in self.entries:
                known = ", ".join(self.entries) or "none"
                raise ValueError(f"no overlay {requested!r} to fill by; this graph has: {known}")
            return requested
        numbers = [n for n, e in self.entries.items() if e["kind"] == "number"]
        return numbers[0] if numbers else (self.names[0] if self.entries else None)

    def fill(self, name: str, item_id: str, steps: tuple[str, ...]) -> str | None:
        """The colour of an op or call filled by overlay ``name``; None where it has no value."""
        value = self.value(name, item_id)
        if value is None:
            return None
        entry = self.entries[name]
        if entry["kind"] == "category":
            return _category_fill(value, self.categories(name))
        low, high = self.span(name)
        return steps[_step(value, low, high, entry.get("scale") == "log", len(steps))]

    def divergence(self, item_id: str) -> str | None:
        """``here``, ``diverges`` or ``inherits``: what compare's marks say of an op or call (a
        call: the first mark inside it), in any category overlay; None where none says."""
        for name, entry in self.entries.items():
            text = str(self.value(name, item_id) or "") if entry["kind"] == "category" else ""
            if text == DIVERGES_HERE:
                return "here"
            if text.startswith(DIVERGES):
                return "diverges"
            if text.startswith(INHERITS):
                return "inherits"
        return None

    def categories(self, name: str) -> list[str]:
        seen: dict[str, None] = {}
        for v in self.entries[name]["values"].values():
            seen.setdefault(str(v), None)
        return list(seen)

    def span(self, name: str) -> tuple[float, float]:
        numbers = [float(v) for v in self.entries[name]["values"].values()]
        if self.entries[name].get("scale") == "log":
            numbers = [v for v in numbers if v > 0] or [1.0]
        return (min(numbers), max(numbers)) if numbers else (0.0, 0.0)

    def legend(self, name: str, steps: tuple[str, ...]) -> list[tuple[str, str]]:
        """``(colour, words)`` per swatch: a number's lowest and highest step with their values, or
        each category."""
        entry = self.entries[name]
        if entry["kind"] == "category":
            return [(_category_fill(c, self.categories(name)), c) for c in self.categories(name)]
        low, high = self.span(name)
        scale = " (log scale)" if entry.get("scale") == "log" else ""
        return [(steps[0], f"{name} {number_text(low)}"), (steps[-1], f"{number_text(high)}{scale}")]


def overlay_marks(ir: GraphIR) -> OverlayMarks:
    """The overlays of ``ir`` with each call's value (see the module's docstring)."""
    entries = overlays(ir)
    marks = OverlayMarks(entries)
    if not entries:
        return marks
    parents = {s.id: s.parent for s in ir.scopes}
    first: dict[str, int] = {}
    for i, n in enumerate(ir.nodes):
        scope: str | None = n.scope
        while scope is not None and scope not in first:
            first[scope] = i
            scope = parents.get(scope)
    position = {n.id: i for i, n in enumerate(ir.nodes)}
    for name, entry in entries.items():
        number = entry["kind"] == "number"
        # (where it ran, the innermost call it counts for, value): an op for its call, a call for its caller
        placed = sorted(
            ((position[k], ir.node(k).scope, v) if k in position else (first.get(k, len(position)), parents.get(k), v)
             for k, v in entry["values"].items()),
            key=lambda item: item[0],
        )
        inclusive: dict[str, Any] = {}
        for _, scope, value in placed:  # execution order: a category keeps the first
            while scope is not None:
                if scope not in inclusive:
                    inclusive[scope] = value
                elif number:
                    inclusive[scope] = max(inclusive[scope], value)
                scope = parents.get(scope)
        inclusive.update({k: v for k, v in entry["values"].items() if k not in position})  # a call's own value wins
        marks.inclusive[name] = inclusive
    return marks


def _step(value: float, low: float, high: float, log: bool, count: int) -> int:
    if log:
        value, low, high = (math.log10(max(v, low)) for v in (value, low, high))
    if high <= low:
        return count - 1
    return min(count - 1, max(0, int((value - low) / (high - low) * count)))


def _category_fill(value: Any, categories: list[str]) -> str:
    text = str(value)
    if text.startswith("✗"):
        return DIVERGES_FILL
    return CATEGORY_FILLS[categories.index(text) % len(CATEGORY_FILLS)] if text in categories else CATEGORY_FILLS[-1]
