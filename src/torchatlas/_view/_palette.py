"""Colours: one palette per theme, with a fill and a border for each op category of ``_ops.py``.

Every renderer that colours (the diagram, the web page) reads these, so an op has the
same colour everywhere.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Palette:
    """Colours of one theme: per-category fills and borders, plus the canvas."""

    background: str
    text: str
    muted: str
    """Secondary text: class names, shapes on edges."""
    edge: str
    cluster_fills: tuple[str, ...]
    """Cluster fill by nesting depth (cycled), so nested modules stay distinguishable."""
    cluster_border: str
    fill: Mapping[str, str]
    border: Mapping[str, str]
    badge: str
    """Fill of the ``×N`` badge on folded repeats."""
    overlay: tuple[str, ...]
    """Fills from low to high for a data overlay (the web page colours boxes by FLOPs or parameters)."""


# Both themes side by side, one row per Palette field and per category, so neither theme can miss one.
_CANVAS: Mapping[str, Mapping[str, Any]] = {
    "background": {"light": "#ffffff", "dark": "#16191f"},
    "text": {"light": "#1f2430", "dark": "#e6e9ef"},
    "muted": {"light": "#5f6b7a", "dark": "#a3acb9"},
    "edge": {"light": "#7d8794", "dark": "#8b95a3"},
    "cluster_fills": {
        "light": ("#f5f7fb", "#eaeff7", "#e0e7f2", "#d6dfed"),
        "dark": ("#1f242c", "#262c36", "#2d3440", "#343c4a"),
    },
    "cluster_border": {"light": "#b8c3d4", "dark": "#48526180"},
    "badge": {"light": "#ffd166", "dark": "#b8860b"},
    "overlay": {
        "light": ("#f7fbff", "#deebf7", "#c6dbef", "#9ecae1", "#7fb5dc", "#5a9bd0"),
        "dark": ("#1c2430", "#1f3550", "#24486f", "#2a5d8f", "#3474b0", "#3f8bd0"),
    },
}
# category -> {theme: (fill, border)}
_CATEGORY_COLOURS: Mapping[str, Mapping[str, tuple[str, str]]] = {
    "compute": {"light": ("#d6e6ff", "#4a78c2"), "dark": ("#1f3b66", "#6f9de6")},
    "elementwise": {"light": ("#dcf2d9", "#4f9a4a"), "dark": ("#244a2a", "#6fbf68")},
    "shape": {"light": ("#eeeeee", "#9a9a9a"), "dark": ("#3a3d42", "#8e939a")},
    "reduction": {"light": ("#fde3c8", "#cc7f2e"), "dark": ("#5a3a1a", "#e09a52")},
    "normalization": {"light": ("#eadcf8", "#8a63b8"), "dark": ("#3f2d5a", "#a987d6")},
    "communication": {"light": ("#d2f4f1", "#1f9e93"), "dark": ("#14423f", "#3cc9bc")},
    "io": {"light": ("#fff0b3", "#c9a227"), "dark": ("#5a4a12", "#d9b53c")},
    "param": {"light": ("#f7dede", "#b46a6a"), "dark": ("#5a2e2e", "#cf8787")},
    "module": {"light": ("#ffffff", "#51627a"), "dark": ("#2a303a", "#8aa0be")},
    "other": {"light": ("#e6ebf0", "#8892a0"), "dark": ("#333a44", "#8892a0")},
}


def _palette(theme: str) -> Palette:
    return Palette(
        **{name: values[theme] for name, values in _CANVAS.items()},
        fill={cat: colours[theme][0] for cat, colours in _CATEGORY_COLOURS.items()},
        border={cat: colours[theme][1] for cat, colours in _CATEGORY_COLOURS.items()},
    )


PALETTES: Mapping[str, Palette] = {theme: _palette(theme) for theme in ("light", "dark")}


COMPILE_REGIONS: tuple[str, ...] = ("#1b9e77", "#7570b3", "#d95f02", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#1f78b4")
"""Border of the ops each torch.compile graph ran (``compile_report``), by graph index, cycled;
readable on both themes."""


def legend_graphs(count: int) -> tuple[list[tuple[int, str]], int]:
    """The compiled graphs a legend draws a swatch for, as (index, colour), and how many more
    it only counts ("… N more"): past one swatch per colour the colours repeat, and a
    document may claim any number of graphs."""
    shown = max(0, min(count, len(COMPILE_REGIONS)))
    return [(g, COMPILE_REGIONS[g]) for g in range(shown)], max(0, count - shown)


EAGER_REGION = "#9aa0a6"
"""Border of the ops that ran eagerly between compiled graphs."""
GRAPH_BREAK = "#c2185b"
"""Edges that cross a graph break."""
DECISION = "#fff3c4"
"""Fill of the diamond that marks where Python read a value to decide (an ``if``, a ``break``)."""
DECISION_BORDER = "#b8860b"
"""Its border and the dotted line joining it to the op it read."""
BACKWARD = "#8e44ad"
"""Dashed border of backward ops and of the backward part, and of the edges that carry a
saved forward tensor into it (``trace(backward=True)``); readable on both themes."""


LEAF_MODULE_PRIORITY: tuple[str, ...] = ("compute", "normalization", "reduction", "elementwise", "shape", "other")
"""Which of its ops' categories colours a closed module that holds no other module."""


_NORM_CLASS = re.compile(r"Norm(\d+d)?$")
"""``LayerNorm``, ``LlamaRMSNorm``, ``T5LayerNorm``, ``BatchNorm2d``: a normalization whatever ops it is made of."""


def leaf_module_category(op_categories: Iterable[str], class_name: str = "") -> str:
    """The colour category of a closed leaf module (a ``Conv2d`` is ``compute``); a norm by its
    class (``LlamaRMSNorm`` is made of ``pow`` and ``mean``, and is a normalization, as
    ``LayerNorm``); ``module`` without ops."""
    present = set(op_categories)
    if present and _NORM_CLASS.search(class_name):
        return "normalization"
    return next((c for c in LEAF_MODULE_PRIORITY if c in present), "module")
