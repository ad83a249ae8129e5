"""torchatlas: the real computation graph of a PyTorch model, from one forward pass."""

from ._api import Graph, compile_report, diff, from_export, from_fx, load, profile, trace, trace_shapes
from ._capture import TraceError, UnsafeArchiveError
from ._ir import GraphBreak, GraphFormatError, GraphIR, Node, Ref, Scope, Source, TensorMeta
from ._passes import GraphDiff
from ._render import RENDERERS as FORMATS
from ._render import DotOptions, HtmlOptions, SummaryOptions, TreeOptions
from ._render._graphviz import GraphvizNotFoundError

__version__ = "0.1.0"

__all__ = [
    "FORMATS",
    "DotOptions",
    "Graph",
    "GraphBreak",
    "GraphDiff",
    "GraphFormatError",
    "GraphIR",
    "GraphvizNotFoundError",
    "HtmlOptions",
    "Node",
    "Ref",
    "Scope",
    "Source",
    "SummaryOptions",
    "TensorMeta",
    "TraceError",
    "TreeOptions",
    "UnsafeArchiveError",
    "__version__",
    "compile_report",
    "diff",
    "from_export",
    "from_fx",
    "load",
    "profile",
    "trace",
    "trace_shapes",
]
