"""One adapter per graph tool, so the harness drives them all the same way.

Each adapter runs the tool as its documentation shows, with its default
settings, except where a default would do work the others do not or hide the
graph: torchlens saves every activation unless told ``save=None`` (we ask for
the graph only), and torchview stops expanding modules at ``depth=3`` (we ask
for every level, as the other tools show; its depths 2 and 3 also crash on
GPT-2 under transformers 5).
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import torch

_DOT_EDGE = re.compile(r"^\s*(\"[^\"]*\"|[\w.:]+)\s*->", re.M)
_DOT_NODE = re.compile(r"^\s*(\"[^\"]*\"|[\w.:]+)\s*\[", re.M)
_DOT_DEFAULTS = {"graph", "node", "edge"}


class NotSupported(Exception):
    """The tool has no such output (torchinfo draws no diagram, for instance)."""


def dot_size(source: str) -> tuple[int, int]:
    """(nodes, edges) declared in a Graphviz DOT document."""
    nodes = {m.group(1) for m in _DOT_NODE.finditer(source) if m.group(1) not in _DOT_DEFAULTS}
    return len(nodes), len(_DOT_EDGE.findall(source))


def first_tensor(value: Any) -> torch.Tensor:
    """The first tensor in a model output (``logits``, ``last_hidden_state``...)."""
    if isinstance(value, torch.Tensor):
        return value
    if hasattr(value, "to_tuple"):
        value = value.to_tuple()
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        for item in value:
            try:
                return first_tensor(item)
            except TypeError:
                continue
    raise TypeError(f"no tensor in output of type {type(value).__name__}")


def model_device(model: torch.nn.Module) -> str:
    for p in model.parameters():
        return str(p.device)
    return "cpu"


class Tool:
    name = ""
    module = ""
    needs_grad = False
    """Its graph comes from autograd, so it cannot run under ``torch.no_grad()``."""
    size_unit = "nodes/edges"

    def installed(self) -> bool:
        return importlib.util.find_spec(self.module) is not None

    def version(self) -> str:
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version(self.name)
        except PackageNotFoundError:
            return "?"

    def capture(self, model: torch.nn.Module, args: tuple, kwargs: dict, workdir: Path) -> Any:
        raise NotImplementedError

    def size(self, handle: Any) -> tuple[int, int | None]:
        raise NotImplementedError

    def svg(self, handle: Any, path: Path) -> None:
        raise NotSupported("no SVG output")

    def html(self, handle: Any, path: Path) -> None:
        raise NotSupported("no HTML output")

    def extra_stages(self, handle: Any, workdir: Path) -> dict[str, Any]:
        """Further outputs worth timing on big graphs, name -> zero-argument callable."""
        return {}


class TorchAtlas(Tool):
    name = module = "torchatlas"

    def version(self) -> str:
        import torchatlas  # from the checkout's src/, which need not be pip-installed

        return torchatlas.__version__

    def capture(self, model, args, kwargs, workdir):
        import torchatlas

        return torchatlas.trace(model, args, kwargs)

    def size(self, g):
        return len(g.ir.nodes), sum(len(n.inputs) for n in g.ir.nodes)

    # The renderers are pure functions of the IR; they are called directly so the
    # benchmark times them alone, without the facade's file handling.
    def svg(self, g, path):
        from torchatlas._render._dot import render

        path.write_bytes(render(g.ir, None, "svg"))

    def html(self, g, path):
        from torchatlas._render._html import to_html

        path.write_text(to_html(g.ir), encoding="utf-8")

    def extra_stages(self, g, workdir):
        from torchatlas._passes import analyze

        return {"passes": lambda: analyze(g.ir), "json": g.to_json, "tree": g.tree}


class TorchAtlasRunTime(TorchAtlas):
    """``trace`` with one of its run-time options: what ``stats=``, ``save=`` or ``profile=`` cost."""

    def __init__(self, option: str, value: Any) -> None:
        self.name, self.option, self.value = f"torchatlas-{option}", option, value

    def capture(self, model, args, kwargs, workdir):
        import torchatlas

        return torchatlas.trace(model, args, kwargs, **{self.option: self.value})


RUN_TIME_TOOLS = [TorchAtlasRunTime("stats", True), TorchAtlasRunTime("save", "*"), TorchAtlasRunTime("profile", True)]
"""The run-time options, each timed like a tool (``bench/bench_runtime.py``); ``save="*"`` keeps
every module call's output, the most memory a save can ask for."""

FULL_DEPTH = 99


class TorchView(Tool):
    name = module = "torchview"

    def capture(self, model, args, kwargs, workdir):
        import torchview

        data = list(args) if args else kwargs
        extra = kwargs if args else {}
        return torchview.draw_graph(model, input_data=data, device=model_device(model), depth=FULL_DEPTH, **extra)

    def size(self, cg):
        return dot_size(cg.visual_graph.source)

    def svg(self, cg, path):
        path.write_bytes(cg.visual_graph.pipe(format="svg"))


class TorchLens(Tool):
    name = module = "torchlens"

    def capture(self, model, args, kwargs, workdir):
        import torchlens

        return torchlens.trace(model, list(args), input_kwargs=kwargs or None, save=None)

    def size(self, trace):
        return trace.num_layers, trace.num_edges

    def svg(self, trace, path):
        trace.draw(vis_outpath=str(path.with_suffix("")), vis_fileformat="svg", vis_save_only=True)


class TorchInfo(Tool):
    name = module = "torchinfo"
    size_unit = "rows"

    def capture(self, model, args, kwargs, workdir):
        from torchinfo import summary

        # Without input_data torchinfo lists modules without running the model; a dict runs it as kwargs.
        data = list(args) if args else kwargs
        extra = kwargs if args else {}
        return summary(model, input_data=data, verbose=0, device=model_device(model), **extra)

    def size(self, stats):
        return len(stats.summary_list), None


class TorchViz(Tool):
    name = module = "torchviz"
    needs_grad = True

    def capture(self, model, args, kwargs, workdir):
        from torchviz import make_dot

        out = first_tensor(model(*args, **kwargs))
        return make_dot(out, params=dict(model.named_parameters()))

    def size(self, dot):
        return dot_size(dot.source)

    def svg(self, dot, path):
        path.write_bytes(dot.pipe(format="svg"))


class TorchVista(Tool):
    """Its page is drawn by JavaScript in the browser, so capture already writes the HTML."""

    name = module = "torchvista"

    def capture(self, model, args, kwargs, workdir):
        import torchvista

        if kwargs:
            raise NotSupported("trace_model takes positional inputs only")
        path = workdir / "torchvista.html"
        torchvista.trace_model(model, args[0] if len(args) == 1 else args, export_format="html", export_path=str(path))
        return path

    def size(self, path):
        page = path.read_text(encoding="utf-8")
        found = re.search(r"const adj_list = (.*?);\n", page)
        if found is None:
            raise ValueError("torchvista page has no adj_list")
        adj = json.loads(found.group(1))
        return len(adj), sum(len(v.get("edges", [])) for v in adj.values())


TOOLS: dict[str, Tool] = {
    t.name: t for t in [TorchAtlas(), TorchView(), TorchLens(), TorchInfo(), TorchViz(), TorchVista(), *RUN_TIME_TOOLS]
}
