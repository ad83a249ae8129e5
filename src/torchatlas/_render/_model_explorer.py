"""Export to Google Model Explorer's graph JSON (``ai-edge-model-explorer``).

The document is one graph collection, ``{"label", "graphs": [graph]}``, which
Model Explorer's built-in JSON loader opens directly. Module calls become
namespaces (``initial_conv``, ``layers.0/self_attn``), so Model Explorer's own
collapsible groups follow the module tree and it opens on the model's top level
(the model's own call is the graph, not one group around everything); tensor
shapes go in ``outputsMetadata`` under ``tensor_shape`` like its PyTorch adapter
writes them, which is what it prints on edges.

A value read in many module calls (rotary ``cos``/``sin`` in every decoder layer)
keeps its real edge into the first of them; in each other call a small ``↪ rotary_emb``
node stands for it, named as the diagram's and the page's stand-ins, so Model Explorer does
not route one long edge per layer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar

from torchatlas._ir import GraphIR, Ref, Scope
from torchatlas._view import (
    LOCAL_KINDS,
    ViewOptions,
    arguments_text,
    backward_apart,
    call_holding,
    dominant_dtype,
    far_name,
    model_title,
    op_display,
    overlay_marks,
    stand_in_reads,
    value_words,
)

from ._model_explorer_data import overlay_attrs


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
    """Scope id -> namespace; the model's own call is ``""``, the graph's top level."""
    out: dict[str, str] = {}
    for s in ir.scopes:
        if s.parent is None:
            out[s.id] = ""
            continue
        own = _segment(s, ir.scope(s.parent))
        out[s.id] = f"{out[s.parent]}/{own}" if out[s.parent] else own
    return out


def _broadcast_stand_ins(ir: GraphIR) -> dict[tuple[Ref, str], str]:
    """(value, reading node) -> the call whose namespace holds the value's stand-in node, for
    the reads the one far rule draws as stand-ins (``_view.stand_in_reads``: far, or a value
    read in ``BROADCAST_CALLS`` or more calls, all but the first), as the diagram and the page
    draw them. Model Explorer opens every call, so no run is folded."""
    chains = {s.id: ir.ancestry(s.id) for s in ir.scopes}
    out: dict[tuple[Ref, str], str] = {}
    for reader_id, position in stand_in_reads(ir, (), LOCAL_KINDS):
        n = ir.node(reader_id)
        ref = n.inputs[position]
        src = ir.node(ref)
        call = call_holding(chains[n.scope], chains[src.scope])
        if n.kind == "op" and src.kind not in LOCAL_KINDS and call is not None:  # read inside a call the producer is not in
            out[(ref, n.id)] = call
    return out


def _attrs(pairs: list[tuple[str, Any]]) -> list[dict[str, str]]:
    return [{"key": k, "value": str(v)} for k, v in pairs if v is not None and v != ""]


@dataclass(frozen=True)
class ModelExplorerOptions(ViewOptions):
    """What the Model Explorer export holds; every field is also a keyword of ``Graph.to_model_explorer``.

    It hides the node kinds every output hides (``show_params``, ``show_constants``). Model
    Explorer lays the graph out and opens module namespaces itself, so the fields about what is
    drawn open, folded or which way are refused (``UNHONOURED``); it draws every call of a run:
    ``fold_repeats`` is False."""

    UNHONOURED: ClassVar[dict[str, str]] = {
        "depth": "Model Explorer opens and closes module namespaces itself",
        "fold_repeats": "Model Explorer draws every call of a run, each in its namespace",
        "expand_leaf_modules": "Model Explorer opens a leaf module's namespace on a click, as any call's",
        "direction": "Model Explorer lays the graph out top to bottom itself",
    }

    fold_repeats: bool = False

    title: str | None = None
    """The graph's label; default: the model's class name."""


def model_explorer_json(ir: GraphIR, options: ModelExplorerOptions | None = None) -> str:
    """The export as JSON text, ready to save as ``.json``."""
    return json.dumps(to_model_explorer(ir, options))


def to_model_explorer(ir: GraphIR, options: ModelExplorerOptions | None = None) -> dict[str, Any]:
    """A Model Explorer graph collection for ``ir``; save it as ``.json`` and open it in Model Explorer.
    A ``backward=True`` graph's backward ops sit apart, in a ``backward`` namespace, as in the diagram."""
    options = options or ModelExplorerOptions()
    ir = backward_apart(ir)
    namespaces = _namespaces(ir)
    model = model_title(ir)
    label = options.title or model
    stand_ins = _broadcast_stand_ins(ir)
    dominant = dominant_dtype(ir)
    hidden = options.hidden_kinds()
    marks = overlay_marks(ir)
    nodes = []
    made: set[str] = set()
    for n in ir.nodes:
        if n.kind in hidden:
            continue
        scope = ir.scope(n.scope)
        node_label = op_display(n) if n.kind == "op" else value_words(ir, n, dominant).title  # the diagram's
        attrs = _attrs(
            [
                ("kind", n.kind),
                ("target", n.target),
                ("path", n.path),
                ("variable", n.name),
                ("module", scope.path or "<root>"),
                ("module_class", scope.cls),
                ("inplace", "true" if n.inplace else None),
                ("arguments", arguments_text(n) if n.kind == "op" else None),
                ("flops", n.meta.get("flops")),
                ("source", f"{n.source.file}:{n.source.line}" if n.source else None),
                ("code", n.source.code if n.source else None),
                *overlay_attrs(marks, n.id, False),
            ]
        )
        outputs = [
            {
                "id": str(i),
                "attrs": _attrs([("tensor_shape", m.dtype + json.dumps(list(m.shape))), ("device", m.device)]),
            }
            for i, m in enumerate(n.outputs)
        ]
        incoming = []
        for i, ref in enumerate(n.inputs):
            if ir.node(ref).kind in hidden:
                continue
            source, slot = ref.node, str(ref.slot)
            call = stand_ins.get((ref, n.id))
            if call is not None:
                source, slot = f"ref_{ref.node}_{ref.slot}_{call}", "0"
                if source not in made:
                    made.add(source)
                    nodes.append(_stand_in(ir, ref, source, namespaces[call], model))
            incoming.append({"sourceNodeId": source, "sourceNodeOutputId": slot, "targetNodeInputId": str(i)})
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
                *overlay_attrs(marks, s.id, True),
            )
            if v is not None
        }
        for s in ir.scopes
        if s.parent is not None
    }
    return {"label": label, "graphs": [{"id": label, "nodes": nodes, "groupNodeAttributes": group_attrs}]}


def _stand_in(ir: GraphIR, ref: Ref, node_id: str, namespace: str, model: str) -> dict[str, Any]:
    """A ``↪ stem.act`` node in a reading call for a value drawn in full elsewhere, named as
    the diagram's and the page's stand-ins are (``_view.far_name``)."""
    meta = ir.value_meta(ref)
    shape = [{"id": "0", "attrs": _attrs([("tensor_shape", meta.dtype + json.dumps(list(meta.shape)))])}] if meta else []
    return {
        "id": node_id,
        "label": far_name(ir, ref, model),
        "namespace": namespace,
        "subgraphIds": [],
        "attrs": _attrs([("kind", "reference"), ("refers_to", ref.node), ("slot", ref.slot)]),
        "incomingEdges": [],
        "outputsMetadata": shape,
        "inputsMetadata": [],
    }
