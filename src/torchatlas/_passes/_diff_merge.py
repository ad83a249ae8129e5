"""One graph holding both sides of a diff, for the viewer: ``b`` with what only ``a`` had put back.

Every node and call of ``b`` is kept (a matched one stands for both sides); a call or op
only ``a`` has is added where it was: a call under its parent's match, after the sibling it
followed, an op after the match of the last matched op before it, reading the matches of
what it read. Each node and call carries ``meta["diff"]`` (``same``, ``changed``, ``added``,
``removed``, ``pass-through``) and, where it changed, ``meta["diff_note"]`` (``relu → tanh``)
and ``meta["diff_changes"]`` (every ``field before → after``); a renamed call its name in ``a``
(``meta["diff_a_path"]``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from torchatlas._ir import GraphIR, Node, Ref, Scope
from torchatlas._passes._diff_match import Matching, resolve
from torchatlas._passes._diff_records import DiffCall, NodeMatch
from torchatlas._text import fact_words

_PREFIX = "a·"
"""Ids of what only ``a`` had: ``a·n17`` (``b``'s ids are kept as they are)."""


def merged_graph(
    a: GraphIR, b: GraphIR, m: Matching, nodes: list[NodeMatch], node_changes: dict[str, list[str]],
    calls: list[DiffCall], keys: list[tuple[str, str]],
) -> GraphIR:
    """``b`` with ``a``'s removed calls and ops put back, every node and call marked."""
    call_of = dict(zip(keys, calls))
    a_of = {sb: sa for sa, sb in m.calls.items()}
    scope_map = {sa: sb for sa, sb in m.calls.items()}  # a's scope id -> its id in the merged graph
    scopes: list[Scope] = []
    statuses: dict[str, str] = {}
    for side, sid in keys:  # the merged tree's order: removed calls where they were
        c = call_of[(side, sid)]
        if side == "b":
            s = b.scope(sid)
            new = replace(s, meta={**s.meta})
            before = a_of.get(sid)
            if before is not None and a.scope(before).path != s.path:
                new.meta["diff_a_path"] = a.scope(before).path
        else:
            s = a.scope(sid)
            new_id = _PREFIX + sid
            scope_map[sid] = new_id
            parent = None if s.parent is None else scope_map.get(s.parent, _PREFIX + s.parent)
            meta = {k: v for k, v in s.meta.items() if k != "repeat"}  # a's fold groups are not b's
            new = replace(s, id=new_id, parent=parent, outputs=[], inputs=[], meta=meta)
        new.meta["diff"] = c.status
        if c.notes:
            new.meta["diff_changes"] = list(c.notes)
        note = _call_note(c)
        if note:
            new.meta["diff_note"] = note
        statuses[new.id] = c.status
        scopes.append(new)
    _split_mixed_folds(scopes, statuses)

    through_a = m.pass_through["a"]
    status_b = {n.b: n.status for n in nodes if n.b is not None}
    removed = {n.a for n in nodes if n.status == "removed" and n.a is not None}

    def mapped(ref: Ref) -> Ref:
        ref = resolve(a, ref, through_a)
        if ref.node in m.nodes:
            return Ref(m.nodes[ref.node], ref.slot)
        return Ref(_PREFIX + ref.node, ref.slot)

    inserted: dict[str | None, list[Node]] = {}
    anchor: str | None = None
    for n in a.nodes:
        if n.id in m.nodes:
            anchor = m.nodes[n.id]
        elif n.id in removed:
            scope = scope_map.get(n.scope, _PREFIX + n.scope)
            meta = {k: v for k, v in n.meta.items()}
            meta["diff"] = "removed"
            inserted.setdefault(anchor, []).append(
                replace(n, id=_PREFIX + n.id, scope=scope, inputs=[mapped(r) for r in n.inputs],
                        shape_inputs=[], meta=meta)
            )
    out_nodes: list[Node] = list(inserted.get(None, []))
    for n in b.nodes:
        meta = {**n.meta, "diff": status_b.get(n.id, "same")}
        if node_changes.get(n.id):
            meta["diff_note"], *meta["diff_changes"] = node_changes[n.id]
        out_nodes.append(replace(n, meta=meta))
        out_nodes += inserted.get(n.id, [])
    return GraphIR(scopes=scopes, nodes=out_nodes, meta={**b.meta, "diff": True})


def _call_note(c: DiffCall) -> str:
    """The badge of a call: ``params 24.6K → 49.2K`` where its totals moved, else its first change."""
    if c.status in ("added", "removed"):
        facts = c.after if c.status == "added" else c.before
        return f"{'+' if c.status == 'added' else '−'} {fact_words('parameters', (facts or {}).get('parameters'))}"
    notes = dict(zip(c.changed, c.notes))
    return next((notes[field] for field in ("parameters", "FLOPs") if field in notes), notes.get("output shapes", c.notes[0] if c.notes else ""))


def _split_mixed_folds(scopes: list[Scope], statuses: dict[str, str]) -> None:
    """A fold group is cut into runs of members that changed alike: ``layers.0–1`` changed the same
    way fold, the added ``layers.2`` stands alone."""
    groups: dict[Any, list[Scope]] = {}
    for s in scopes:
        rep = s.meta.get("repeat")
        if isinstance(rep, dict) and "group" in rep:
            groups.setdefault(rep["group"], []).append(s)
    for group, members in groups.items():
        runs: list[list[Scope]] = []
        last: Any = None
        for s in members:
            kind = (statuses.get(s.id), tuple(_relative_changes(s)))
            if not runs or kind != last:
                runs.append([])
            runs[-1].append(s)
            last = kind
        if len(runs) == 1:
            continue
        for k, run in enumerate(runs):
            for i, s in enumerate(run):
                if len(run) > 1:
                    s.meta["repeat"] = {**s.meta["repeat"], "group": f"{group}·{k}", "index": i, "count": len(run)}
                else:
                    s.meta.pop("repeat", None)


def _relative_changes(s: Scope) -> list[str]:
    """A call's changes with its own path taken out, so layers.0 and layers.1 compare."""
    return [str(c).replace(s.path, "") for c in s.meta.get("diff_changes", [])]
