"""Repeated structure: runs of identical sibling module calls that a view can fold to ``×N``.

Each scope gets a structural hash of its subgraph: for every op (in order) its target,
non-tensor arguments, output shapes and dtypes, and where each input comes from —
an earlier op of the same call (by offset), a value from outside (numbered by first
read), a parameter (by its path below the call) or a constant (by shape) — plus
its child calls' classes and hashes. Module paths and node ids stay out of it, so
``layers.3`` and ``layers.4`` hash alike, and so do two calls of one shared layer.

A group is a run of two or more consecutive siblings with the same class and hash
whose paths are equal (a loop calling one module), or entries of one parent named with a
common stem and a number (``layers.0``, torchvision's ``encoder_layer_0``), or entries of one
``Sequential``/``ModuleList``/``ModuleDict`` (any names), and that form a chain:
each call reads what the one before it made, and the caller runs no op in between.
Siblings that merely look alike (``q_proj``/``k_proj``) are not folded, and neither
are calls side by side (one encoder run on two inputs): folded, they would read as
a chain of calls that did not run as one.

A *loop* is a run of calls of one module with the caller's own ops between them, the
same ops each time (the same lines, targets, arguments and shapes), after the last call too: a
loop body such as ``new = step(h); delta = new - h; if delta.abs().mean() < 0.2: break``.
Each iteration reads what the one before made. Its group also lists the caller's ops of each iteration
(``body``; node meta ``repeat`` on each), and where it stopped (``exit``: the ``break``
that was taken, from capture's node meta ``reads``). Iterations whose ops differ do not fold.

Each group also carries the run's ``totals``: the members' FLOPs, MACs, activation bytes,
times and NaN/Inf op counts summed, and parameters once per module (a loop calling one
module owns one set), where every member has the number. Every output reads a fold's
numbers from there (``run_totals``, run by ``analyze`` once the other passes' results are in).
"""

from __future__ import annotations

import bisect
import hashlib
import re
from collections.abc import Mapping
from typing import Any

from torchatlas._ir import GraphIR, Ref, Scope
from torchatlas._passes._common import MetaUpdate, Pass, subtree_ends
from torchatlas._text import fold_label

_STATE_KINDS = frozenset({"param", "buffer"})


def _normalize(value: Any) -> Any:
    """Arguments as hashable data; free-form reprs (object addresses, caches) are dropped."""
    if isinstance(value, list):
        return tuple(_normalize(v) for v in value)
    if isinstance(value, dict):
        if "repr" in value:
            return "<repr>"
        return tuple(sorted((k, _normalize(v)) for k, v in value.items()))
    return value


def structural_hashes(ir: GraphIR) -> dict[str, str]:
    """Scope id -> a hash of the structure of everything that ran inside that call."""
    position = {s.id: i for i, s in enumerate(ir.scopes)}
    ends = subtree_ends(ir)
    op_index: dict[str, int] = {}
    first_op: dict[str, int] = {}
    external: dict[str, dict[Ref, int]] = {s.id: {} for s in ir.scopes}
    items: dict[str, list[Any]] = {s.id: [] for s in ir.scopes}

    def ref_code(scope: Scope, ref: Ref) -> tuple[Any, ...]:
        producer = ir.node(ref)
        if producer.kind in _STATE_KINDS:
            path = producer.path or ""
            prefix = scope.path + "." if scope.path else ""
            return ("P", path[len(prefix):] if prefix and path.startswith(prefix) else path)
        if producer.kind == "constant":
            meta = ir.value_meta(ref)
            return ("C", meta.shape if meta else None, meta.dtype if meta else None)
        if producer.kind == "op" and position[scope.id] <= position[producer.scope] <= ends[scope.id]:
            return ("L", op_index[ref.node] - first_op[scope.id], ref.slot)
        seen = external[scope.id]
        return ("E", seen.setdefault(ref, len(seen)))

    for n in ir.nodes:
        if n.kind != "op":
            continue
        index = op_index[n.id] = len(op_index)
        cur: str | None = n.scope
        while cur is not None and cur not in first_op:  # ancestors learn their first op once
            first_op[cur] = index
            cur = ir.scope(cur).parent
        scope = ir.scope(n.scope)
        refs = tuple(ref_code(scope, r) for r in n.inputs)
        outs = tuple((m.shape, m.dtype) for m in n.outputs)
        items[n.scope].append((n.target, _normalize(n.args), _normalize(n.kwargs), outs, refs, n.inplace))

    hashes: dict[str, str] = {}
    children: dict[str, list[tuple[str, str]]] = {s.id: [] for s in ir.scopes}
    for s in reversed(ir.scopes):
        outputs = tuple(ref_code(s, o) for o in s.outputs)
        signature = (s.cls, tuple(items[s.id]), tuple(reversed(children[s.id])), outputs)
        hashes[s.id] = hashlib.blake2b(repr(signature).encode(), digest_size=8).hexdigest()
        if s.parent is not None:
            children[s.parent].append((s.cls, hashes[s.id]))
    return hashes


_NUMBERED = re.compile(r"^(.*?)(\d+)$")
_CONTAINERS = frozenset(f"torch.nn.modules.container.{name}" for name in ("Sequential", "ModuleList", "ModuleDict"))


def _containers(ir: GraphIR) -> set[str]:
    """Paths whose entries are one container's: a called ``Sequential``, and any module path
    that holds called modules but is never called itself (a ``ModuleList`` or ``ModuleDict``)."""
    called = {s.path for s in ir.scopes}
    held = {s.path.rpartition(".")[0] for s in ir.scopes if s.path}
    return {s.path for s in ir.scopes if s.cls in _CONTAINERS} | (held - called)


def _same_slot(a: Scope, b: Scope, containers: set[str]) -> bool:
    """Two calls of one module, or two entries of one parent numbered alike (``layers.0``,
    ``layers.1``; torchvision's ``encoder_layer_0``, ``encoder_layer_1``), or two entries of one
    ``Sequential``/``ModuleList``/``ModuleDict`` whatever their names."""
    if a.path == b.path:
        return True
    (prefix_a, _, name_a), (prefix_b, _, name_b) = a.path.rpartition("."), b.path.rpartition(".")
    if prefix_a != prefix_b:
        return False
    numbered_a, numbered_b = _NUMBERED.match(name_a), _NUMBERED.match(name_b)
    return (numbered_a is not None and numbered_b is not None and numbered_a[1] == numbered_b[1]) or prefix_a in containers


class _Chains:
    """Whether one call follows straight on from the call before it."""

    def __init__(self, ir: GraphIR) -> None:
        self.ir = ir
        self.position = {s.id: i for i, s in enumerate(ir.scopes)}
        self.ends = subtree_ends(ir)
        self.op_scope: dict[str, int] = {}  # op id -> its scope's position
        self.op_indices: list[list[int]] = [[] for _ in ir.scopes]  # per scope: its own ops' places in ir.nodes
        span: list[tuple[int, int] | None] = [None] * len(ir.scopes)
        for index, n in enumerate(ir.nodes):
            if n.kind == "op":
                where = self.op_scope[n.id] = self.position[n.scope]
                self.op_indices[where].append(index)
                span[where] = (span[where] or (index, index))[0], index
        for s in reversed(ir.scopes):  # a call's span holds its callees' ops
            own, parent = span[self.position[s.id]], s.parent
            if own is not None and parent is not None:
                p = self.position[parent]
                span[p] = own if span[p] is None else (min(span[p][0], own[0]), max(span[p][1], own[1]))
        self.span = span

    def follows(self, prev: Scope, s: Scope) -> bool:
        """``s`` reads a value made inside ``prev``, and their caller ran no op between them."""
        before, after = self.span[self.position[prev.id]], self.span[self.position[s.id]]
        if before is None or after is None:
            return False
        if s.parent is not None:
            between = self.op_indices[self.position[s.parent]]
            if bisect.bisect_right(between, before[1]) < bisect.bisect_left(between, after[0]):
                return False
        low, high = self.position[prev.id], self.ends[prev.id]
        return any(
            low <= self.op_scope.get(r.node, -1) <= high
            for where in range(self.position[s.id], self.ends[s.id] + 1)
            for i in self.op_indices[where]
            for r in self.ir.nodes[i].inputs
        )


def _runs(ir: GraphIR, hashes: dict[str, str]) -> list[list[Scope]]:
    """Runs of two or more foldable consecutive siblings, in call order of their first member."""
    runs: list[list[Scope]] = []
    chains = _Chains(ir)
    containers = _containers(ir)
    for siblings in ir.children().values():
        run: list[Scope] = []
        for s in [ir.scope(sid) for sid in siblings]:
            prev = run[-1] if run else None
            if (
                prev is not None and s.cls == prev.cls and hashes[s.id] == hashes[prev.id] and _same_slot(prev, s, containers)
                and chains.follows(prev, s)
            ):
                run.append(s)
                continue
            if len(run) > 1:
                runs.append(run)
            run = [s]
        if len(run) > 1:
            runs.append(run)
    order = {s.id: i for i, s in enumerate(ir.scopes)}
    return sorted(runs, key=lambda r: order[r[0].id])


def _body_signature(ir: GraphIR, node_ids: list[str]) -> tuple[Any, ...]:
    """What one iteration's own ops are, without ids: lines, targets, arguments and shapes."""
    out = []
    for node_id in node_ids:
        n = ir.node(node_id)
        where = (n.source.file, n.source.line) if n.source is not None else None
        outs = tuple((m.shape, m.dtype) for m in n.outputs)
        out.append((where, n.target, _normalize(n.args), _normalize(n.kwargs), outs, n.inplace))
    return tuple(out)


def _loop_runs(ir: GraphIR, hashes: dict[str, str], taken: set[str]) -> list[tuple[list[Scope], list[list[str]]]]:
    """Runs of two or more calls of one module with the same caller ops between them, each
    call reading what the iteration before made: (members, each iteration's caller ops)."""
    chains = _Chains(ir)
    found: list[tuple[list[Scope], list[list[str]]]] = []
    for parent, siblings in ir.children().items():
        if parent is None:
            continue
        own = chains.op_indices[chains.position[parent]]
        calls = [ir.scope(sid) for sid in siblings]

        def between(after: Scope, before: Scope | None, own: list[int] = own) -> list[str]:
            low = chains.span[chains.position[after.id]]
            high = chains.span[chains.position[before.id]] if before is not None else None
            if low is None or (before is not None and high is None):
                return []
            end = high[0] if high is not None else len(ir.nodes)
            return [ir.nodes[i].id for i in own[bisect.bisect_right(own, low[1]) : bisect.bisect_left(own, end)]]

        k = 0
        while k < len(calls) - 1:
            first = calls[k]
            if first.id in taken or calls[k + 1].path != first.path or hashes[calls[k + 1].id] != hashes[first.id]:
                k += 1
                continue
            members, bodies = [first], []
            body = between(first, calls[k + 1])
            signature = _body_signature(ir, body) if body else None
            j = k + 1
            while signature is not None and j < len(calls):
                prev, s = calls[j - 1], calls[j]
                if s.id in taken or prev.id in taken or s.path != first.path or hashes[s.id] != hashes[first.id]:
                    break
                gap = between(prev, s)
                if _body_signature(ir, gap) != signature or not _reads_from(ir, chains, s, prev, gap):
                    break
                members.append(s)
                bodies.append(gap)
                j += 1
            # the last call's iteration must run the same ops after it (the break test): two
            # calls with one op between them (fc(relu(fc(x)))) are no loop
            after = between(members[-1], calls[j] if j < len(calls) else None)[: len(body)] if len(members) > 1 else []
            if len(members) > 1 and _body_signature(ir, after) == signature:
                found.append((members, [*bodies, after]))
                k = j
            else:
                k += 1
    order = {s.id: i for i, s in enumerate(ir.scopes)}
    return sorted(found, key=lambda run: order[run[0][0].id])


def _reads_from(ir: GraphIR, chains: _Chains, call: Scope, prev: Scope, gap: list[str]) -> bool:
    """``call`` reads a value made in the iteration before it: in ``prev`` or the ops after it."""
    made = set(gap)
    low, high = chains.position[prev.id], chains.ends[prev.id]
    return any(
        r.node in made or low <= chains.op_scope.get(r.node, -1) <= high
        for where in range(chains.position[call.id], chains.ends[call.id] + 1)
        for i in chains.op_indices[where]
        for r in ir.nodes[i].inputs
    )


def _loop_exit(ir: GraphIR, last_body: list[str]) -> dict[str, Any] | None:
    """The ``break`` the last iteration took, from capture's node meta ``reads``."""
    for node_id in last_body:
        for read in ir.node(node_id).meta.get("reads") or ():
            if read.get("statement") == "break" and read.get("value") is True:
                return {"statement": "break", "source": read.get("source"), "loop": read.get("loop")}
    return None


def find_repeats(ir: GraphIR) -> GraphIR:
    """Mark runs of identical consecutive sibling calls.

    Each member gets ``scope.meta["repeat"] = {"group", "index", "count"}``; every scope
    gets ``structure_hash``; graph meta ``repeat_groups`` lists
    ``{"group", "scopes", "count", "label", "totals"}`` in call order (totals of the numbers
    ``ir`` already holds).
    """
    found = find_repeats_update(ir)
    found.merge(run_totals(ir, found))
    return found.apply(ir)


def find_repeats_update(ir: GraphIR) -> MetaUpdate:
    """The meta :func:`find_repeats` adds, not yet applied."""
    hashes = structural_hashes(ir)
    scope_meta: dict[str, dict[str, Any]] = {sid: {"structure_hash": h} for sid, h in hashes.items()}
    groups: list[dict[str, Any]] = []
    runs = _runs(ir, hashes)
    taken = {s.id for run in runs for s in run}
    loops = _loop_runs(ir, hashes, taken)
    bodies = {run[0].id: body for run, body in loops}
    order = {s.id: i for i, s in enumerate(ir.scopes)}
    node_meta: dict[str, dict[str, Any]] = {}
    for number, run in enumerate(sorted(runs + [run for run, _ in loops], key=lambda r: order[r[0].id])):
        group = f"g{number}"
        for i, member in enumerate(run):
            scope_meta[member.id]["repeat"] = {"group": group, "index": i, "count": len(run)}
        entry = {"group": group, "scopes": [m.id for m in run], "count": len(run), "label": fold_label(run[0].path, run[-1].path, run[0].class_name, len(run))}
        body = bodies.get(run[0].id)
        if body is not None:
            entry["body"] = body
            for i, ops in enumerate(body):
                for node_id in ops:
                    node_meta[node_id] = {"repeat": {"group": group, "index": i, "count": len(run)}}
            stop = _loop_exit(ir, body[-1])
            if stop is not None:
                entry["exit"] = stop
        groups.append(entry)
    return MetaUpdate(nodes=node_meta, scopes=scope_meta, graph={"repeat_groups": groups})


SUMMED = ("flops", "macs", "activation_bytes", "time_us", "cuda_time_us", "nonfinite_ops")
"""Scope meta a run's total adds up over its members."""
OWNED = ("params", "trainable_params", "param_bytes")
"""Scope meta a run's total adds up once per module: a loop calling one module owns one set."""


def run_totals(ir: GraphIR, found: MetaUpdate) -> MetaUpdate:
    """``repeat_groups`` with each run's ``totals``, from ``ir``'s scope meta and the other
    passes' results in ``found`` (not yet applied): summed once here, read by every output."""
    groups = found.graph.get("repeat_groups", ir.meta.get("repeat_groups")) or []

    def meta(sid: str) -> Mapping[str, Any]:
        return {**ir.scope(sid).meta, **found.scopes.get(sid, {})}

    totalled = []
    for entry in groups:
        members = [meta(sid) for sid in entry["scopes"]]
        totals: dict[str, int | float] = {}
        for key in SUMMED:
            values = [m.get(key) for m in members]
            if all(_number(v) for v in values):
                totals[key] = sum(values)
        owners = list({ir.scope(sid).path: m for sid, m in zip(entry["scopes"], members, strict=True)}.values())
        for key in OWNED:  # calls of one shared module own one set
            values = [m.get(key) for m in owners]
            if all(_number(v) for v in values):
                totals[key] = sum(values)
        totalled.append({**entry, "totals": totals})
    return MetaUpdate(graph={"repeat_groups": totalled})


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value and abs(value) != float("inf")


PASS = Pass(
    "repeats",
    find_repeats_update,
    node_keys=frozenset({"repeat"}),
    scope_keys=frozenset({"structure_hash", "repeat"}),
    graph_keys=frozenset({"repeat_groups"}),
    after=run_totals,
)
