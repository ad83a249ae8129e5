"""The graph IR: what one recorded forward pass computed.

Modelled on torch.fx's ``Node``: few fields, a fixed set of kinds, edges as
references (node ids), and an open ``meta`` dict for analyses. Every dataclass
field is also the JSON key it is saved under, so ``to_dict`` is mechanical.

This module imports nothing from the rest of the package: capture builds it,
passes read it, renderers draw it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any, Literal

FORMAT = "torchatlas-graph"
VERSION = 1

NodeKind = Literal["input", "param", "buffer", "constant", "op", "output"]
NODE_KINDS: tuple[str, ...] = ("input", "param", "buffer", "constant", "op", "output")


class GraphFormatError(ValueError):
    """A graph document is malformed, truncated or from an unknown version."""


@dataclass(frozen=True, slots=True)
class TensorMeta:
    """Shape, dtype and device of one tensor value."""

    shape: tuple[int, ...]
    """Sizes; symbolic sizes are saved as strings."""
    dtype: str
    """``torch.float32`` is saved as ``"float32"``."""
    device: str
    """``"cpu"``, ``"cuda:0"``, ``"meta"``..."""

    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s if isinstance(s, int) else 1
        return n


@dataclass(frozen=True, slots=True)
class Source:
    """The user source line that made a call (torch's own frames skipped)."""

    file: str
    line: int
    code: str = ""
    """The stripped text of that line, so a saved graph still shows it."""

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(slots=True)
class Scope:
    """One ``nn.Module`` call."""

    id: str
    """``"s0"``, ``"s1"``... in call order."""
    parent: str | None
    """The scope that was active when this call began; ``None`` for the root."""
    path: str
    """Qualified module name from the root, as in ``named_modules()``; ``""`` is the root."""
    cls: str
    """``type(m).__module__ + "." + type(m).__qualname__``; saved under the key ``class``."""
    call: int
    """How many earlier calls of the same module this pass made."""
    source: Source | None = None
    """Where the module was called from."""
    outputs: list[str] = field(default_factory=list)
    """Ids of the nodes whose values the call returned."""
    meta: dict[str, Any] = field(default_factory=dict)
    """Open slot for analyses (parameter counts, FLOPs, fold groups...)."""

    @property
    def class_name(self) -> str:
        return self.cls.rsplit(".", 1)[-1]

    @property
    def label(self) -> str:
        """``layer1.0.conv1 (Conv2d)``, with ``#k`` for repeated calls."""
        name = self.path or "<root>"
        if self.call:
            name += f"#{self.call}"
        return f"{name} ({self.class_name})"


@dataclass(slots=True)
class Node:
    """One value-producing event: an input, a parameter, an op or an output."""

    id: str
    """``"n0"``, ``"n1"``... in execution order."""
    kind: str
    """One of :data:`NODE_KINDS`."""
    scope: str
    """Innermost module call active when the node was recorded."""
    inputs: list[str] = field(default_factory=list)
    """Ids of the nodes whose tensor results this node read, in argument order."""
    input_slots: list[int] = field(default_factory=list)
    """For each input, which of that node's ``outputs`` was read (0 for single-output ops)."""
    target: str | None = None
    """On ``op`` nodes, a stable name of the callable, e.g. ``torch.conv2d``."""
    path: str | None = None
    """Where the value lives: ``initial_conv.weight``, ``args[0]``, ``output['logits']``."""
    outputs: list[TensorMeta] = field(default_factory=list)
    """The tensor values this node produced (for writes: the tensor written)."""
    args: list[Any] = field(default_factory=list)
    """Positional arguments as JSON; a tensor argument is ``{"tensor": i}``, ``inputs[i]``."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments, encoded as ``args``."""
    inplace: bool = False
    """True when the op wrote into one of its inputs (``add_``, ``x[i] = v``, ``out=``)."""
    source: Source | None = None
    """User source line that ran the op."""
    name: str | None = None
    """Python variable the result was assigned to in that line, where recoverable."""
    meta: dict[str, Any] = field(default_factory=dict)
    """Open slot for analyses (FLOPs, bytes, dead code...)."""


@dataclass
class GraphIR:
    """A whole capture: scopes in call order, nodes in execution order."""

    scopes: list[Scope]
    nodes: list[Node]
    meta: dict[str, Any] = field(default_factory=dict)
    """Graph-level facts: capture level, torch version, model class, analyses."""

    def __post_init__(self) -> None:
        self._node_index = {n.id: n for n in self.nodes}
        self._scope_index = {s.id: s for s in self.scopes}

    def node(self, node_id: str) -> Node:
        return self._node_index[node_id]

    def scope(self, scope_id: str) -> Scope:
        return self._scope_index[scope_id]

    def ops(self) -> Iterator[Node]:
        return (n for n in self.nodes if n.kind == "op")

    def users(self) -> dict[str, list[str]]:
        """Node id -> ids of the nodes that read it, in execution order."""
        out: dict[str, list[str]] = {n.id: [] for n in self.nodes}
        for n in self.nodes:
            for i in dict.fromkeys(n.inputs):
                out[i].append(n.id)
        return out

    def children(self) -> dict[str | None, list[str]]:
        """Scope id -> ids of its child scopes, in call order (``None`` -> roots)."""
        out: dict[str | None, list[str]] = {s.id: [] for s in self.scopes}
        out.setdefault(None, [])
        for s in self.scopes:
            out[s.parent].append(s.id)
        return out

    def ancestry(self, scope_id: str) -> list[str]:
        """Scope ids from the root down to ``scope_id``."""
        chain: list[str] = []
        cur: str | None = scope_id
        while cur is not None:
            chain.append(cur)
            cur = self._scope_index[cur].parent
        return chain[::-1]

    def depth(self, scope_id: str) -> int:
        return len(self.ancestry(scope_id)) - 1

    def value_meta(self, node_id: str, slot: int = 0) -> TensorMeta | None:
        outs = self._node_index[node_id].outputs
        return outs[slot] if slot < len(outs) else None

    def with_meta(
        self,
        nodes: dict[str, dict[str, Any]] | None = None,
        scopes: dict[str, dict[str, Any]] | None = None,
        graph: dict[str, Any] | None = None,
    ) -> GraphIR:
        """A new graph whose meta dicts are this one's merged with the given ones.

        Passes use this to return their results instead of mutating their input.
        """
        nodes, scopes = nodes or {}, scopes or {}
        new_nodes = [replace(n, meta={**n.meta, **nodes[n.id]}) if n.id in nodes else n for n in self.nodes]
        new_scopes = [replace(s, meta={**s.meta, **scopes[s.id]}) if s.id in scopes else s for s in self.scopes]
        return GraphIR(scopes=new_scopes, nodes=new_nodes, meta={**self.meta, **(graph or {})})

    # -- JSON ---------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "meta": _jsonable(self.meta),
            "scopes": [_scope_to_dict(s) for s in self.scopes],
            "nodes": [_node_to_dict(n) for n in self.nodes],
        }

    def to_json(self, indent: int | None = None) -> str:
        # ASCII escapes keep any name (even a lone surrogate) valid in a UTF-8 file.
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=True, allow_nan=False)

    @classmethod
    def from_dict(cls, doc: Any) -> GraphIR:
        return _graph_from_dict(doc)


def _jsonable(value: Any) -> Any:
    """Meta values are JSON already by convention; tuples become lists."""
    return json.loads(json.dumps(value, default=str, allow_nan=False))


def _source_to_dict(src: Source | None) -> dict[str, Any] | None:
    return None if src is None else {"file": src.file, "line": src.line, "code": src.code}


def _meta_to_dict(m: TensorMeta) -> dict[str, Any]:
    return {"shape": list(m.shape), "dtype": m.dtype, "device": m.device}


def _scope_to_dict(s: Scope) -> dict[str, Any]:
    d: dict[str, Any] = {
        "id": s.id,
        "parent": s.parent,
        "path": s.path,
        "class": s.cls,
        "call": s.call,
        "source": _source_to_dict(s.source),
        "outputs": list(s.outputs),
    }
    if s.meta:
        d["meta"] = _jsonable(s.meta)
    return d


def _node_to_dict(n: Node) -> dict[str, Any]:
    d: dict[str, Any] = {
        "id": n.id,
        "kind": n.kind,
        "scope": n.scope,
        "inputs": list(n.inputs),
        "input_slots": list(n.input_slots),
        "outputs": [_meta_to_dict(m) for m in n.outputs],
    }
    if n.target is not None:
        d["target"] = n.target
    if n.path is not None:
        d["path"] = n.path
    if n.args:
        d["args"] = n.args
    if n.kwargs:
        d["kwargs"] = n.kwargs
    if n.inplace:
        d["inplace"] = True
    if n.source is not None:
        d["source"] = _source_to_dict(n.source)
    if n.name is not None:
        d["name"] = n.name
    if n.meta:
        d["meta"] = _jsonable(n.meta)
    return d


# -- loading -----------------------------------------------------------------


def _require(cond: bool, msg: str) -> None:
    if not cond:
        raise GraphFormatError(msg)


def _load_source(raw: Any, where: str) -> Source | None:
    if raw is None:
        return None
    _require(isinstance(raw, dict), f"{where}.source must be an object")
    try:
        return Source(str(raw["file"]), _count(raw["line"], f"{where}.source.line"), str(raw.get("code", "")))
    except (KeyError, TypeError, ValueError, OverflowError) as e:
        raise GraphFormatError(f"{where}.source is malformed: {e}") from None


def _load_meta(raw: Any, where: str) -> TensorMeta:
    _require(isinstance(raw, dict), f"{where} must be an object")
    shape = raw.get("shape")
    _require(isinstance(shape, list), f"{where}.shape must be a list")
    _require(
        all(isinstance(d, (int, str)) and not isinstance(d, bool) for d in shape),
        f"{where}.shape must hold integers (or symbolic sizes as strings)",
    )
    return TensorMeta(tuple(shape), _opt_str(raw.get("dtype", ""), f"{where}.dtype") or "", _opt_str(raw.get("device", ""), f"{where}.device") or "")


def _count(value: Any, where: str) -> int:
    _require(isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63, f"{where} must be a non-negative integer")
    return value


def _opt_str(value: Any, where: str) -> str | None:
    _require(value is None or isinstance(value, str), f"{where} must be a string")
    return value


def _obj(value: Any, where: str) -> dict[str, Any]:
    _require(isinstance(value, dict), f"{where} must be an object")
    return dict(value)


def _list(value: Any, where: str) -> list[Any]:
    _require(isinstance(value, list), f"{where} must be a list")
    return list(value)


def _graph_from_dict(doc: Any) -> GraphIR:
    try:
        return _parse_graph(doc)
    except GraphFormatError:
        raise
    except (TypeError, ValueError, OverflowError, AttributeError, RecursionError) as e:
        raise GraphFormatError(f"malformed graph document: {type(e).__name__}: {e}") from None


def _parse_graph(doc: Any) -> GraphIR:
    _require(isinstance(doc, dict), "graph document must be a JSON object")
    _require(doc.get("format") == FORMAT, f"not a torchatlas graph (format={doc.get('format')!r})")
    version = doc.get("version")
    _require(isinstance(version, int), "graph document has no integer 'version'")
    _require(
        version <= VERSION,
        f"graph document is version {version}; this torchatlas reads up to version {VERSION} (upgrade torchatlas)",
    )
    raw_scopes, raw_nodes = doc.get("scopes"), doc.get("nodes")
    _require(isinstance(raw_scopes, list), "graph document has no 'scopes' list")
    _require(isinstance(raw_nodes, list), "graph document has no 'nodes' list")

    scopes: list[Scope] = []
    scope_ids: set[str] = set()
    for i, raw in enumerate(raw_scopes):
        where = f"scopes[{i}]"
        _require(isinstance(raw, dict), f"{where} must be an object")
        try:
            sid, parent = _opt_str(raw["id"], f"{where}.id") or "", raw["parent"]
            _require(parent is None or isinstance(parent, str), f"{where}.parent must be a scope id or null")
            _require(parent is None or parent in scope_ids, f"{where}.parent {parent!r} is not an earlier scope")
            scopes.append(
                Scope(
                    id=sid,
                    parent=parent,
                    path=_opt_str(raw["path"], f"{where}.path") or "",
                    cls=_opt_str(raw["class"], f"{where}.class") or "",
                    call=_count(raw["call"], f"{where}.call"),
                    source=_load_source(raw.get("source"), where),
                    outputs=[str(o) for o in _list(raw.get("outputs", []), f"{where}.outputs")],
                    meta=_obj(raw.get("meta", {}), f"{where}.meta"),
                )
            )
        except KeyError as e:
            raise GraphFormatError(f"{where} lacks field {e}") from None
        _require(sid not in scope_ids, f"{where}: duplicate scope id {sid!r}")
        scope_ids.add(sid)

    nodes: list[Node] = []
    node_ids: set[str] = set()
    for i, raw in enumerate(raw_nodes):
        where = f"nodes[{i}]"
        _require(isinstance(raw, dict), f"{where} must be an object")
        try:
            nid, kind, scope = _opt_str(raw["id"], f"{where}.id") or "", raw["kind"], raw["scope"]
            inputs = raw["inputs"]
        except KeyError as e:
            raise GraphFormatError(f"{where} lacks field {e}") from None
        _require(isinstance(kind, str) and kind in NODE_KINDS, f"{where}: unknown kind {kind!r}")
        _require(isinstance(scope, str) and scope in scope_ids, f"{where}: unknown scope {scope!r}")
        _require(isinstance(inputs, list), f"{where}.inputs must be a list")
        for ref in inputs:
            _require(isinstance(ref, str) and ref in node_ids, f"{where}: input {ref!r} is not an earlier node")
        slots = raw.get("input_slots", [0] * len(inputs))
        _require(isinstance(slots, list) and len(slots) == len(inputs), f"{where}.input_slots must match inputs")
        _require(
            all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in slots),
            f"{where}.input_slots must be non-negative integers",
        )
        _require(nid not in node_ids, f"{where}: duplicate node id {nid!r}")
        node_ids.add(nid)
        nodes.append(
            Node(
                id=nid,
                kind=kind,
                scope=scope,
                inputs=[str(r) for r in inputs],
                input_slots=[int(s) for s in slots],
                target=_opt_str(raw.get("target"), f"{where}.target"),
                path=_opt_str(raw.get("path"), f"{where}.path"),
                outputs=[
                    _load_meta(m, f"{where}.outputs[{j}]")
                    for j, m in enumerate(_list(raw.get("outputs", []), f"{where}.outputs"))
                ],
                args=_list(raw.get("args", []), f"{where}.args"),
                kwargs=_obj(raw.get("kwargs", {}), f"{where}.kwargs"),
                inplace=raw.get("inplace", False) is True,
                source=_load_source(raw.get("source"), where),
                name=_opt_str(raw.get("name"), f"{where}.name"),
                meta=_obj(raw.get("meta", {}), f"{where}.meta"),
            )
        )
    for s in scopes:
        for o in s.outputs:
            _require(o in node_ids, f"scope {s.id}: output {o!r} is not a node")
    meta = doc.get("meta", {})
    _require(isinstance(meta, dict), "graph 'meta' must be an object")
    return GraphIR(scopes=scopes, nodes=nodes, meta=dict(meta))
