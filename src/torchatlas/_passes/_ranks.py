"""Every rank's graph side by side: the hang check and where ranks differ.

A collective finishes only when every rank of its group issues the same one: the same
kind, with sizes and a dtype that fit together, in the same order. :func:`check_ranks`
lines the ranks' collectives up per process group in issue order and names the first
step where they part (a **predicted hang**), all-gathers and reduce-scatters whose
ranks give unequal shards, and sends that no receive matches. Each problem is a plain
JSON-ready dict (the multi-rank document keeps them; ``_render`` words them).

Like the diff, this is a pass over several graphs, not one of ``PASSES``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torchatlas._ir import GraphIR, Node, TensorMeta
from torchatlas._ops import collective_kind
from torchatlas._passes._common import dtype_bytes

POINT_TO_POINT = frozenset({"send", "recv"})
SAME_SIZE = frozenset({"all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce"})
"""Collectives whose every rank gives as many bytes (an all-to-all's splits may differ)."""
SHARDED = frozenset({"all_gather", "reduce_scatter"})


def rank_of(ir: GraphIR) -> int:
    """The rank a graph was traced as (``meta["distributed"]["rank"]``)."""
    facts = ir.meta.get("distributed")
    if not isinstance(facts, dict) or not isinstance(facts.get("rank"), int):
        raise ValueError(f"graph of {ir.meta.get('model', '?')} was not traced under a process group (no rank)")
    return facts["rank"]


def _shapes(metas: Sequence[TensorMeta | None]) -> list[list[Any]]:
    return [list(m.shape) for m in metas if m is not None]


def _local_bytes(meta: TensorMeta) -> int:
    """What this rank holds of a value (a DTensor's local part)."""
    return int(meta.local_numel() * (dtype_bytes(meta.dtype) or 0))


def _sent(ir: GraphIR, node: Node) -> list[TensorMeta | None]:
    return [ir.value_meta(ref) for ref in node.inputs]


def collectives(ir: GraphIR) -> list[dict[str, Any]]:
    """Each collective ``ir`` issued, in issue order: its kind, group, sizes and where it ran."""
    found = []
    for position, node in enumerate(ir.nodes):
        facts = node.meta.get("collective")
        if node.kind != "op" or not isinstance(facts, dict):
            continue
        sent, received = _sent(ir, node), list(node.outputs)
        some = next((m for m in (*received, *sent) if m is not None), None)
        scope = ir.scope(node.scope)
        found.append(
            {
                "op": collective_kind(node.target) or str(facts.get("op")),
                "group": str(facts.get("group")),
                "members": list(facts["ranks"]) if isinstance(facts.get("ranks"), list) else None,
                "bytes": facts.get("bytes"),
                "sent": _shapes(sent),
                "sent_bytes": sum(_local_bytes(m) for m in sent if m is not None),
                "received": _shapes(received),
                "dtype": some.dtype if some is not None else None,
                "peer": facts.get("peer"),
                "action": facts.get("action"),
                "splits": facts.get("splits") if isinstance(facts.get("splits"), dict) else None,
                "node": node.id,
                "position": position,
                "source": None if node.source is None else f"{node.source.file}:{node.source.line}",
                "code": None if node.source is None else node.source.code,
                "module": scope.label,
            }
        )
    return found


def check_ranks(graphs: Sequence[GraphIR]) -> list[dict[str, Any]]:
    """The problems of a job whose ranks run ``graphs`` (one per rank): predicted hangs,
    unequal shards and unmatched sends and receives, each at its first step."""
    by_rank = {rank_of(ir): ir for ir in graphs}
    issued = {rank: collectives(ir) for rank, ir in by_rank.items()}
    problems = _group_problems(issued)
    problems += _point_to_point_problems(issued)
    for problem in problems:
        problem["decision"] = _parting_decision(by_rank, problem)
    return problems


def _group_key(entry: dict[str, Any]) -> tuple[str, tuple[int, ...] | None]:
    members = entry["members"]
    return entry["group"], tuple(members) if members is not None else None


def _group_problems(issued: dict[int, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    sequences: dict[tuple[str, tuple[int, ...] | None], dict[int, list[dict[str, Any]]]] = {}
    for rank, entries in issued.items():
        for entry in entries:
            if entry["op"] not in POINT_TO_POINT:
                sequences.setdefault(_group_key(entry), {}).setdefault(rank, []).append(entry)
    problems = []
    for (group, members), by_rank in sorted(sequences.items(), key=lambda kv: (kv[0][0], kv[0][1] or ())):
        ranks = sorted(set(members) if members is not None else set(by_rank))
        ranks = [r for r in ranks if r in issued]  # a rank not traced cannot be checked
        steps = max(len(by_rank.get(r, [])) for r in ranks)
        for step in range(steps):
            at = {r: (by_rank.get(r, [])[step] if step < len(by_rank.get(r, [])) else None) for r in ranks}
            problem = _step_problem(at)
            if problem is not None:
                problems.append({"group": group, "members": ranks, "step": step, **problem, "at": at})
                break  # past a hang, later steps no longer line up
    return problems


def _step_problem(at: dict[int, dict[str, Any] | None]) -> dict[str, Any] | None:
    """What parts the ranks' collectives at one step, or None where they fit together."""
    missing = [r for r, e in at.items() if e is None]
    present = {r: e for r, e in at.items() if e is not None}
    if missing:
        return {"kind": "hang", "why": "missing", "ranks": missing}
    if len({e["op"] for e in present.values()}) > 1:
        return {"kind": "hang", "why": "collective", "ranks": sorted(present)}
    if len({e["dtype"] for e in present.values()}) > 1:
        return {"kind": "hang", "why": "dtype", "ranks": sorted(present)}
    op = next(iter(present.values()))["op"]
    if op in SAME_SIZE and len({e["sent_bytes"] for e in present.values()}) > 1:
        kind = "unequal shards" if op in SHARDED else "hang"
        return {"kind": kind, "why": "bytes", "ranks": sorted(present)}
    if op == "all_to_all":
        return _splits_problem(present)
    return None


def _splits_problem(present: dict[int, dict[str, Any]]) -> dict[str, Any] | None:
    """An all-to-all whose rank r sends rank q other rows than q expects from r."""
    if any(e["splits"] is None or e["splits"].get("checked") is False for e in present.values()):
        return None  # unknown, or sizes a fake group's exchange of counts made up
    order = next(iter(present.values()))["members"] or sorted(present)
    for i, r in enumerate(order):
        for j, q in enumerate(order):
            sent, expected = present[r]["splits"]["sent"], present[q]["splits"]["received"]
            if j < len(sent) and i < len(expected) and sent[j] != expected[i]:
                return {"kind": "unequal splits", "why": "splits", "ranks": sorted({r, q})}
    return None


def _elements(shapes: list[list[Any]]) -> list[int]:
    """What a backend matches a send and its receive by: each tensor's element count (torch's
    own pipeline stages send a 0-d tensor into a 1-element buffer)."""
    counts = []
    for shape in shapes:
        n = 1
        for size in shape:
            n *= int(size) if isinstance(size, int) else 0
        counts.append(n)
    return counts


def _point_to_point_problems(issued: dict[int, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Sends from rank a to rank b, in order, against b's receives from a."""
    sends: dict[tuple[int, int], list[dict[str, Any]]] = {}
    recvs: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for rank, entries in issued.items():
        for entry in entries:
            peer = entry["peer"]
            if entry["op"] == "send" and isinstance(peer, int):
                sends.setdefault((rank, peer), []).append(entry)
            elif entry["op"] == "recv" and isinstance(peer, int):
                recvs.setdefault((peer, rank), []).append(entry)
    problems = []
    for src, dst in sorted(set(sends) | set(recvs)):
        sent, got = sends.get((src, dst), []), recvs.get((src, dst), [])
        for step in range(max(len(sent), len(got))):
            a = sent[step] if step < len(sent) else None
            b = got[step] if step < len(got) else None
            if a is None or b is None:
                problem = {"kind": "hang", "why": "unmatched", "ranks": [dst if b is None else src]}
            elif _elements(a["sent"]) != _elements(b["received"]) or a["dtype"] != b["dtype"]:
                problem = {"kind": "hang", "why": "p2p shape", "ranks": [src, dst]}
            else:
                continue
            problems.append(
                {"group": f"{src}→{dst}", "members": [src, dst], "step": step, **problem, "at": {src: a, dst: b}}
            )
            break
    return problems


def _dispatches(ir: GraphIR) -> list[tuple[str, list[int], tuple[int, ...]]]:
    """Per module call that dispatches tokens with an all-to-all (an MoE layer's experts), its
    first all-to-all of floating-point values (an exchange of token counts before it moves
    integers): (scope id, the rows it sends each rank of its group, the group's ranks)."""
    found, seen = [], set()
    for node in ir.ops():
        facts = node.meta.get("collective") or {}
        splits, members = facts.get("splits"), facts.get("ranks")
        moved = node.outputs[0].dtype if node.outputs else None
        if isinstance(splits, dict) and isinstance(members, list) and "float" in str(moved) and node.scope not in seen:
            seen.add(node.scope)
            found.append((node.scope, [int(rows) for rows in splits["sent"]], tuple(members)))
    return found


def expert_loads(graphs: Sequence[GraphIR]) -> dict[int, dict[str, int]]:
    """Per rank, the tokens its experts run on in each dispatching call (by scope id): the rows
    every rank of the group sends it at that dispatch. Summed from the senders, whose rows come
    from their own routing, so it holds on a fake group too (whose exchange of counts makes up
    what a rank is told it receives)."""
    dispatched = {rank_of(ir): _dispatches(ir) for ir in graphs}
    loads: dict[int, dict[str, int]] = {rank: {} for rank in dispatched}
    for rank, found in dispatched.items():
        for step, (scope, _, members) in enumerate(found):
            if rank not in members:
                continue
            place = members.index(rank)
            rows = 0
            for sender in members:
                theirs = dispatched.get(sender, [])
                if step < len(theirs) and theirs[step][2] == members and place < len(theirs[step][1]):
                    rows += theirs[step][1][place]
            loads[rank][scope] = rows
    return loads


# -- the decision that sent ranks apart ---------------------------------------------------------


def _decisions_before(ir: GraphIR, limit: int) -> list[dict[str, Any]]:
    """The reads of a tensor's value into Python (a branch, ``.item()``) made by nodes before ``limit``."""
    found = []
    for node in ir.nodes[:limit]:
        for read in node.python_reads:
            if read.decision and read.source is not None:
                found.append(
                    {
                        "file": read.source.file, "line": read.source.line, "code": read.source.code,
                        "statement": read.statement, "as": read.how, "value": read.value,
                    }
                )
    return found


def _parting_decision(by_rank: dict[int, GraphIR], problem: dict[str, Any]) -> dict[str, Any] | None:
    """The first line whose read of a tensor went differently on the ranks of ``problem``,
    among the reads each made before its collective at the step (None: they parted on
    something no tensor decided, such as the rank itself)."""
    reads: dict[int, list[dict[str, Any]]] = {}
    for rank, entry in problem["at"].items():
        ir = by_rank[rank]
        reads[rank] = _decisions_before(ir, entry["position"] if entry is not None else len(ir.nodes))
    places: dict[tuple[str, int], dict[int, list[Any]]] = {}
    for rank, found in reads.items():
        for read in found:
            places.setdefault((read["file"], read["line"]), {}).setdefault(rank, []).append(read)
    for (file, line), outcomes in places.items():
        if len(outcomes) < len(reads):
            continue  # a line some rank never reached says nothing of why it went elsewhere
        values = {rank: [r["value"] for r in found] for rank, found in outcomes.items()}
        if len({tuple(map(repr, v)) for v in values.values()}) > 1:
            first = next(iter(outcomes.values()))[0]
            return {
                "source": f"{file}:{line}", "code": first["code"], "statement": first["statement"],
                "as": first["as"], "values": {rank: v[0] if len(v) == 1 else v for rank, v in values.items()},
            }
    return None


# -- where ranks differ ------------------------------------------------------------------------


def _call_contents(ir: GraphIR) -> dict[tuple[str, int], dict[str, Any]]:
    """Per module call (path, call index): its label and the ops run directly in it."""
    calls: dict[tuple[str, int], dict[str, Any]] = {}
    for scope in ir.scopes:
        calls[(scope.path, scope.call)] = {"label": scope.label, "ops": [], "shapes": [], "collectives": []}
    by_id = {s.id: (s.path, s.call) for s in ir.scopes}
    for node in ir.ops():
        entry = calls[by_id[node.scope]]
        kind = collective_kind(node.target)
        entry["ops"].append(kind or (node.target or "?").rsplit(".", 1)[-1])
        entry["shapes"].append([list(m.local_shape if m.local_shape is not None else m.shape) for m in node.outputs])
        if kind is not None:
            facts = node.meta.get("collective") or {}
            entry["collectives"].append(f"{kind} {facts.get('group', '?')} {facts.get('bytes', '?')} B")
    return calls


def _counted(items: list[str]) -> str:
    counts = {item: items.count(item) for item in dict.fromkeys(items)}
    return ", ".join(item if n == 1 else f"{item} ×{n}" for item, n in counts.items()) or "nothing"


def rank_differences(graphs: Sequence[GraphIR]) -> list[dict[str, Any]]:
    """The module calls whose ranks run different ops, shapes or collectives, or that some ranks
    never make, in call order: ``{"path", "call", "label", "what", "by_rank": {rank: text}}``
    (``what``: ``absent``, ``collectives``, ``ops`` or ``shapes``)."""
    contents = {rank_of(ir): _call_contents(ir) for ir in graphs}
    found = []
    for ranks in _alike(graphs):
        found += _differences(contents, ranks)
    return found


def _alike(graphs: Sequence[GraphIR]) -> list[list[int]]:
    """The sets of ranks that run the same program: every rank, or in a pipeline the ranks
    holding the same stages (a stage's ranks differ from another stage's by design)."""
    sets: dict[Any, list[int]] = {}
    for ir in graphs:
        pipeline = ir.meta.get("pipeline")
        stages = tuple(pipeline.get("stages") or ()) if isinstance(pipeline, dict) else None
        sets.setdefault(stages, []).append(rank_of(ir))
    return [sorted(ranks) for ranks in sets.values() if len(ranks) > 1]


def _differences(contents: dict[int, dict[tuple[str, int], dict[str, Any]]], ranks: list[int]) -> list[dict[str, Any]]:
    order = list(dict.fromkeys(key for rank in ranks for key in contents[rank]))
    found = []
    for key in order:
        here = {rank: contents[rank].get(key) for rank in ranks}
        label = next(c["label"] for c in here.values() if c is not None)
        what, by_rank = None, {}
        if any(c is None for c in here.values()):
            what = "absent"
            by_rank = {r: ("runs" if c is not None else "never called") for r, c in here.items()}
        else:
            for aspect in ("collectives", "ops", "shapes"):
                if len({repr(c[aspect]) for c in here.values() if c is not None}) > 1:
                    what = aspect
                    break
            if what == "shapes":
                by_rank = {r: " ".join("×".join(map(str, s[0])) if s else "-" for s in c["shapes"]) for r, c in here.items()}
            elif what is not None:
                by_rank = {r: _counted(c[what]) for r, c in here.items()}
        if what is not None:
            found.append({"path": key[0], "call": key[1], "label": label, "what": what, "by_rank": by_rank})
    return found
