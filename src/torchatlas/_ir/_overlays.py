"""Overlays: the user's own numbers or categories per op or per module call, kept in the graph.

``graph.meta["overlays"]`` maps each overlay's name to ``{"kind": "number" | "category",
"scale": "linear" | "log" | None, "values": {id: value}}``, the ids node ids (``n12``) or
scope ids (``s3``). Every output reads them from there (``docs/format.md``), and
``torchatlas.compare`` writes its errors as one.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from ._graph import GraphIR, Node, Scope

KINDS = ("number", "category")
SCALES = ("linear", "log")


def add_overlay(ir: GraphIR, name: str, values: Mapping[Any, Any] | Iterable[tuple[Any, Any]], kind: str = "number", scale: str | None = None) -> GraphIR:
    """``ir`` with the overlay ``name`` set (replacing one of that name).

    ``values`` maps an op or a module call to its value (a dict, or ``(key, value)`` pairs): the
    key a node or scope id, a module path (``"layers.0.mlp"``: its first call;
    ``"layers.0.mlp#1"``: its second), or in pairs a ``Node`` or ``Scope``. Numbers must be
    finite; a category is any text.
    """
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"torchatlas: an overlay's name must be non-empty text, not {name!r}")
    if kind not in KINDS:
        raise ValueError(f"torchatlas: overlay {name!r}: kind must be 'number' or 'category', not {kind!r}")
    if scale is None:
        scale = "linear" if kind == "number" else None
    if kind == "number" and scale not in SCALES:
        raise ValueError(f"torchatlas: overlay {name!r}: scale must be 'linear' or 'log', not {scale!r}")
    if kind == "category" and scale is not None:
        raise ValueError(f"torchatlas: overlay {name!r}: a category has no scale (got {scale!r})")
    paths = _paths(ir)
    resolved: dict[str, Any] = {}
    for key, value in values.items() if isinstance(values, Mapping) else values:
        where = _resolve(ir, key, paths)
        if where is None:
            raise ValueError(f"torchatlas: overlay {name!r}: {key!r} is no op, module call or module path of this graph")
        resolved[where] = _checked(name, key, value, kind)
    overlays = dict(ir.meta.get("overlays") or {})
    overlays[name] = {"kind": kind, "scale": scale, "values": resolved}
    return replace(ir, meta={**ir.meta, "overlays": overlays})


def overlays(ir: GraphIR) -> dict[str, dict[str, Any]]:
    """The graph's overlays by name (empty when it has none)."""
    found = ir.meta.get("overlays")
    return found if isinstance(found, dict) else {}


def _paths(ir: GraphIR) -> dict[str, str]:
    paths: dict[str, str] = {}
    for s in ir.scopes:
        paths[s.path + (f"#{s.call}" if s.call else "")] = s.id
    return paths


def _resolve(ir: GraphIR, key: Any, paths: dict[str, str]) -> str | None:
    if isinstance(key, (Node, Scope)):
        key = key.id
    if not isinstance(key, str):
        return None
    if ir.has_node(key) or ir.has_scope(key):
        return key
    return paths.get(key)


def _checked(name: str, key: Any, value: Any, kind: str) -> Any:
    if kind == "category":
        return str(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"torchatlas: overlay {name!r}: the value of {key!r} must be a finite number, not {value!r}")
    return float(value)


def check_overlays(value: Any, where: str, node_ids: set[str], scope_ids: set[str]) -> str | None:
    """Why a loaded document's overlays are malformed, or None."""
    if not isinstance(value, dict):
        return f"{where} must be an object"
    for name, entry in value.items():
        if not isinstance(entry, dict) or entry.get("kind") not in KINDS or not isinstance(entry.get("values"), dict):
            return f"{where}.{name} must have kind 'number' or 'category' and an object of values"
        if entry["kind"] == "number" and entry.get("scale") not in SCALES:
            return f"{where}.{name}.scale must be 'linear' or 'log'"
        for key, v in entry["values"].items():
            if key not in node_ids and key not in scope_ids:
                return f"{where}.{name}: {key!r} is no node or scope of this graph"
            if entry["kind"] == "number" and (isinstance(v, bool) or not isinstance(v, (int, float))):
                return f"{where}.{name}.{key} must be a number"
            if entry["kind"] == "category" and not isinstance(v, str):
                return f"{where}.{name}.{key} must be text"
    return None
