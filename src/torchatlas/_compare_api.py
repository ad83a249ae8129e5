"""``torchatlas.compare``: runs of a model lined up op by op, and where their numbers part ways.

It wires the layers as ``_api`` does: capture traces each run with fingerprints
(``_capture._fingerprints``), the compare pass lines the runs up and measures them
(``_passes._compare``), and the first run's graph carries the result as overlays that every
renderer draws.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from . import _capture
from ._api import Graph, PathLike, _normalize_args
from ._io import write_atomic
from ._ir import GraphIR, Node
from ._passes import OpComparison, RunComparison, compare_runs, error_value, op_label
from ._render import HtmlOptions, ViewerBundleMissing, notebook_html
from ._view import DIVERGES, DIVERGES_HERE, INHERITS, fold_runs

METRICS = ("max_abs", "max_rel", "cosine")
_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30}
_ITEM_BYTES = {"float64": 8, "int64": 8, "complex64": 8, "float32": 4, "int32": 4, "float16": 2, "bfloat16": 2, "int16": 2}

Run = Graph | GraphIR | tuple


class Comparison:
    """Runs of a model against the first, op by op (``torchatlas.compare``)."""

    def __init__(self, graphs: list[Graph], labels: list[str], runs: list[RunComparison], atol: float, rtol: float, metric: str) -> None:
        self.graphs = graphs
        """Each run's graph, as traced (with its fingerprints)."""
        self.labels = labels
        self.runs = runs
        """Each later run against the first: ``.ops`` by the first run's node id, ``.unmatched``,
        ``.first_divergence``."""
        self.atol, self.rtol, self.metric = atol, rtol, metric
        self.graph = _with_overlays(graphs, labels, runs, metric)
        """The first run's graph with the comparison as overlays: ``error`` (per op, log scale;
        ``error: <run>`` per run when there are more than two) and ``divergence``."""

    @property
    def diverged(self) -> bool:
        """True when an op of some run is off past the tolerance."""
        return any(r.first_divergence is not None for r in self.runs)

    @property
    def first_divergence(self) -> Node | None:
        """The first op (of the first run's graph) where a run's numbers part from the first
        run's, every input still within the tolerance; the earliest over all runs."""
        found = [r.first_divergence for r in self.runs if r.first_divergence is not None]
        if not found:
            return None
        order = {n.id: i for i, n in enumerate(self.graph.ir.nodes)}
        return self.graph.ir.node(min(found, key=order.__getitem__))

    def label(self, node_id: str) -> str:
        """``layers.0.mlp.up_proj (linear)``: where the first run's op ran and what it is."""
        ir = self.graph.ir
        return op_label(ir, ir.node(node_id))

    def explain(self, node_id: str, run: int = 1) -> str:
        """One line on an op of the first run against run ``run``."""
        op = self.runs[run - 1].ops.get(node_id)
        if op is None:
            return f"{self.label(node_id)}: no partner in {self.labels[run]}"
        e = op.errors
        numbers = "" if e is None else f": max abs {e.max_abs:.3g}, max rel {e.max_rel:.3g}, cosine {e.cosine:.6g}"
        what = op.status
        if op.status == "diverges":
            what = "diverges here" if node_id == self.runs[run - 1].first_divergence else "diverges (its inputs are within)"
        elif op.status == "inherits" and op.origin is not None:
            what = f"inherits a difference from {self.label(op.origin)}"
        elif op.status == "not compared":
            what = f"not compared ({op.note})"
        return f"{self.label(node_id)} [{node_id}]: {what}{numbers}"

    def __str__(self) -> str:
        lines = [f"compare: {', '.join(self.labels[1:])} against {self.labels[0]} (atol {self.atol:g}, rtol {self.rtol:g})"]
        for r in self.runs:
            counts = r.counts()
            if r.first_divergence is None:
                lines.append(f"{r.label}: no op past the tolerance")
            else:
                lines.append(f"{r.label}: first divergence at {self.explain(r.first_divergence, r.run)}")
            lines.append("  " + ", ".join(f"{n} {s}" for s, n in counts.items() if n))
            if r.unmatched:
                lines.append(f"  unmatched: {len(r.unmatched)}")
                lines += [f"    only in {self.labels[u.run]}: {u.label} [{u.node}]: {u.reason}" for u in r.unmatched[:20]]
                if len(r.unmatched) > 20:
                    lines.append(f"    … and {len(r.unmatched) - 20} more")
        return "\n".join(lines)

    def tree(self, **options: Any) -> str | Path:
        """The first run's tree with each op's error and ``✗ diverges here`` (``Graph.tree``'s
        options; ``fold_repeats`` is off by default where a fold would hide a divergence)."""
        options.setdefault("fold_repeats", self._folds_show_divergences())
        return self.graph.tree(**options)

    def summary(self, **options: Any) -> str | Path:
        """The first run's summary with an error column (``Graph.summary``'s options, ``fold_repeats``
        as for ``tree``)."""
        options.setdefault("fold_repeats", self._folds_show_divergences())
        return self.graph.summary(**options)

    def _folds_show_divergences(self) -> bool:
        """False when an op that diverges lies in a repeated layer folded behind another (a fold
        shows its first call's numbers): ``layers.1–15 ×15`` must not hide ``✗ diverges here``."""
        ir = self.graph.ir
        diverging = {ir.node(i).scope for r in self.runs for i, op in r.ops.items() if op.status == "diverges"}
        hidden = {m for members in fold_runs(ir).values() for m in members[1:]}
        inside = ir.children()
        while hidden:
            if hidden & diverging:
                return False
            hidden = {c for s in hidden for c in inside.get(s, [])}
        return True

    def to_html(self, path: PathLike | None = None, title: str | None = None, **options: Any) -> str | Path:
        """The first run's page, its boxes filled by the first later run's error on a log scale
        (``Graph.to_html``'s options, ``fold_repeats`` as for ``tree``; ``fill=`` another overlay)."""
        options.setdefault("fill", self._fill())
        options.setdefault("fold_repeats", self._folds_show_divergences())
        return self.graph.to_html(path, title=title or "torchatlas compare", **options)

    def _repr_html_(self) -> str | None:
        """Jupyter shows the first run's page inline, filled by error; without the viewer bundle, the report."""
        try:
            options = HtmlOptions(title="torchatlas compare", fill=self._fill(), fold_repeats=self._folds_show_divergences())
            return notebook_html(self.graph.ir, options=options)
        except ViewerBundleMissing:
            return None

    def _fill(self) -> str:
        return "error" if len(self.runs) == 1 else f"error: {self.runs[0].label}"

    def to_dict(self) -> dict[str, Any]:
        def op_row(op: OpComparison) -> dict[str, Any]:
            e = op.errors
            numbers = {} if e is None else {"max_abs": e.max_abs, "max_rel": e.max_rel, "cosine": e.cosine, "metric": e.metric}
            return {"node": op.node, "other": op.other, "status": op.status, "origin": op.origin, "matched_by": op.matched_by,
                    "note": op.note, **{k: (v if v is None or v == v and abs(v) != float("inf") else str(v)) for k, v in numbers.items()}}

        return {
            "labels": list(self.labels), "atol": self.atol, "rtol": self.rtol, "diverged": self.diverged,
            "runs": [
                {"label": r.label, "first_divergence": r.first_divergence, "ops": [op_row(op) for op in r.ops.values()],
                 "unmatched": [{"run": u.run, "node": u.node, "label": u.label, "reason": u.reason} for u in r.unmatched]}
                for r in self.runs
            ],
        }

    def save(self, path: PathLike) -> Path:
        """The comparison's records as JSON (``to_dict``), written atomically."""
        return write_atomic(path, json.dumps(self.to_dict(), indent=1))


def compare(
    *runs: Run,
    atol: float = 1e-5,
    rtol: float = 1.3e-6,
    metric: str | Callable[[torch.Tensor, torch.Tensor], Any] = "max_abs",
    keep: str = "fingerprint",
    budget: int | str = "2GiB",
    labels: Sequence[str] | None = None,
    level: str = "python",
) -> Comparison:
    """Run a model two or more ways and find the op where their numbers part.

    Each run is ``(model, args)``, ``(model, args, kwargs)``, or a graph traced with
    ``fingerprint=True`` (trace it yourself under ``torch.autocast`` to compare autocast).
    The ops are lined up with ``diff``'s matching, then by numeric signature; each op of a
    later run is measured against the first run's (max abs, max rel, cosine, and ``metric``
    if it is a function of the two outputs' sampled values as float64 tensors). An op is off
    where some element has ``|b - a| > atol + rtol·|a|``. The first divergence is the earliest
    op off while its inputs were all within; the ops after it that are off inherit from it.

    Only fingerprints are kept: statistics, 1,024 sampled values and a hash per output.
    ``keep="full"`` then runs the models again, keeping whole outputs of the ops on the path
    to each first divergence, nearest first, while they fit ``budget`` (bytes or ``"2GiB"``),
    and measures those exactly.
    """
    if len(runs) < 2:
        raise ValueError(f"torchatlas.compare needs two runs or more, got {len(runs)}")
    if keep not in ("fingerprint", "full"):
        raise ValueError(f"torchatlas.compare: keep must be 'fingerprint' or 'full', not {keep!r}")
    if not callable(metric) and metric not in METRICS:
        raise ValueError(f"torchatlas.compare: metric must be one of {', '.join(METRICS)} or a function, not {metric!r}")
    names = list(labels) if labels is not None else [chr(ord("a") + k) if k < 26 else f"run {k}" for k in range(len(runs))]
    if len(names) != len(runs):
        raise ValueError(f"torchatlas.compare: {len(names)} labels for {len(runs)} runs")
    limit = parse_bytes(budget)
    graphs = [_traced(run, k, level) for k, run in enumerate(runs)]
    measure = _metric(metric) if callable(metric) else None
    irs = [g.ir for g in graphs]
    found = compare_runs(irs, names, atol, rtol, measure)
    if keep == "full":
        irs = _measured_whole(runs, irs, found, limit, level)
        found = compare_runs(irs, names, atol, rtol, measure)
        graphs = [Graph(ir, g.error, g.activations()) for ir, g in zip(irs, graphs)]
    return Comparison(graphs, names, found, atol, rtol, "metric" if callable(metric) else metric)


def parse_bytes(value: int | str) -> int:
    """``"2GiB"`` -> 2147483648; an int is taken as bytes."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMG]i?B|B)?\s*", str(value), re.IGNORECASE)
    if match is None:
        raise ValueError(f"torchatlas.compare: budget must be bytes or like '2GiB', not {value!r}")
    return int(float(match.group(1)) * _UNITS[(match.group(2) or "").upper()])


def _traced(run: Run, k: int, level: str) -> Graph:
    if isinstance(run, GraphIR):
        run = Graph(run)
    if isinstance(run, Graph):
        if not any("fingerprint" in n.meta for n in run.ir.ops()):
            raise ValueError(f"torchatlas.compare: run {k} is a graph without fingerprints; trace it with fingerprint=True")
        return run
    if not isinstance(run, tuple) or len(run) not in (2, 3) or not callable(run[0]):
        raise TypeError(f"torchatlas.compare: run {k} must be (model, args), (model, args, kwargs) or a Graph, not {type(run).__name__}")
    result = _capture.capture(run[0], *_inputs(run), level=level, fingerprint=True)
    return Graph(result.ir, result.error, result.activations)


def _inputs(run: tuple) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A copy of a run's inputs: a model that writes into its inputs changes them for the next run."""
    return copy.deepcopy(_normalize_args(run[1])), copy.deepcopy(dict(run[2] if len(run) == 3 else {}))


def _metric(fn: Callable[[torch.Tensor, torch.Tensor], Any]) -> Callable[[Sequence[float], Sequence[float]], float]:
    def measure(a: Sequence[float], b: Sequence[float]) -> float:
        return float(fn(torch.tensor(a, dtype=torch.float64), torch.tensor(b, dtype=torch.float64)))

    return measure


def _measured_whole(runs: Sequence[Run], irs: list[GraphIR], found: list[RunComparison], budget: int, level: str) -> list[GraphIR]:
    """The graphs with the ops on the path to each first divergence measured over whole outputs."""
    if not all(isinstance(run, tuple) for run in runs):
        raise ValueError("torchatlas.compare: keep='full' runs the models again: give every run as (model, args, kwargs)")
    wanted: list[set[str]] = [set() for _ in runs]
    left = budget
    for r in found:
        if r.first_divergence is None:
            continue
        for node_id in _path_to(irs[0], r.first_divergence):
            op = r.ops.get(node_id)
            if op is None:
                continue
            size = 2 * _output_bytes(irs[0].node(node_id))
            if size > left:
                break
            left -= size
            wanted[0].add(node_id)
            wanted[r.run].add(op.other)
    whole = []
    for k, run in enumerate(runs):
        kept = _capture.capture(run[0], *_inputs(run), level=level, fingerprint=True, keep_full=frozenset(wanted[k]),
                                keep_budget=budget).activations
        whole.append(kept)
    updates: list[dict[str, dict[str, Any]]] = [{} for _ in runs]
    for r in found:
        for node_id in wanted[0]:
            op = r.ops.get(node_id)
            if op is None or op.other not in wanted[r.run]:
                continue
            mine = _whole(irs[0].node(node_id), whole[0])
            theirs = _whole(irs[r.run].node(op.other), whole[r.run])
            if mine is not None and theirs is not None:  # both whole, or the sample stays for both
                updates[0][node_id], updates[r.run][op.other] = mine, theirs
    return [ir.with_meta(nodes=u) for ir, u in zip(irs, updates)]


def _whole(node: Node, kept: dict[str, Any]) -> dict[str, Any] | None:
    """The node's fingerprints with every measured output's sample its whole output, or None."""
    prints = []
    for slot, p in enumerate(node.meta.get("fingerprint", [])):
        if isinstance(p, dict) and "skipped" not in p:
            tensor = kept.get(node.id + (f".{slot}" if slot else ""))
            if tensor is None:
                return None
            values = tensor.double().reshape(-1).tolist()
            p = {**p, "whole": True, "sample": [v if v == v and abs(v) != float("inf") else str(v) for v in values]}
        prints.append(p)
    return {"fingerprint": prints}


def _path_to(ir: GraphIR, node_id: str) -> list[str]:
    """``node_id`` and the ops it reads, directly or not, nearest first."""
    order, seen, queue = [], {node_id}, [node_id]
    while queue:
        current = queue.pop(0)
        order.append(current)
        for ref in ir.node(current).inputs:
            if ref.node not in seen and ir.node(ref.node).kind == "op":
                seen.add(ref.node)
                queue.append(ref.node)
    return order


def _output_bytes(node: Node) -> int:
    total = 0
    for m in node.outputs:
        count = 1
        for size in m.shape:
            count *= int(size) if isinstance(size, int) else 1
        total += count * _ITEM_BYTES.get(m.dtype.replace("torch.", ""), 1)
    return total


def _with_overlays(graphs: list[Graph], labels: list[str], runs: list[RunComparison], metric: str) -> Graph:
    """A copy of the first run's graph carrying the errors and the divergence marks as overlays,
    and each op's partners (``meta["compared"]``, the page's table)."""
    graph = graphs[0]
    tables = _partner_rows([g.ir for g in graphs], runs)
    marked = Graph(graph.ir.with_meta(nodes=tables, graph={"compared_runs": list(labels)}), graph.error, graph.activations())
    marks: dict[str, str] = {}
    for r in runs:
        name = "error" if len(runs) == 1 else f"error: {r.label}"
        values = {i: v for i, op in r.ops.items() if (v := error_value(op, metric)) is not None}
        marked.overlay(name, values, kind="number", scale="log")
        for i, op in r.ops.items():
            mark = DIVERGES if op.status == "diverges" else None
            if op.status == "inherits" and op.origin is not None:
                mark = f"{INHERITS}{graph.ir.scope(graph.ir.node(op.origin).scope).path or 'model'}"
            if mark and marks.get(i) != DIVERGES_HERE:
                marks[i] = mark
        if r.first_divergence is not None:
            marks[r.first_divergence] = DIVERGES_HERE
    marked.overlay("divergence", marks, kind="category")
    return marked


def _partner_rows(irs: list[GraphIR], runs: list[RunComparison]) -> dict[str, dict[str, Any]]:
    """Each op of the first run's partner in every later run, the page's table (``meta["compared"]``)."""
    rows: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        other = irs[r.run]
        for node_id, op in r.ops.items():
            partner = other.node(op.other)
            e = op.errors
            numbers = {} if e is None else {"max_abs": _json_number(e.max_abs), "max_rel": _json_number(e.max_rel),
                                            "cosine": _json_number(e.cosine)}
            rows.setdefault(node_id, []).append({
                "run": r.run, "node": op.other, "target": partner.target, "status": op.status,
                "outputs": [[list(m.shape), m.dtype] for m in partner.outputs], **numbers,
            })
    return {node_id: {"compared": found} for node_id, found in rows.items()}


def _json_number(value: float) -> float | str:
    """A number as JSON holds it: NaN and Inf as their text."""
    return value if value == value and abs(value) != float("inf") else str(value)
