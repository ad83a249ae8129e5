"""The IR floor: the graph a capture records, and its JSON document.

It imports only the standard library: capture builds it, passes read it,
renderers draw it.
"""

from ._document import FORMAT, GRAPH_FACTS, NODE_FACTS, SCOPE_FACTS, VERSION, graph_from_json
from ._graph import (
    NODE_KINDS,
    READ_KINDS,
    READ_STATEMENTS,
    GraphBreak,
    GraphFormatError,
    GraphIR,
    Node,
    NodeKind,
    PythonRead,
    Ref,
    Scope,
    Source,
    TensorMeta,
)
from ._overlays import add_overlay, overlays

__all__ = [
    "FORMAT",
    "GRAPH_FACTS",
    "NODE_FACTS",
    "NODE_KINDS",
    "READ_KINDS",
    "READ_STATEMENTS",
    "SCOPE_FACTS",
    "VERSION",
    "GraphBreak",
    "GraphFormatError",
    "GraphIR",
    "Node",
    "NodeKind",
    "PythonRead",
    "Ref",
    "Scope",
    "Source",
    "TensorMeta",
    "add_overlay",
    "graph_from_json",
    "overlays",
]
