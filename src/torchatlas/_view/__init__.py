"""The presentation layer: what every output shows of an analysed graph, decided once.

It sits between the analyses (``_passes``) and the writers (``_render``) and imports
only the floor (``_ir``, ``_ops``, ``_text``). The writers draw from it: the unit
and edge layout of a diagram, the backward part set apart, graph-break anchors,
the words and numbers of every label, and the palettes.
"""

from __future__ import annotations

from ._backward import BACKWARD_SCOPE, backward_apart, backward_groups, backward_ids, forward_part
from ._breaks import (
    break_anchors,
    break_label,
    plain_reason,
    short_reason,
)
from ._labels import (
    LINE_LIMIT,
    arguments_text,
    decision_text,
    decisions,
    dominant_dtype,
    fold_label,
    fold_name,
    input_label,
    model_title,
    op_display,
    read_label,
    read_mark,
    read_outcome,
    relative_name,
    scope_name,
    shape_list,
    shape_text,
    short_source,
)
from ._options import ViewOptions
from ._palette import (
    BACKWARD,
    COMPILE_REGIONS,
    DECISION,
    DECISION_BORDER,
    EAGER_REGION,
    GRAPH_BREAK,
    PALETTES,
    Palette,
    leaf_module_category,
    legend_graphs,
)
from ._units import BROADCAST_CALLS, DotOptions, Edge, Layout, Unit, build_layout, call_holding, fold_runs, rank_pins

__all__ = [
    "BACKWARD",
    "BACKWARD_SCOPE",
    "BROADCAST_CALLS",
    "COMPILE_REGIONS",
    "DECISION",
    "DECISION_BORDER",
    "EAGER_REGION",
    "GRAPH_BREAK",
    "LINE_LIMIT",
    "PALETTES",
    "DotOptions",
    "Edge",
    "Layout",
    "Palette",
    "Unit",
    "ViewOptions",
    "arguments_text",
    "backward_apart",
    "backward_groups",
    "backward_ids",
    "break_anchors",
    "break_label",
    "build_layout",
    "call_holding",
    "decision_text",
    "decisions",
    "dominant_dtype",
    "fold_label",
    "fold_name",
    "fold_runs",
    "forward_part",
    "input_label",
    "leaf_module_category",
    "legend_graphs",
    "model_title",
    "op_display",
    "plain_reason",
    "rank_pins",
    "read_label",
    "read_mark",
    "read_outcome",
    "relative_name",
    "scope_name",
    "shape_list",
    "shape_text",
    "short_reason",
    "short_source",
]
