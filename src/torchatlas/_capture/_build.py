"""Turns a finished ``Recorder`` into a ``GraphIR``: ids, sources and variable names."""

from __future__ import annotations

from typing import Any

import torch

from .._ir import GraphIR, Node, Ref, Scope, Source, TensorMeta
from . import _source
from ._recorder import NodeRecord, Recorder, Slot
from ._values import dtype_name, encode, iter_tensors, shape_of


def build_graph(rec: Recorder, output: Any, model: Any, level: str = "python") -> GraphIR:
    names = _variable_names(rec)
    sources: dict[tuple[Any, int], Source] = {}

    def source(code: Any, line: int) -> Source | None:
        if code is None:
            return None
        key = (code, line)
        hit = sources.get(key)
        if hit is None:
            hit = sources[key] = Source(code.co_filename, line, _source.line_text(code.co_filename, line))
        return hit

    metas: dict[tuple[Any, Any, Any], TensorMeta] = {}

    def tensor_meta(raw: tuple[Any, Any, Any]) -> TensorMeta:
        # Shapes repeat: share one immutable TensorMeta per distinct (shape, dtype, device).
        hit = metas.get(raw)
        if hit is None:
            hit = metas[raw] = _tensor_meta(*raw)
        return hit

    nodes = [_node(i, r, source, tensor_meta, names.get(i)) for i, r in enumerate(rec.nodes)]
    if output is not None:
        for path, t in iter_tensors(output, "output"):
            producer, slot = rec.ref(t)
            nodes.append(
                Node(
                    id=f"n{len(nodes)}", kind="output", scope="s0", inputs=[Ref(f"n{producer}", slot)],
                    path=path, outputs=[_tensor_meta(t.shape, t.dtype, t.device)],
                )
            )
    scopes = [
        Scope(
            id=f"s{i}",
            parent=None if s.parent is None else f"s{s.parent}",
            path=s.path,
            cls=s.cls,
            call=s.call,
            source=source(s.code, s.line),
            outputs=list(dict.fromkeys(Ref(f"n{r}", slot) for r, slot in s.outputs)),
        )
        for i, s in enumerate(rec.scopes)
    ]
    meta: dict[str, Any] = {"level": level, "torch": torch.__version__}
    if isinstance(model, torch.nn.Module):
        cls = type(model)
        meta["model"] = f"{cls.__module__}.{cls.__qualname__}"
        meta["parameters"] = _tensor_table(rec.parameters)
        meta["buffers"] = _tensor_table(rec.buffers)
    if rec.failure is not None:
        meta["failure"] = {
            "target": rec.failure.target,
            "scope": None if rec.failure.scope is None else f"s{rec.failure.scope}",
            "source": None if rec.failure.code is None else str(source(rec.failure.code, rec.failure.line)),
        }
    return GraphIR(scopes=scopes, nodes=nodes, meta=meta)


def _tensor_meta(shape: Any, dtype: Any, device: Any) -> TensorMeta:
    if not all(type(s) is int for s in shape):
        shape = tuple(s if isinstance(s, int) else str(s) for s in shape)
    return TensorMeta(tuple(shape), dtype_name(dtype), str(device))


def _node(index: int, r: NodeRecord, source: Any, tensor_meta: Any, name: str | None) -> Node:
    meta: dict[str, Any] = dict(r.extra) if r.extra else {}
    if r.error is not None:
        meta["error"] = r.error
    return Node(
        id=f"n{index}",
        kind=r.kind,
        scope=f"s{r.scope}",
        inputs=[Ref(f"n{p}", s) for p, s in r.inputs],
        target=r.target,
        path=r.path,
        outputs=[tensor_meta(m) for m in r.outputs],
        args=encode(r.args) if r.args else [],
        kwargs={k: encode(v) for k, v in r.kwargs.items()} if r.kwargs else {},
        inplace=r.inplace,
        source=source(r.code, r.line),
        name=name,
        meta=meta,
    )


def _tensor_table(named: Any) -> list[dict[str, Any]]:
    """Every parameter (or buffer) once, with the other names it is shared under."""
    by_id: dict[int, dict[str, Any]] = {}
    for path, t in named:
        entry = by_id.get(id(t))
        if entry is None:
            by_id[id(t)] = {
                "path": path,
                "shape": list(shape_of(t)),
                "dtype": dtype_name(t.dtype),
                "requires_grad": bool(t.requires_grad),
                "shared_with": [],
            }
        else:
            entry["shared_with"].append(path)
    return list(by_id.values())


def _variable_names(rec: Recorder) -> dict[int, str]:
    """Record index -> the variable its result was assigned to.

    The value a line assigns is the last one that line produced: its last op, or
    the output of the last module it called. Lines are told apart per frame, and a
    frame's run ends when the frame reports a different line. A value assigned in
    several frames keeps the name given in the frame that made it.
    """
    names: dict[int, str] = {}
    runs: dict[int, tuple[Any, int, list[Slot]]] = {}
    outside = rec.scopes[0].frame if rec.scopes else None  # the line that called trace()

    def finish(code: Any, line: int, refs: list[Slot]) -> None:
        targets = _source.assignment_targets(code.co_filename, line)
        if not targets or not refs:
            return
        if len(targets) == len(refs) and len({r for r, _ in refs}) == 1:
            pairs = [(", ".join(targets), refs[0])]  # a, b = x.chunk(2)
        elif len(targets) == len(refs):
            pairs = list(zip(targets, refs))
        else:
            pairs = [(targets[0], refs[0])]
        for target, (record, _) in pairs:
            node = rec.nodes[record]
            if node.kind != "op":
                continue
            if record not in names or node.code is code:
                names[record] = target

    for event in rec.timeline:
        if event >= 0:
            r = rec.nodes[event]
            frame, code, line = r.frame, r.code, r.line
            refs = [(event, slot) for slot in range(len(r.outputs))]
        else:
            s = rec.scopes[-event - 1]
            frame, code, line, refs = s.frame, s.code, s.line, s.outputs
        if code is None or frame == outside:
            continue
        run = runs.get(frame)
        if run is not None and (run[0] is not code or run[1] != line):
            finish(*run)
        runs[frame] = (code, line, refs)
    for run in runs.values():
        finish(*run)
    return names
