"""What every output shows of a graph, with one default each: every writer's options extend it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ViewOptions:
    """The choices every output makes alike (tree, summary, diagram): writers' options extend it,
    so ``graph.tree()``, ``graph.summary()`` and ``graph.to_dot()`` show the same calls, folded alike."""

    depth: int | None = None
    """Module nesting to expand (the model is depth 0); deeper calls are one line or box each. None: all."""
    fold_repeats: bool = True
    """Show a run of identical sibling calls (``layers.0–79 ×80``) once, as its first member."""

    def __post_init__(self) -> None:
        if self.depth is not None and (type(self.depth) is not int or self.depth < 0):
            raise ValueError(f"depth must be None or an integer >= 0, not {self.depth!r}")
