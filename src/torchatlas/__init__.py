"""torchatlas: the real computation graph of a PyTorch model, from one forward pass."""

import importlib as _importlib
import typing as _typing

from ._ir import GraphBreak, GraphFormatError, GraphIR, Node, Ref, Scope, Source, TensorMeta
from ._render import RENDERERS as FORMATS
from ._render import DotOptions, GraphvizNotFoundError, HtmlOptions, SummaryOptions, TreeOptions, ViewerBundleMissing

if _typing.TYPE_CHECKING:
    from ._api import (
        Graph,
        GraphDiff,
        compile_report,
        diff,
        from_export,
        from_fx,
        load,
        model_device,
        profile,
        random_input,
        trace,
        trace_shapes,
        user_location,
    )
    from ._capture import TraceError, UnsafeArchiveError
    from ._compare_api import Comparison, compare
    from ._ranks import Ranks, load_ranks, merge, trace_ranks

__version__ = "0.1.0"

# The names that need torch are imported on first use, so that `import torchatlas` (and
# `torchatlas --help`, loading a saved graph, rendering) does not pay for importing torch.
_NEEDS_TORCH = {
    "Graph": "_api",
    "GraphDiff": "_api",
    "compile_report": "_api",
    "diff": "_api",
    "from_export": "_api",
    "from_fx": "_api",
    "load": "_api",
    "model_device": "_api",
    "profile": "_api",
    "random_input": "_api",
    "trace": "_api",
    "trace_shapes": "_api",
    "user_location": "_api",
    "TraceError": "_capture",
    "Ranks": "_ranks",
    "load_ranks": "_ranks",
    "merge": "_ranks",
    "trace_ranks": "_ranks",
    "UnsafeArchiveError": "_capture",
    "Comparison": "_compare_api",
    "compare": "_compare_api",
}


def __getattr__(name: str) -> _typing.Any:
    module = _NEEDS_TORCH.get(name)
    if module is None:
        raise AttributeError(f"module 'torchatlas' has no attribute {name!r}")
    value = getattr(_importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "FORMATS",
    "Comparison",
    "DotOptions",
    "Graph",
    "GraphBreak",
    "GraphDiff",
    "GraphFormatError",
    "GraphIR",
    "GraphvizNotFoundError",
    "HtmlOptions",
    "Node",
    "Ranks",
    "Ref",
    "Scope",
    "Source",
    "SummaryOptions",
    "TensorMeta",
    "TraceError",
    "TreeOptions",
    "UnsafeArchiveError",
    "ViewerBundleMissing",
    "__version__",
    "compare",
    "compile_report",
    "diff",
    "from_export",
    "from_fx",
    "load",
    "load_ranks",
    "merge",
    "model_device",
    "profile",
    "random_input",
    "trace",
    "trace_ranks",
    "trace_shapes",
    "user_location",
]
