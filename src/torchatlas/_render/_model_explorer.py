"""Export to Google Model Explorer's graph JSON (``ai-edge-model-explorer``).

The document is one graph collection, ``{"label", "graphs": [graph]}``, which
Model Explorer's built-in JSON loader opens directly. Module calls become
namespaces (``CoolCNN/initial_conv``, ``LlamaModel/layers.0/self_attn``), so
Model Explorer's own collapsible groups follow the module tree; tensor shapes
go in ``outputsMetadata`` under ``tensor_shape`` like its PyTorch adapter
writes them, which is what it prints on edges.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from torchatlas._ir import GraphIR, Scope
from torchatlas._ops import op_name
from torchatlas._render._labels import model_title


def _segment(scope: Scope, parent: Scope | None) -> str:
    """One namespace level: the module's name relative to its caller, ``#k`` for repeated calls."""
    if parent is None:
        name = scope.class_name
    elif parent.path and scope.path.startswith(parent.path + "."):
        name = scope.path[len(parent.path) + 1 :]
    else:
        name = scope.path or scope.class_name
    if scope.call:
        name += f"#{scope.call}"
    # "/" separates namespace levels; a module name containing one must not split.
    return name.replace("/", "∕")


def _namespaces(ir: GraphIR) -> dict[str, str]:
    out: dict[str, str] = {}
    for s in ir.scopes:
        parent = ir.scope(s.parent) if s.parent is not None else None
        own = _segment(s, parent)
        out[s.id] = f"{out[s.parent]}/{own}" if s.parent is not None else own
    return out


def _shape_attr(dtype: str, shape: tuple[Any, ...]) -> str:
    return dtype + json.dumps(list(shape))


def _attrs(pairs: list[tuple[str, Any]]) -> list[dict[str, str]]:
    return [{"key": k, "value": str(v)} for k, v in pairs if v is not None and v != ""]


@dataclass(frozen=True)
class ModelExplorerOptions:
    """Options of the Model Explorer export."""

    title: str | None = None
    """The graph's label; default: the model's class name."""


def model_explorer_json(ir: GraphIR, options: ModelExplorerOptions | None = None) -> str:
    """The export as JSON text, ready to save as ``.json``."""
    return json.dumps(to_model_explorer(ir, (options or ModelExplorerOptions()).title))


def to_model_explorer(ir: GraphIR, title: str | None = None) -> dict[str, Any]:
    """A Model Explorer graph collection for ``ir``; save it as ``.json`` and open it in Model Explorer."""
    namespaces = _namespaces(ir)
    label = title or model_title(ir)
    nodes = []
    for n in ir.nodes:
        scope = ir.scope(n.scope)
        if n.kind == "op":
            node_label = op_name(n.target)
        else:
            node_label = n.path or n.kind
        attrs = _attrs(
            [
                ("kind", n.kind),
                ("target", n.target),
                ("path", n.path),
                ("variable", n.name),
                ("module", scope.path or "<root>"),
                ("module_class", scope.cls),
                ("inplace", "true" if n.inplace else None),
                ("flops", n.meta.get("flops")),
                ("source", f"{n.source.file}:{n.source.line}" if n.source else None),
                ("code", n.source.code if n.source else None),
            ]
        )
        outputs = [
            {
                "id": str(i),
                "attrs": _attrs([("tensor_shape", _shape_attr(m.dtype, m.shape)), ("device", m.device)]),
            }
            for i, m in enumerate(n.outputs)
        ]
        incoming = [
            {"sourceNodeId": src, "sourceNodeOutputId": str(slot), "targetNodeInputId": str(i)}
            for i, (src, slot) in enumerate(n.inputs)
        ]
        nodes.append(
            {
                "id": n.id,
                "label": node_label,
                "namespace": namespaces[n.scope],
                "subgraphIds": [],
                "attrs": attrs,
                "incomingEdges": incoming,
                "outputsMetadata": outputs,
                "inputsMetadata": [],
            }
        )
    group_attrs = {
        namespaces[s.id]: {
            k: str(v)
            for k, v in (
                ("module", s.path or "<root>"),
                ("class", s.cls),
                ("params", s.meta.get("params")),
                ("flops", s.meta.get("flops")),
            )
            if v is not None
        }
        for s in ir.scopes
    }
    return {"label": label, "graphs": [{"id": label, "nodes": nodes, "groupNodeAttributes": group_attrs}]}
