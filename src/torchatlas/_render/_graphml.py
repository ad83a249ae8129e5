"""The graph as data for graph libraries: nodes and edges with attributes, and GraphML text.

Every IR node is a node (inputs, parameters, ops, outputs: nothing folded or hidden, since a
program reads what the diagram would leave out), every input an op reads an edge. A node's
attributes: ``kind``, ``label`` (as the diagram titles it), ``target``, ``module`` (the call's
path), ``module_class``, ``shapes`` and ``dtypes`` of its outputs, ``flops`` where counted, and
``overlay: <name>`` per overlay value; an edge's ``slot`` (which output it reads) and ``index``
(which argument). ``graph.to_networkx()`` builds a ``networkx.MultiDiGraph`` from the same
records; the GraphML is written with the standard library, so it needs no networkx.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar
from xml.sax.saxutils import quoteattr

from torchatlas._ir import GraphIR
from torchatlas._text import format_shape
from torchatlas._view import ViewOptions, input_label, model_title, op_display, overlay_marks

Attributes = dict[str, str | int | float]


@dataclass(frozen=True)
class GraphmlOptions(ViewOptions):
    """GraphML holds every node: the view options that hide or fold are refused."""

    UNHONOURED: ClassVar[dict[str, str]] = {
        "depth": "GraphML holds every op, for a program to read",
        "expand_leaf_modules": "GraphML holds the ops inside every module",
        "direction": "GraphML has no layout",
        "fold_repeats": "GraphML holds every call of a run",
        "show_params": "GraphML holds parameters and buffers as nodes",
        "show_constants": "GraphML holds constants as nodes",
    }
    fold_repeats: bool = False
    show_params: bool = True
    show_constants: bool = True


def graph_records(ir: GraphIR) -> tuple[list[tuple[str, Attributes]], list[tuple[str, str, Attributes]]]:
    """``(node id, attributes)`` per node and ``(source, target, attributes)`` per read, in order."""
    marks = overlay_marks(ir)
    nodes: list[tuple[str, Attributes]] = []
    edges: list[tuple[str, str, Attributes]] = []
    for n in ir.nodes:
        scope = ir.scope(n.scope)
        label = op_display(n) if n.kind == "op" else (input_label(n.path) if n.kind == "input" else n.path or n.kind)
        attrs: Attributes = {"kind": n.kind, "label": label, "module": scope.path, "module_class": scope.cls}
        if n.target:
            attrs["target"] = n.target
        if n.outputs:
            attrs["shapes"] = "; ".join(format_shape(m.shape) for m in n.outputs)
            attrs["dtypes"] = "; ".join(m.dtype for m in n.outputs)
        flops = n.meta.get("flops")
        if isinstance(flops, int) and not isinstance(flops, bool):
            attrs["flops"] = flops
        for name in marks.names:
            value = marks.value(name, n.id)
            if value is not None:
                attrs[f"overlay: {name}"] = value
        nodes.append((n.id, attrs))
        edges += [(ref.node, n.id, {"slot": ref.slot, "index": i}) for i, ref in enumerate(n.inputs)]
    return nodes, edges


def to_graphml(ir: GraphIR, options: GraphmlOptions | None = None) -> str:
    """GraphML 1.0 text of the analysed ``ir`` (``networkx.read_graphml`` reads it back)."""
    nodes, edges = graph_records(ir)
    keys: dict[tuple[str, str], str] = {}
    for where, records in (("node", [a for _, a in nodes]), ("edge", [a for _, _, a in edges])):
        for attrs in records:
            for name, value in attrs.items():
                kind = "long" if isinstance(value, int) else "double" if isinstance(value, float) else "string"
                if keys.get((where, name), kind) != kind:
                    kind = "string"  # an overlay given numbers and text: text
                keys[(where, name)] = kind
    ids = {key: f"d{i}" for i, key in enumerate(keys)}
    lines = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        '<graphml xmlns="http://graphml.graphdrawing.org/xmlns">',
        *(f'  <key id="{ids[k]}" for="{k[0]}" attr.name={quoteattr(k[1])} attr.type="{t}"/>' for k, t in keys.items()),
        f'  <graph id={quoteattr(model_title(ir))} edgedefault="directed">',
    ]

    def data(where: str, attrs: Attributes) -> str:
        return "".join(f'<data key="{ids[(where, k)]}">{_escape(v)}</data>' for k, v in attrs.items())

    lines += [f"    <node id={quoteattr(i)}>{data('node', a)}</node>" for i, a in nodes]
    lines += [f"    <edge source={quoteattr(s)} target={quoteattr(t)}>{data('edge', a)}</edge>" for s, t, a in edges]
    lines += ["  </graph>", "</graphml>"]
    return "\n".join(lines) + "\n"


def _escape(value: Any) -> str:
    return quoteattr(str(value))[1:-1]
