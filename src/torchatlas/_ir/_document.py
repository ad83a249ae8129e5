"""The graph document: ``GraphIR`` to JSON and back (``docs/format.md`` describes every field).

Loading trusts nothing: every field a renderer reads is checked here, so a document
that loads renders, and anything else raises one ``GraphFormatError`` naming the
field. Facts recorded at capture time (``meta`` keys such as ``error`` or
``stats``) are checked against :data:`NODE_FACTS`, :data:`SCOPE_FACTS` and
:data:`GRAPH_FACTS`; analysis results are not trusted at all (the API drops and
recomputes them); other meta keys are kept as plain JSON that nothing reads.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from ._graph import (
    NODE_KINDS,
    READ_KINDS,
    READ_STATEMENTS,
    GraphFormatError,
    GraphIR,
    Node,
    Ref,
    Scope,
    Source,
    TensorMeta,
)
from ._overlays import check_overlays

FORMAT = "torchatlas-graph"
VERSION = 1

_MAX_INT = 2**63
MAX_ARGUMENT_DEPTH = 32
"""How deeply an op's arguments may nest (a capture records five levels, then a ``repr``)."""


# -- writing -------------------------------------------------------------------


def graph_to_dict(ir: GraphIR) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "version": VERSION,
        "meta": _jsonable(ir.meta),
        "scopes": [_scope_to_dict(s) for s in ir.scopes],
        "nodes": [_node_to_dict(n) for n in ir.nodes],
    }


def graph_to_json(ir: GraphIR, indent: int | None = None) -> str:
    # ASCII escapes keep any name (even a lone surrogate) valid in a UTF-8 file.
    return json.dumps(graph_to_dict(ir), indent=indent, ensure_ascii=True, allow_nan=False)


def _jsonable(value: Any) -> Any:
    """Meta values are JSON already by convention (never NaN: stats store null); tuples become lists."""
    return json.loads(json.dumps(value, default=str, allow_nan=False))


def _source_to_dict(src: Source | None) -> dict[str, Any] | None:
    return None if src is None else {"file": src.file, "line": src.line, "code": src.code}


def _meta_to_dict(m: TensorMeta) -> dict[str, Any]:
    d: dict[str, Any] = {"shape": list(m.shape), "dtype": m.dtype, "device": m.device}
    if m.placements:  # a DTensor
        d["placements"] = list(m.placements)
        d["mesh"] = [[name, size] for name, size in m.mesh]
        d["local_shape"] = None if m.local_shape is None else list(m.local_shape)
    return d


def _scope_to_dict(s: Scope) -> dict[str, Any]:
    d: dict[str, Any] = {
        "id": s.id,
        "parent": s.parent,
        "path": s.path,
        "class": s.cls,
        "call": s.call,
        "source": _source_to_dict(s.source),
        "outputs": [r.node for r in s.outputs],
    }
    if any(r.slot for r in s.outputs):
        d["output_slots"] = [r.slot for r in s.outputs]
    if s.inputs:
        d["inputs"] = [r.node for r in s.inputs]
        if any(r.slot for r in s.inputs):
            d["input_slots"] = [r.slot for r in s.inputs]
    if s.meta:
        d["meta"] = _jsonable(s.meta)
    return d


def _node_to_dict(n: Node) -> dict[str, Any]:
    d: dict[str, Any] = {
        "id": n.id,
        "kind": n.kind,
        "scope": n.scope,
        "inputs": [r.node for r in n.inputs],
        "input_slots": [r.slot for r in n.inputs],
        "outputs": [_meta_to_dict(m) for m in n.outputs],
    }
    if n.shape_inputs:
        d["shape_inputs"] = [r.node for r in n.shape_inputs]
        d["shape_input_slots"] = [r.slot for r in n.shape_inputs]
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


# -- reading ---------------------------------------------------------------------


def graph_from_json(text: str) -> GraphIR:
    """Parse a document's text; NaN, Infinity and over-long numbers are refused like any malformed field."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise GraphFormatError(f"not valid JSON, truncated or corrupt ({e.msg} at line {e.lineno})") from None
    except RecursionError:
        raise GraphFormatError("JSON nested too deeply to be a torchatlas graph") from None
    except ValueError as e:  # a number of more digits than Python converts
        raise GraphFormatError(f"not a usable JSON document ({e})") from None
    return graph_from_dict(doc)


def _reject_non_finite(doc: Any) -> None:
    """Python's JSON reader takes NaN and Infinity; a graph document never holds them."""
    stack: list[tuple[Any, str]] = [(doc, "document")]
    while stack:
        value, where = stack.pop()
        if isinstance(value, float) and not math.isfinite(value):
            raise GraphFormatError(f"{where} holds {value!r}, which JSON does not allow")
        if isinstance(value, dict):
            stack.extend((v, f"{where}.{k}" if where != "document" else str(k)) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(value))


def checked(ir: GraphIR) -> GraphIR:
    """``ir`` as ``load`` would read it back from its document: a graph read from another format
    (a ``.pt2`` file) passes the same checks, so what it renders and saves, ``load`` reads."""
    return graph_from_dict(graph_to_dict(ir))


def graph_from_dict(doc: Any) -> GraphIR:
    try:
        _reject_non_finite(doc)
        return _parse_graph(doc)
    except GraphFormatError:
        raise
    except (TypeError, ValueError, OverflowError, AttributeError, RecursionError) as e:
        raise GraphFormatError(f"malformed graph document: {type(e).__name__}: {e}") from None


def _require(cond: bool, msg: str) -> None:
    if not cond:
        raise GraphFormatError(msg)


def is_count(value: Any) -> bool:
    """A size, index or count a document may hold: an int in [0, 2**63)."""
    return type(value) is int and 0 <= value < _MAX_INT


def _count(value: Any, where: str) -> int:
    _require(is_count(value), f"{where} must be a non-negative integer")
    return value


def _string(value: Any, where: str) -> str:
    _require(isinstance(value, str), f"{where} must be a string")
    return value


def _opt_str(value: Any, where: str) -> str | None:
    return None if value is None else _string(value, where)


def _obj(value: Any, where: str) -> dict[str, Any]:
    _require(isinstance(value, dict), f"{where} must be an object")
    return dict(value)


def _list(value: Any, where: str) -> list[Any]:
    _require(isinstance(value, list), f"{where} must be a list")
    return list(value)


def _number(value: Any, where: str) -> int | float:
    ok = (type(value) is int and abs(value) < _MAX_INT) or (type(value) is float and math.isfinite(value))
    _require(ok, f"{where} must be a finite number")
    return value


def _bool(value: Any, where: str) -> bool:
    _require(isinstance(value, bool), f"{where} must be true or false")
    return value


def _load_source(raw: Any, where: str) -> Source | None:
    if raw is None:
        return None
    raw = _obj(raw, f"{where}.source")
    _require("file" in raw and "line" in raw, f"{where}.source needs file and line")
    return Source(
        _string(raw["file"], f"{where}.source.file"),
        _count(raw["line"], f"{where}.source.line"),
        _string(raw.get("code", ""), f"{where}.source.code"),
    )


def _sizes(value: Any, where: str) -> list[Any]:
    """A shape: counts or symbolic sizes (text), of fewer than 2**63 elements, as torch allows."""
    shape = _list(value, where)
    elements = 1
    for i, size in enumerate(shape):
        if not isinstance(size, str):
            elements *= _count(size, f"{where}[{i}]")
            _require(elements < _MAX_INT, f"{where} holds 2**63 elements or more")
    return shape


def _load_tensor_meta(raw: Any, where: str) -> TensorMeta:
    raw = _obj(raw, where)
    shape = _sizes(raw.get("shape"), f"{where}.shape")
    dtype, device = _string(raw.get("dtype", ""), f"{where}.dtype"), _string(raw.get("device", ""), f"{where}.device")
    if "placements" not in raw:
        return TensorMeta(tuple(shape), dtype, device)
    placements = tuple(_string(p, f"{where}.placements[{i}]") for i, p in enumerate(_list(raw["placements"], f"{where}.placements")))
    mesh = []
    for i, dim in enumerate(_list(raw.get("mesh", []), f"{where}.mesh")):
        pair = _list(dim, f"{where}.mesh[{i}]")
        if len(pair) != 2:
            raise GraphFormatError(f"{where}.mesh[{i}]: expected [name, size]")
        mesh.append((_string(pair[0], f"{where}.mesh[{i}][0]"), _count(pair[1], f"{where}.mesh[{i}][1]")))
    local = raw.get("local_shape")
    if local is not None:
        local = _sizes(local, f"{where}.local_shape")
    return TensorMeta(tuple(shape), dtype, device, placements, tuple(mesh), None if local is None else tuple(local))


def _refs(
    raw: dict[str, Any], ids_key: str, slots_key: str, where: str, known: dict[str, Node], missing: str = "an earlier node"
) -> list[Ref]:
    ids = _list(raw.get(ids_key, []), f"{where}.{ids_key}")
    for i, node_id in enumerate(ids):
        _require(isinstance(node_id, str) and node_id in known, f"{where}: {ids_key}[{i}] {str(node_id)[:40]!r} is not {missing}")
    slots = _list(raw.get(slots_key, [0] * len(ids)), f"{where}.{slots_key}")
    _require(len(slots) == len(ids), f"{where}.{slots_key} must match {ids_key}")
    refs = []
    for i, (node_id, slot) in enumerate(zip(ids, slots)):
        slot = _count(slot, f"{where}.{slots_key}[{i}]")
        _require(slot < max(1, len(known[node_id].outputs)), f"{where}.{slots_key}[{i}]: node {node_id} has no output {slot}")
        refs.append(Ref(node_id, slot))
    return refs


def _parse_graph(doc: Any) -> GraphIR:
    _require(isinstance(doc, dict), "graph document must be a JSON object")
    _require(
        doc.get("format") != "torchatlas-ranks",
        "a multi-rank document (every rank's graph of a job): read it with torchatlas.load_ranks",
    )
    _require(doc.get("format") == FORMAT, f"not a torchatlas graph (format={str(doc.get('format'))[:80]!r})")
    version = doc.get("version")
    _require(type(version) is int, "graph document has no integer 'version'")
    _require(
        version <= VERSION,
        f"graph document is version {version}; this torchatlas reads up to version {VERSION} (upgrade torchatlas)",
    )
    raw_scopes = _list(doc.get("scopes"), "graph document 'scopes'")
    raw_nodes = _list(doc.get("nodes"), "graph document 'nodes'")
    scopes = [_parse_scope(raw, f"scopes[{i}]") for i, raw in enumerate(raw_scopes)]
    scope_index: dict[str, Scope] = {}
    for i, s in enumerate(scopes):
        _require(s.id not in scope_index, f"scopes[{i}]: duplicate scope id {s.id!r}")
        _require(s.parent is None or s.parent in scope_index, f"scopes[{i}].parent {s.parent!r} is not an earlier scope")
        scope_index[s.id] = s
    nodes: dict[str, Node] = {}
    for i, raw in enumerate(raw_nodes):
        node = _parse_node(raw, f"nodes[{i}]", nodes, scope_index)
        nodes[node.id] = node
    for s, raw in zip(scopes, raw_scopes):
        where = f"scope {s.id}"
        s.outputs = _refs(raw, "outputs", "output_slots", where, nodes, missing="a node")
        s.inputs = _refs(raw, "inputs", "input_slots", where, nodes, missing="a node")
    meta = _obj(doc.get("meta", {}), "graph 'meta'")
    _check_facts(meta, GRAPH_FACTS, "graph meta", nodes, scope_index)
    for n in nodes.values():
        _check_facts(n.meta, NODE_FACTS, f"node {n.id} meta", nodes, scope_index)
    for s in scopes:
        _check_facts(s.meta, SCOPE_FACTS, f"scope {s.id} meta", nodes, scope_index)
    return GraphIR(scopes=scopes, nodes=list(nodes.values()), meta=meta)


def _parse_scope(raw: Any, where: str) -> Scope:
    raw = _obj(raw, where)
    for key in ("id", "parent", "path", "class", "call"):
        _require(key in raw, f"{where} lacks field {key!r}")
    sid = _string(raw["id"], f"{where}.id")
    _require(sid != "", f"{where}.id must not be empty")
    return Scope(
        id=sid,
        parent=_opt_str(raw["parent"], f"{where}.parent"),
        path=_string(raw["path"], f"{where}.path"),
        cls=_string(raw["class"], f"{where}.class"),
        call=_count(raw["call"], f"{where}.call"),
        source=_load_source(raw.get("source"), where),
        meta=_obj(raw.get("meta", {}), f"{where}.meta"),
    )


def _parse_node(raw: Any, where: str, known: dict[str, Node], scopes: dict[str, Scope]) -> Node:
    raw = _obj(raw, where)
    for key in ("id", "kind", "scope", "inputs"):
        _require(key in raw, f"{where} lacks field {key!r}")
    nid = _string(raw["id"], f"{where}.id")
    _require(nid != "" and nid not in known, f"{where}: duplicate or empty node id {nid!r}")
    # Renderers draw nodes and module calls side by side, keyed by id.
    _require(nid not in scopes, f"{where}: node id {nid!r} is also a scope id")
    kind = raw["kind"]
    _require(isinstance(kind, str) and kind in NODE_KINDS, f"{where}: unknown kind {str(kind)[:40]!r}")
    scope = raw["scope"]
    _require(isinstance(scope, str) and scope in scopes, f"{where}: unknown scope {str(scope)[:40]!r}")
    inputs = _refs(raw, "inputs", "input_slots", where, known)
    args = _list(raw.get("args", []), f"{where}.args")
    kwargs = _obj(raw.get("kwargs", {}), f"{where}.kwargs")
    shape_inputs = _refs(raw, "shape_inputs", "shape_input_slots", where, known)
    _check_argument_refs(args, kwargs, len(inputs), len(shape_inputs), where)
    return Node(
        id=nid,
        kind=kind,
        scope=scope,
        inputs=inputs,
        shape_inputs=shape_inputs,
        target=_opt_str(raw.get("target"), f"{where}.target"),
        path=_opt_str(raw.get("path"), f"{where}.path"),
        outputs=[_load_tensor_meta(m, f"{where}.outputs[{j}]") for j, m in enumerate(_list(raw.get("outputs", []), f"{where}.outputs"))],
        args=args,
        kwargs=kwargs,
        inplace=_bool(raw.get("inplace", False), f"{where}.inplace"),
        source=_load_source(raw.get("source"), where),
        name=_opt_str(raw.get("name"), f"{where}.name"),
        meta=_obj(raw.get("meta", {}), f"{where}.meta"),
    )


def _check_argument_refs(args: list[Any], kwargs: dict[str, Any], inputs: int, shape_inputs: int, where: str) -> None:
    """Every ``{"tensor": i}`` names an input, every ``{"shape_of": i}`` a shape input; numbers are
    finite; nesting is at most :data:`MAX_ARGUMENT_DEPTH` deep (renderers walk it)."""
    stack: list[tuple[Any, int]] = [(args, 0), (kwargs, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list)):
            _require(depth <= MAX_ARGUMENT_DEPTH, f"{where}: an argument nests over {MAX_ARGUMENT_DEPTH} deep")
        if isinstance(value, dict):
            for key, limit in (("tensor", inputs), ("shape_of", shape_inputs)):
                if key in value:
                    _require(type(value[key]) is int and 0 <= value[key] < limit, f"{where}: argument {key} {value[key]!r} is out of range")
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            _number(value, f"{where}: an argument")


# -- facts recorded with nodes, scopes and the graph ---------------------------------

Check = Callable[[Any, str, dict[str, Node], dict[str, Scope]], None]


def _of(check: Callable[[Any, str], Any]) -> Check:
    return lambda value, where, _nodes, _scopes: check(value, where) and None


def _node_id(value: Any, where: str, nodes: dict[str, Node], _scopes: dict[str, Scope]) -> None:
    _require(isinstance(value, str) and value in nodes, f"{where} must name a node")


def _node_ids(value: Any, where: str, nodes: dict[str, Node], scopes: dict[str, Scope]) -> None:
    for i, item in enumerate(_list(value, where)):
        _node_id(item, f"{where}[{i}]", nodes, scopes)


def _scope_id_or_null(value: Any, where: str, _nodes: dict[str, Node], scopes: dict[str, Scope]) -> None:
    _require(value is None or (isinstance(value, str) and value in scopes), f"{where} must name a scope")


def _opt_int(value: Any, where: str) -> None:
    if value is not None:
        _require(type(value) is int and abs(value) < _MAX_INT, f"{where} must be an integer or null")


def _numbers(value: Any, where: str) -> None:
    """An object of named numbers (``stats``); a count may be null where it does not apply."""
    for key, item in _obj(value, where).items():
        if item is not None:
            _number(item, f"{where}.{key}")


def _objects(fields: dict[str, Callable[[Any, str], Any]]) -> Callable[[Any, str], None]:
    def check(value: Any, where: str) -> None:
        for i, item in enumerate(_list(value, where)):
            item = _obj(item, f"{where}[{i}]")
            for key, field_check in fields.items():
                if key in item:
                    field_check(item[key], f"{where}[{i}].{key}")

    return check


def _string_list(value: Any, where: str) -> None:
    for i, item in enumerate(_list(value, where)):
        _string(item, f"{where}[{i}]")


def _shape(value: Any, where: str) -> None:
    _sizes(value, where)


def _sizes_by_scope(value: Any, where: str, _nodes: dict[str, Node], scopes: dict[str, Scope]) -> None:
    for key, item in _obj(value, where).items():
        _require(key in scopes, f"{where}: {key[:40]!r} is not a scope")
        _count(item, f"{where}.{key}")


def _overlays(value: Any, where: str, nodes: dict[str, Node], scopes: dict[str, Scope]) -> None:
    problem = check_overlays(value, where, set(nodes), set(scopes))
    _require(problem is None, problem or "")


def _graph_breaks(value: Any, where: str, nodes: dict[str, Node], scopes: dict[str, Scope]) -> None:
    """``compile_report``'s breaks: every field ``GraphBreak`` reads, ids that name this graph's nodes and calls."""
    for i, item in enumerate(_list(value, where)):
        at = f"{where}[{i}]"
        item = _obj(item, at)
        _string(item.get("kind"), f"{at}.kind")
        _string(item.get("reason"), f"{at}.reason")
        _load_source(item.get("source"), at)
        _scope_id_or_null(item.get("scope"), f"{at}.scope", nodes, scopes)
        if item.get("node") is not None:
            _node_id(item["node"], f"{at}.node", nodes, scopes)
        _opt_int(item.get("graph"), f"{at}.graph")
        _count(item.get("call", 0), f"{at}.call")


def _python_reads(value: Any, where: str) -> None:
    """Node meta ``reads``: every field ``PythonRead`` reads."""
    for i, item in enumerate(_list(value, where)):
        at = f"{where}[{i}]"
        item = _obj(item, at)
        _require(item.get("as") in READ_KINDS, f"{at}.as must be one of {', '.join(READ_KINDS)}")
        _count(item.get("slot", 0), f"{at}.slot")
        value = item.get("value")
        _require(value is None or isinstance(value, bool) or _number(value, f"{at}.value") is not None, f"{at}.value")
        statement = item.get("statement")
        _require(statement is None or statement in READ_STATEMENTS, f"{at}.statement must be null or one of {', '.join(READ_STATEMENTS)}")
        _load_source(item.get("source"), at)
        if item.get("loop") is not None:
            loop = _obj(item["loop"], f"{at}.loop")
            _count(loop.get("line"), f"{at}.loop.line")
            _string(loop.get("code", ""), f"{at}.loop.code")


def _compile_graphs(value: Any, where: str, nodes: dict[str, Node], _scopes: dict[str, Scope]) -> None:
    """How many graphs dynamo compiled: at least one more than the highest an op ran in."""
    count = _count(value, where)
    regions = [n.meta.get("compile_region") for n in nodes.values()]
    highest = max((r for r in regions if type(r) is int), default=-1)
    _require(highest < count, f"{where} is {count}, but an op ran in compiled graph {highest}")


_TENSOR_ENTRY = {
    "path": _string, "shape": _shape, "dtype": _string, "requires_grad": _bool, "shared_with": _string_list,
    "placements": _string_list, "local_shape": _shape,
}


def _collective(value: Any, where: str) -> None:
    """A collective's facts: the fields the passes and renderers read."""
    facts = _obj(value, where)
    for key in ("op", "group", "redistribute"):
        if key in facts:
            _string(facts[key], f"{where}.{key}")
    for key in ("group_size", "bytes", "peer"):
        if key in facts:
            _count(facts[key], f"{where}.{key}")
    if facts.get("ranks") is not None:
        for i, rank in enumerate(_list(facts["ranks"], f"{where}.ranks")):
            _count(rank, f"{where}.ranks[{i}]")
    if "splits" in facts:
        splits = _obj(facts["splits"], f"{where}.splits")
        for key in ("sent", "received"):
            for i, rows in enumerate(_list(splits.get(key), f"{where}.splits.{key}")):
                _count(rows, f"{where}.splits.{key}[{i}]")


NODE_FACTS: dict[str, Check] = {
    "error": _of(_string),
    "caught_error": _of(_string),
    "phase": _of(lambda v, w: _require(v in ("forward", "backward"), f"{w} must be 'forward' or 'backward'")),
    "grad_of": _node_id,
    "saved_from": _node_ids,
    "saved_for_backward": _of(_objects({"shape": _shape, "dtype": _string, "bytes": _count, "node": _string})),
    "python_op": _of(lambda v, w: _obj(v, w)),
    "requires_grad": _of(_bool),
    "stats": _of(lambda v, w: [_numbers(s, f"{w}[{i}]") for i, s in enumerate(_list(v, w)) if s is not None]),
    "stats_skipped": _of(lambda v, w: [_string(s, f"{w}[{i}]") for i, s in enumerate(_list(v, w)) if s is not None]),
    "fingerprint": _of(lambda v, w: [_obj(s, f"{w}[{i}]") for i, s in enumerate(_list(v, w)) if s is not None]),
    "time_us": _of(_number),
    "cuda_time_us": _of(_number),
    "compile_region": _of(_opt_int),
    "opaque": _of(_string),
    "passthrough": _of(_bool),
    "reads": _of(_python_reads),
    "collective": _of(_collective),
}
"""Node meta keys recorded at capture time, each with the check its value must pass."""

SCOPE_FACTS: dict[str, Check] = {
    "time_us": _of(_number),
    "cuda_time_us": _of(_number),
    "passthrough": _of(_bool),
}

GRAPH_FACTS: dict[str, Check] = {
    "level": _of(_string),
    "torch": _of(_string),
    "model": _of(_string),
    "imported": _of(_string),
    "backward": _of(_bool),
    "parameters": _of(_objects(_TENSOR_ENTRY)),
    "buffers": _of(_objects(_TENSOR_ENTRY)),
    "failure": _of(lambda v, w: _obj(v, w)),
    "saved_activations": _sizes_by_scope,
    "saved_activation_bytes": _of(_count),
    "stats_note": _of(_string),
    "save_note": _of(_string),
    "profile_runs": _of(_count),
    "time_measure": _of(_string),
    "compile_graphs": _compile_graphs,
    "graph_breaks": _graph_breaks,
    "overlays": _overlays,
    "distributed": _of(lambda v, w: [_count(_obj(v, w).get(k), f"{w}.{k}") for k in ("rank", "world_size")]),
    "pipeline": _of(lambda v, w: [_count(_obj(v, w).get(k), f"{w}.{k}") for k in ("num_stages", "microbatches")]),
}


def _check_facts(meta: dict[str, Any], facts: dict[str, Check], where: str, nodes: dict[str, Node], scopes: dict[str, Scope]) -> None:
    for key, check in facts.items():
        if key in meta:
            check(meta[key], f"{where}.{key}", nodes, scopes)
