"""The presentation layer: what every output shows of an analysed graph, decided once.

It sits between the analyses (``_passes``) and the writers (``_render``) and imports
only the floor (``_ir``, ``_ops``, ``_text``). The writers draw from it: the unit
and edge layout of a diagram, the backward part set apart, graph-break anchors,
the words and numbers of every label, and the palettes.
"""

from __future__ import annotations

from ._backward import BACKWARD_SCOPE, backward_apart, backward_groups, backward_ids, forward_part
from ._breaks import break_anchors, break_label, short_reason
from ._labels import (
    LINE_LIMIT,
    arguments_text,
    dominant_dtype,
    fold_label,
    fold_name,
    input_label,
    model_title,
    op_display,
    relative_name,
    scope_name,
    shape_list,
    shape_text,
)
from ._names import ReadingNames, assigned_names, operand_names
from ._options import ViewOptions
from ._page import (
    GraphCounts,
    PageFold,
    ShapeWords,
    call_name,
    graph_counts,
    metric_words,
    nonfinite_words,
    page_folds,
    params_text,
    shape_words,
)
from ._palette import (
    BACKWARD,
    COMPILE_REGIONS,
    EAGER_REGION,
    GRAPH_BREAK,
    PALETTES,
    Palette,
    leaf_module_category,
)
from ._units import BROADCAST_CALLS, DotOptions, Edge, Layout, Unit, build_layout, call_holding, fold_runs, rank_pins

__all__ = [
    "BACKWARD",
    "BACKWARD_SCOPE",
    "BROADCAST_CALLS",
    "COMPILE_REGIONS",
    "EAGER_REGION",
    "GRAPH_BREAK",
    "LINE_LIMIT",
    "PALETTES",
    "DotOptions",
    "Edge",
    "GraphCounts",
    "Layout",
    "PageFold",
    "ReadingNames",
    "Palette",
    "ShapeWords",
    "Unit",
    "ViewOptions",
    "arguments_text",
    "assigned_names",
    "backward_apart",
    "backward_groups",
    "backward_ids",
    "break_anchors",
    "break_label",
    "build_layout",
    "call_name",
    "call_holding",
    "dominant_dtype",
    "fold_label",
    "fold_name",
    "fold_runs",
    "forward_part",
    "graph_counts",
    "input_label",
    "leaf_module_category",
    "metric_words",
    "model_title",
    "nonfinite_words",
    "op_display",
    "operand_names",
    "page_folds",
    "params_text",
    "rank_pins",
    "relative_name",
    "scope_name",
    "shape_list",
    "shape_text",
    "shape_words",
    "short_reason",
]
