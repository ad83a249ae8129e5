"""Overlays (``graph.overlay``, compare's error) in Model Explorer: each node's and namespace's
values as its attributes, and one overlay as Model Explorer's node data file."""

from __future__ import annotations

from typing import Any

from torchatlas._ir import GraphIR
from torchatlas._view import PALETTES, OverlayMarks, model_title, number_text, overlay_marks


def overlay_attrs(marks: OverlayMarks, item_id: str, inside: bool) -> list[tuple[str, Any]]:
    """``overlay: error`` -> ``0.127``: the node's (or namespace's) value of each overlay."""
    found = []
    for name in marks.names:
        value = marks.value(name, item_id, inside)
        if value is not None:
            found.append((f"overlay: {name}", number_text(value) if marks.entries[name]["kind"] == "number" else value))
    return found


def model_explorer_node_data(ir: GraphIR, name: str | None = None, title: str | None = None) -> dict[str, Any]:
    """One overlay as Model Explorer's node data (load it beside the graph in Model Explorer's
    "node data" panel): ``{graph id: {"results": {node id: {"value": v}}, "gradient": …}}``, the
    graph id the export's. A number overlay colours from the palette's lowest to its highest step."""
    marks = overlay_marks(ir)
    name = marks.fill_name(name)
    if name is None:
        raise ValueError("this graph has no overlay (add one with graph.overlay)")
    entry = marks.entries[name]
    results = {k: {"value": v} for k, v in entry["values"].items() if ir.has_node(k)}
    data: dict[str, Any] = {"results": results}
    if entry["kind"] == "number":
        steps = PALETTES["light"].overlay
        data["gradient"] = [{"stop": 0, "bgColor": steps[0]}, {"stop": 1, "bgColor": steps[-1]}]
    return {(title or model_title(ir)): data}
