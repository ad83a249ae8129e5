"""Where runs of a model part ways numerically: every op of each run against the first run's.

The ops are lined up by the diff's matching (``_diff_match``: calls by path, then renamed
ones; ops along the data flow, then by the least edits), and what that leaves over is paired
by numeric signature: the same element count and the same hash, else values within the
tolerance. What still has no partner is listed with the diff's reason.

Each matched op's output is measured against the first run's from the two fingerprints
(``_compare_errors``). An op past the tolerance whose inputs were all within it *diverges*:
the difference begins there. One whose inputs already differed *inherits* the difference of
the op where it began. The first op that diverges, in execution order, is the first
divergence: the op to blame. Ops without a partner are read through, so an op after an
extra cast still inherits from the op before it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from torchatlas._ir import GraphIR, Node
from torchatlas._ops import op_name
from torchatlas._passes._compare_errors import Errors, Metric, errors, worst
from torchatlas._passes._diff import diff

STATUSES = ("equal", "within", "diverges", "inherits", "not compared")


@dataclass(frozen=True)
class OpComparison:
    """One op of the first run against its partner in another run."""

    node: str
    """Its id in the first run."""
    other: str
    """Its partner's id in the other run."""
    status: str
    """``equal`` (bit for bit), ``within`` the tolerance, ``diverges`` (past it, every input
    within), ``inherits`` (past it, an input already past it) or ``not compared``."""
    errors: Errors | None
    origin: str | None = None
    """``inherits``: the first run's op where the difference began."""
    matched_by: str = "diff"
    """``diff`` (the diff's matching) or ``numbers`` (paired by numeric signature)."""
    note: str = ""


@dataclass(frozen=True)
class Unmatched:
    """An op of one run with no partner in the other."""

    run: int
    """0: only the first run has it; k: only run k."""
    node: str
    label: str
    reason: str


@dataclass
class RunComparison:
    """Run ``run`` against the first run."""

    run: int
    label: str
    ops: dict[str, OpComparison] = field(default_factory=dict)
    """By the first run's node id, in execution order."""
    unmatched: list[Unmatched] = field(default_factory=list)
    first_divergence: str | None = None
    """The first run's id of the first op that diverges; None when none does."""

    def counts(self) -> dict[str, int]:
        found = {status: 0 for status in STATUSES}
        for op in self.ops.values():
            found[op.status] += 1
        return found


def op_label(ir: GraphIR, node: Node) -> str:
    """``layers.0.mlp.up_proj (linear)``: where an op ran and what it is."""
    path = ir.scope(node.scope).path or "model"
    return f"{path} ({op_name(node.target)})"


def compare_runs(
    graphs: list[GraphIR], labels: list[str], atol: float, rtol: float, metric: Metric | None = None,
) -> list[RunComparison]:
    """Every later graph against the first (each traced with fingerprints)."""
    return [_compare_pair(graphs[0], graphs[k], k, [labels[0], labels[k]], atol, rtol, metric) for k in range(1, len(graphs))]


def _fingerprints(node: Node) -> list[Any]:
    found = node.meta.get("fingerprint")
    return found if isinstance(found, list) else []


def _compare_pair(a: GraphIR, b: GraphIR, run: int, labels: list[str], atol: float, rtol: float, metric: Metric | None) -> RunComparison:
    """``labels``: the first run's and this run's."""
    first, label = labels
    result = RunComparison(run, label)
    partners, reasons, only_b = _partners(a, b)
    by_numbers = _pair_by_numbers(a, b, [n for n in a.ops() if n.id not in partners], only_b, atol, rtol)
    for a_id, b_id in by_numbers.items():
        partners[a_id] = (b_id, "numbers")
    a_reasons = _alone_reasons(a, reasons, set(partners), label)
    state: dict[str, str | None] = {}
    """Node id of the first run -> the op its difference began at (None: within)."""
    for node in a.nodes:
        if node.kind != "op":
            continue
        upstream = next((state[r.node] for r in node.inputs if state.get(r.node)), None)
        partner = partners.get(node.id)
        if partner is None:
            state[node.id] = upstream  # read through
            result.unmatched.append(Unmatched(0, node.id, op_label(a, node), a_reasons.get(node.id) or f"{label} has no op like it"))
            continue
        other, how = partner
        found = _op_errors(node, b.node(other), atol, rtol, metric)
        if isinstance(found, str):
            state[node.id] = upstream
            result.ops[node.id] = OpComparison(node.id, other, "not compared", None, matched_by=how, note=found)
            continue
        if not found.off:
            state[node.id] = None
            result.ops[node.id] = OpComparison(node.id, other, "equal" if found.exact else "within", found, matched_by=how, note=found.note)
            continue
        state[node.id] = upstream or node.id
        status = "inherits" if upstream else "diverges"
        result.ops[node.id] = OpComparison(node.id, other, status, found, origin=upstream, matched_by=how, note=found.note)
        if status == "diverges" and result.first_divergence is None:
            result.first_divergence = node.id
    taken = {other for other, _ in partners.values()}
    b_reasons = _alone_reasons(b, {i: r for i, r in only_b.items() if i not in taken}, taken, first)
    for b_id, reason in b_reasons.items():
        result.unmatched.append(Unmatched(run, b_id, op_label(b, b.node(b_id)), reason))
    return result


def _partners(a: GraphIR, b: GraphIR) -> tuple[dict[str, tuple[str, str]], dict[str, str], dict[str, str]]:
    """The diff's op pairs, why each op of ``a`` without one has none, and ``b``'s ops without one."""
    d = diff(a, b)
    a_ops = {n.id for n in a.ops()}
    b_ops = {n.id for n in b.ops()}
    partners: dict[str, tuple[str, str]] = {}
    reasons: dict[str, str] = {}
    only_b: dict[str, str] = {}
    for m in d.nodes:
        if m.a in a_ops and m.b in b_ops and m.status in ("same", "changed"):
            partners[m.a] = (m.b, "diff")
        elif m.a in a_ops:
            reasons[m.a] = m.reason or m.status
        elif m.b in b_ops and m.a is None:
            only_b[m.b] = m.reason or "only this run has it"
    return partners, reasons, only_b


def _alone_reasons(ir: GraphIR, alone: dict[str, str], partnered: set[str], other: str) -> dict[str, str]:
    """Why each op of ``ir`` in ``alone`` (op id -> the diff's reason) has no partner, in
    execution order and in words that say what it is where that can be told: a weight prepared
    from parameters and buffers alone (a quantized copy's dequantize), or a step of a call whose
    result is compared where the call ends (a dequantized matmul against a Linear)."""
    users = ir.users()
    made_from: dict[str, list[str]] = {}
    """An op of ``alone`` that reads parameters, buffers and constants only -> those it is made from."""
    found: dict[str, str] = {}
    for node in ir.ops():
        if node.id not in alone:
            continue
        sources = _state_sources(ir, node, made_from)
        if sources:
            made_from[node.id] = sources
            found[node.id] = (f"prepares a weight from {', '.join(sources)} alone (dequantized, cast or laid out) "
                              f"where {other} reads its weights as they are; read through")
            continue
        end = _compared_end(ir, node, users, partnered)
        found[node.id] = alone[node.id] if end is None else (
            f"a step {other} computes in other ops; compared where it ends, at {op_label(ir, end)} [{end.id}]")
    return found


def _state_sources(ir: GraphIR, node: Node, made_from: dict[str, list[str]]) -> list[str]:
    """The parameters, buffers and tensor attributes ``node`` is made from, when it reads nothing
    else (directly or through ops of ``made_from``); [] when it reads an input or another op."""
    sources: list[str] = []
    for ref in node.inputs:
        source = ir.node(ref.node)
        if source.kind in ("param", "buffer") or (source.kind == "constant" and source.path):
            sources.append(source.path)  # a constant with a path: a tensor attribute of a module
        elif source.id in made_from:
            sources += made_from[source.id]
        elif source.kind != "constant":
            return []
    return list(dict.fromkeys(sources))


def _compared_end(ir: GraphIR, node: Node, users: dict[str, list[str]], partnered: set[str]) -> Node | None:
    """The op with a partner that ``node``'s result reaches within its own call, through ops without one."""
    queue, seen = list(users[node.id]), set()
    while queue:
        reader = ir.node(queue.pop(0))
        if reader.id in seen or reader.kind != "op" or reader.scope != node.scope:
            continue
        seen.add(reader.id)
        if reader.id in partnered:
            return reader
        queue += users[reader.id]
    return None


def _pair_by_numbers(a: GraphIR, b: GraphIR, left: list[Node], only_b: dict[str, str], atol: float, rtol: float) -> dict[str, str]:
    """Ops the diff left over, paired in order by the same hash, else by values within the tolerance."""
    pool = [b.node(i) for i in only_b]
    pairs: dict[str, str] = {}
    for exact in (True, False):
        for node in left:
            if node.id in pairs:
                continue
            mine = _fingerprints(node)
            for other in pool:
                theirs = _fingerprints(other)
                if other.id in pairs.values() or len(theirs) != len(mine) or not mine:
                    continue
                if all(_alike(x, y, exact, atol, rtol) for x, y in zip(mine, theirs)):
                    pairs[node.id] = other.id
                    break
    return pairs


def _alike(x: Any, y: Any, exact: bool, atol: float, rtol: float) -> bool:
    if not (isinstance(x, dict) and isinstance(y, dict)) or "hash" not in x or "hash" not in y:
        return False
    if exact:
        return bool(x["hash"]) and x["hash"] == y["hash"] and x.get("count") == y.get("count")
    return x.get("count") == y.get("count") and not errors(x, y, atol, rtol, None).off


def _op_errors(a: Node, b: Node, atol: float, rtol: float, metric: Metric | None) -> Errors | str:
    """The op's errors over its outputs, or why they cannot be measured."""
    mine, theirs = _fingerprints(a), _fingerprints(b)
    if not mine and not theirs:
        return "neither run has its fingerprint (trace with fingerprint=True)"
    found = []
    for slot, (x, y) in enumerate(zip(mine, theirs)):
        if not isinstance(x, dict) or not isinstance(y, dict):
            continue
        skipped = x.get("skipped") or y.get("skipped")
        if skipped:
            if slot == 0:
                return str(skipped)
            continue
        found.append(errors(x, y, atol, rtol, metric))
    if not found:
        return "no output of it was measured in both runs"
    return worst(found)


def error_value(op: OpComparison, metric: str) -> float | None:
    """The number an op's error is drawn as: ``max_abs``, ``max_rel``, ``cosine`` (as 1 - cosine)
    or ``metric`` (the user's)."""
    e = op.errors
    if e is None:
        return None
    value = {"max_abs": e.max_abs, "max_rel": e.max_rel, "cosine": 1.0 - e.cosine, "metric": e.metric}[metric]
    return value if value is None or math.isfinite(value) else None
