"""Turns a finished ``Recording`` into a ``GraphIR``: ids, sources and variable names.

A pure conversion of plain records: nothing live is read, so it runs the same
whether the forward pass returned or failed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .._ir import GraphIR, Node, Ref, Scope, Source, TensorMeta
from . import _source, _statements
from ._records import Recording, Slot
from ._values import dtype_name, encode, encode_arguments


def build_graph(recording: Recording) -> GraphIR:
    names = _variable_names(recording)
    # Keyed by the code object's id, not the code object: hashing a code object hashes its
    # constants and names anew each time. The records keep every code object alive meanwhile.
    sources: dict[tuple[int, int], Source] = {}

    def source(code: Any, line: int) -> Source | None:
        if code is None:
            return None
        key = (id(code), line)
        hit = sources.get(key)
        if hit is None:
            hit = sources[key] = Source(code.co_filename, line, _source.line_text(code.co_filename, line))
        return hit

    metas: dict[tuple[Any, ...], TensorMeta] = {}

    def tensor_meta(raw: tuple[Any, ...]) -> TensorMeta:
        # Shapes repeat: share one immutable TensorMeta per distinct (shape, dtype, device).
        hit = metas.get(raw)
        if hit is None:
            hit = metas[raw] = _tensor_meta(*raw)
        return hit

    spans: dict[tuple[int, int], Any] = {}  # (code id, instruction) -> the expression it read
    ids = [f"n{i}" for i in range(len(recording.nodes) + len(recording.outputs))]
    scope_ids = [f"s{i}" for i in range(len(recording.scopes))]
    nodes = []
    append = nodes.append
    for i, r in enumerate(recording.nodes):  # the hot loop of a build, inline
        meta: dict[str, Any] = dict(r.extra) if r.extra else {}
        if r.error is not None:
            meta["error"] = r.error
        if r.reads:
            meta["reads"] = [_read(read, source, spans) for read in r.reads]
        code = r.code
        append(
            Node(
                ids[i],
                r.kind,
                scope_ids[r.scope],
                [_new_tuple(Ref, (ids[p], slot)) for p, slot in r.inputs],
                [_new_tuple(Ref, (ids[p], slot)) for p, slot in r.shape_inputs] if r.shape_inputs else [],
                r.target,
                r.path,
                [metas.get(m) or tensor_meta(m) for m in r.outputs],
                encode_arguments(r.args) if r.args else [],
                {k: encode(v) for k, v in r.kwargs.items()} if r.kwargs else {},
                r.inplace,
                None if code is None else source(code, r.line),
                names.get(i),
                meta,
            )
        )
    for path, (producer, slot), raw, extra in recording.outputs:
        nodes.append(
            Node(
                id=ids[len(nodes)], kind="output", scope="s0", inputs=[_ref(ids[producer], slot)],
                path=path, outputs=[tensor_meta(raw)], meta=dict(extra),
            )
        )
    scope_outputs, scope_inputs = recording.scope_outputs, recording.scope_inputs
    scopes = []
    for i, s in enumerate(recording.scopes):
        outs = scope_outputs.get(i)
        meta = dict(s.extra) if s.extra else {}
        if s.passthrough:
            meta["passthrough"] = True
        if i in recording.scope_input_names:  # the parameter each of its inputs was passed as
            meta["input_names"] = recording.scope_input_names[i]
        scopes.append(
            Scope(
                scope_ids[i],
                None if s.parent is None else scope_ids[s.parent],
                s.path,
                s.cls,
                s.call,
                source(s.code, s.line),
                list(dict.fromkeys([_new_tuple(Ref, (ids[r], slot)) for r, slot in outs])) if outs else [],
                meta,
                [_new_tuple(Ref, (ids[r], slot)) for r, slot in scope_inputs.get(i, ())],
            )
        )
    meta: dict[str, Any] = {"level": recording.level, "torch": torch.__version__, **recording.meta}
    if recording.model is not None:
        meta["model"] = recording.model
        meta["parameters"] = recording.parameters or []
        meta["buffers"] = recording.buffers or []
    failure = recording.failure
    if failure is not None:
        meta["failure"] = {
            "target": failure.target,
            "scope": None if failure.scope is None else f"s{failure.scope}",
            "source": None if failure.code is None else str(source(failure.code, failure.line)),
        }
    return GraphIR(scopes=scopes, nodes=nodes, meta=meta)


def _tensor_meta(shape: Any, dtype: Any, device: Any, placed: Any = None) -> TensorMeta:
    if not all(type(s) is int for s in shape):
        shape = tuple(s if isinstance(s, int) else str(s) for s in shape)
    if placed is not None:  # a DTensor: its placements, mesh and local shape
        placements, mesh, local = placed
        return TensorMeta(tuple(shape), dtype_name(dtype), str(device), placements, mesh, local)
    return TensorMeta(tuple(shape), dtype_name(dtype), str(device))


def _ref(node: str, slot: int) -> Ref:
    return _new_tuple(Ref, (node, slot))  # Ref(node, slot), without NamedTuple's Python-level __new__


_new_tuple = tuple.__new__


def _read(read: Any, source: Callable[[Any, int], Source | None], spans: dict[tuple[int, int], Any]) -> dict[str, Any]:
    """One read into Python as the graph document saves it (docs/format.md, ``reads``): a truth
    test's value is the statement's outcome where the read settled it (``_statements``)."""
    how, slot, code, line, value, lasti = read
    where = source(code, line)
    statement = None
    if where is not None and how != "size":
        read_at = _statements.read_span(code, lasti, spans) if lasti >= 0 else None
        # a comprehension's or lambda's own code starts mid-statement: no statement of its own
        first_line = 1 if code.co_name == "<module>" else 0 if code.co_name.startswith("<") else code.co_firstlineno
        place = _statements.read_place(where.file, first_line, where.line, read_at, how == "bool")
        if how == "bool" and type(value) is bool:
            statement, value = place.decide(value)
        else:
            statement = place.statement
    out = {
        "as": how, "slot": slot, "value": value, "statement": statement,
        "source": {"file": where.file, "line": where.line, "code": where.code} if where is not None else None,
    }
    if where is not None and statement in ("break", "continue"):
        loop = _source.enclosing_loop(where.file, where.line)
        if loop is not None:
            out["loop"] = {"line": loop[0], "code": loop[1]}
    return out


def _variable_names(recording: Recording) -> dict[int, str]:
    """Record index -> the variable its result was assigned to.

    The value a line assigns is the last one that line produced: its last op, or
    the output of the last module it called. Lines are told apart per frame, and a
    frame's run ends when the frame reports a different line. An op that library
    code ran for the line (``pad_packed_sequence``'s internals) is not what the line
    bound: it gets no name rather than a wrong one. A value assigned in several
    frames keeps the name given in the frame that made it, unless that name is one that
    another function gives another value in the same module call (T5's ``compute_bias``
    returns its ``values``, beside the key/value cache's ``values``): then it is the name
    its caller bound it to (``position_bias``), where that name is the caller's alone.
    """
    nodes = recording.nodes
    names: dict[int, str] = {}
    named_in: dict[int, Any] = {}  # record -> code of the frame whose name it has
    caller_names: dict[int, tuple[str, Any]] = {}  # record -> a calling frame's name for it, and its code
    runs: dict[int, tuple[Any, int, int, bool]] = {}

    def finish(code: Any, line: int, event: int, bound: bool) -> None:
        if not bound:
            return
        targets = _source.assignment_targets(code.co_filename, line)
        if event >= 0:
            refs: list[Slot] = [(event, slot) for slot in range(len(nodes[event].outputs))]
        else:
            refs = recording.scope_outputs.get(-event - 1, [])
        if not targets or not refs:
            return
        if len(targets) == len(refs) and len({r for r, _ in refs}) == 1:
            pairs = [(", ".join(targets), refs[0])]  # a, b = x.chunk(2)
        elif len(targets) == len(refs):
            pairs = list(zip(targets, refs))
        elif len(targets) == 1:
            pairs = [(targets[0], refs[0])]
        else:
            return  # out, _ = f(...) where f's values are not the line's own: name none
        for target, (record, _) in pairs:
            node = nodes[record]
            if node.kind != "op":
                continue
            if record not in names or node.code is code:
                if record in names and named_in[record] is not code:
                    caller_names.setdefault(record, (names[record], named_in[record]))
                names[record], named_in[record] = target, code
            elif named_in[record] is not code:
                caller_names.setdefault(record, (target, code))

    scopes, outer = recording.scopes, recording.outer_frame
    last_op: dict[int, int] = {}  # a function's run -> its last op
    for event in recording.timeline:
        if event >= 0:
            r = nodes[event]
            frame, code, line, bound = r.frame, r.code, r.line, r.direct
            last_op[frame] = event
        else:
            s = scopes[-event - 1]
            frame, code, line, bound = s.frame, s.code, s.line, True
        if code is None or frame == outer:
            continue
        run = runs.get(frame)
        if run is not None and (run[0] is not code or run[1] != line):
            finish(*run)
        runs[frame] = (code, line, event, bound)
    for run in runs.values():
        finish(*run)
    # A helper's value, bound by the line that called it (``position_bias = self.compute_bias(...)``):
    # the helper's last op, where the helper returns the one variable that op was assigned to.
    for frame, (code, line) in recording.frame_callers.items():
        record = last_op.get(frame)
        if record is None or record not in names or named_in[record] is not nodes[record].code:
            continue
        targets = _source.assignment_targets(code.co_filename, line)
        if len(targets) == 1 and _source.returned_names(nodes[record].code) == {names[record]}:
            caller_names.setdefault(record, (targets[0], code))
    return _unshared(names, named_in, caller_names, nodes)


def _unshared(
    names: dict[int, str], named_in: dict[int, Any], caller_names: dict[int, tuple[str, Any]], nodes: list[Any]
) -> dict[int, str]:
    """``names`` where a name that several functions give values in one module call is, for a
    value a caller bound, the caller's name, if no other function gives that name there."""
    # (scope, name) -> the functions giving it; keyed by the code's id, as the records keep every code alive
    givers: dict[tuple[int, str], set[int]] = {}
    for record, name in names.items():
        givers.setdefault((nodes[record].scope, name), set()).add(id(named_in[record]))
    renamed = {
        record: name
        for record, (name, code) in caller_names.items()
        if len(givers[(nodes[record].scope, names[record])]) > 1
        and givers.get((nodes[record].scope, name), {id(code)}) == {id(code)}
    }
    return {**names, **renamed} if renamed else names
