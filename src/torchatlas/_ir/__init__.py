"""The IR floor: the graph a capture records, and its JSON document.

It imports only the standard library: capture builds it, passes read it,
renderers draw it.
"""

from ._document import FORMAT, GRAPH_FACTS, NODE_FACTS, SCOPE_FACTS, VERSION, checked, graph_from_json, is_count
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
    read_locally,
)
from ._overlays import add_overlay, overlays
from ._ranks_document import RANKS_FORMAT, ranks_from_json, ranks_to_json

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
    "RANKS_FORMAT",
    "Ref",
    "Scope",
    "Source",
    "TensorMeta",
    "add_overlay",
    "checked",
    "graph_from_json",
    "is_count",
    "overlays",
    "ranks_from_json",
    "ranks_to_json",
    "read_locally",
]
