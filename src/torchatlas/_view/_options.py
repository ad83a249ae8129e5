"""What every output shows of a graph, with one default each: every writer's options extend it."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import ClassVar, Literal

STATE_KINDS = frozenset({"param", "buffer"})
"""Node kinds that hold a module's state: hidden unless ``show_params``."""
CONSTANT_KINDS = frozenset({"constant"})
"""Tensors read from outside the model's state (a plain tensor attribute, not a buffer): hidden unless ``show_constants``."""
LOCAL_KINDS = STATE_KINDS | CONSTANT_KINDS
"""Values a call holds or makes itself, read where they are: never a value passed between calls."""


@dataclass(frozen=True)
class ViewOptions:
    """The choices every output makes alike (tree, summary, diagram, web page): writers' options
    extend it, so ``graph.tree()``, ``graph.summary()``, ``graph.to_dot()`` and ``graph.to_html()``
    show the same calls, folded alike, hiding the same node kinds.

    A writer that cannot honour a field names it in ``UNHONOURED`` and refuses any value but its
    default (one line saying so), rather than showing something else silently; such a writer may
    give the field the default it does honour (Model Explorer folds nothing: ``fold_repeats=False``)."""

    UNHONOURED: ClassVar[dict[str, str]] = {}
    """Fields this writer cannot honour, each with why: given anything but the default, it refuses."""

    depth: int | None = None
    """Module nesting to expand (the model is depth 0); deeper calls are one line or box each. None: all."""
    fold_repeats: bool = True
    """Show a run of identical sibling calls (``layers.0–79 ×80``) once, as its first member."""
    expand_leaf_modules: bool = False
    """Show the ops inside standard ``torch.nn`` leaf modules (Conv2d, Linear...) instead of one box."""
    show_params: bool = False
    """Show parameters and buffers and the values read from them."""
    show_constants: bool = False
    """Show constants: tensors read that are neither inputs nor parameters nor buffers (a plain tensor attribute)."""
    direction: Literal["TB", "LR"] = "TB"
    """Values flow top to bottom (``"TB"``) or left to right (``"LR"``)."""

    def __post_init__(self) -> None:
        if self.depth is not None and (type(self.depth) is not int or self.depth < 0):
            raise ValueError(f"depth must be None or an integer >= 0, not {self.depth!r}")
        if self.direction not in ("TB", "LR"):
            raise ValueError(f"direction must be 'TB' or 'LR', not {self.direction!r}")
        defaults = {f.name: f.default for f in fields(self)}
        for name, why in self.UNHONOURED.items():
            if getattr(self, name) != defaults[name]:
                raise ValueError(f"{type(self).__name__} cannot honour {name}={getattr(self, name)!r}: {why}")

    def hidden_kinds(self) -> frozenset[str]:
        """The node kinds no output draws: the one rule the tree, diagram, page and exports share."""
        return (frozenset() if self.show_params else STATE_KINDS) | (frozenset() if self.show_constants else CONSTANT_KINDS)
