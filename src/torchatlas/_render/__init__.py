"""Renderers: pure functions of an analysed ``GraphIR`` and an options dataclass.

:data:`RENDERERS` is the one list of output formats; ``Graph.view``, the
``Graph`` shortcuts (``tree``, ``render``, ``to_html``...) and the CLI's
``--format`` all read it. A new format is one module and one line here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from torchatlas._ir import GraphIR

from ._decisions import decision_table
from ._diff_page import diff_graph_page, diff_page
from ._dot import MAX_DOT_ELEMENTS, DotOptions, diagram_size, image_format, to_dot
from ._dot import render as render_dot
from ._graphml import GraphmlOptions, graph_records, to_graphml
from ._graphviz import GraphvizNotFoundError, responsive_svg
from ._html import HtmlOptions, ViewerBundleMissing, notebook_html, ranks_page, to_html, viewer_bundle_built
from ._mermaid import MermaidOptions, to_mermaid
from ._model_explorer import ModelExplorerOptions, model_explorer_json
from ._model_explorer_data import model_explorer_node_data
from ._ranks import differences_text, hang_report, ranks_summary, schedule_text
from ._summary import SummaryOptions, summary
from ._tree import TreeOptions, render_tree


@dataclass(frozen=True)
class JsonOptions:
    """Options of the graph document."""

    indent: int | None = 1
    """Spaces per nesting level; None writes one line."""


def _graph_json(ir: GraphIR, options: JsonOptions) -> str:
    return ir.to_json(indent=options.indent)


@dataclass(frozen=True)
class Renderer:
    """One output format."""

    render: Callable[[GraphIR, Any], str | bytes]
    """``render(ir, options)``: the output, text or bytes."""
    options: type
    """The options dataclass ``render`` takes."""
    file_name: str
    """The file it becomes under ``torchatlas --out-dir``."""
    text: bool = True
    """Text a terminal can show (printed by the CLI without ``-o``)."""


class Formats(dict[str, Renderer]):
    """Every output format by name (``tree``, ``json``, ``summary``, ``dot``, ``svg``, ``png``, ``pdf``,
    ``html``, ``model-explorer``, ``mermaid``, ``graphml``): what ``Graph.view`` and the CLI's ``--format`` accept."""


RENDERERS = Formats({
    "tree": Renderer(render_tree, TreeOptions, "tree.txt"),
    "json": Renderer(_graph_json, JsonOptions, "graph.json"),
    "summary": Renderer(summary, SummaryOptions, "summary.txt"),
    "dot": Renderer(to_dot, DotOptions, "graph.dot"),
    "svg": Renderer(partial(render_dot, fmt="svg"), DotOptions, "graph.svg", text=False),
    "png": Renderer(partial(render_dot, fmt="png"), DotOptions, "graph.png", text=False),
    "pdf": Renderer(partial(render_dot, fmt="pdf"), DotOptions, "graph.pdf", text=False),
    "html": Renderer(to_html, HtmlOptions, "graph.html", text=False),
    "model-explorer": Renderer(model_explorer_json, ModelExplorerOptions, "model_explorer.json"),
    "mermaid": Renderer(to_mermaid, MermaidOptions, "graph.mmd"),
    "graphml": Renderer(to_graphml, GraphmlOptions, "graph.graphml"),
})
"""Format name -> renderer, in the order ``--out-dir`` writes them."""

__all__ = [
    "MAX_DOT_ELEMENTS",
    "RENDERERS",
    "DotOptions",
    "Formats",
    "GraphmlOptions",
    "GraphvizNotFoundError",
    "HtmlOptions",
    "JsonOptions",
    "MermaidOptions",
    "ModelExplorerOptions",
    "Renderer",
    "SummaryOptions",
    "TreeOptions",
    "ViewerBundleMissing",
    "decision_table",
    "differences_text",
    "schedule_text",
    "diagram_size",
    "diff_graph_page",
    "diff_page",
    "hang_report",
    "graph_records",
    "image_format",
    "model_explorer_node_data",
    "notebook_html",
    "ranks_page",
    "ranks_summary",
    "render_dot",
    "responsive_svg",
    "viewer_bundle_built",
]
