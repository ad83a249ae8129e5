"""The merged call tree of a diff, and its text: marks, folded repeats, before → after totals.

Repeated calls that changed the same way fold into one line (``layers.0–1 (LlamaDecoderLayer)
×2``), as do runs of unchanged or added ones; an added or removed call is one line, and an
unchanged call is shown without what it contains.
"""

from __future__ import annotations

from typing import Any

from torchatlas._ir import GraphIR, Scope
from torchatlas._passes._diff_records import NAMING_FIELDS, DiffCall, ScopeChange, shape_values
from torchatlas._text import DIFF_COUNTS, fact_words, fold_label, format_diff_value, visible

MARKS = {"same": " ", "changed": "~", "added": "+", "removed": "-", "pass-through": " "}


def _facts(scope: Scope) -> dict[str, Any]:
    m = scope.meta
    return {
        "label": scope.label,
        "class": scope.cls,
        "input shapes": shape_values(m.get("input_shapes", [])),
        "output shapes": shape_values(m.get("output_shapes", [])),
        "parameters": m.get("params"),
        "FLOPs": m.get("flops"),
    }


def merged_calls(
    a: GraphIR, b: GraphIR, calls: dict[str, str], records: dict[tuple[str, str], list[ScopeChange]],
    one_sided: dict[tuple[str, str], bool],
) -> tuple[list[DiffCall], list[tuple[str, str]]]:
    """``b``'s call tree with ``a``'s calls that ``b`` lacks hung where they were: after the
    match of the sibling they followed in ``a``; and each call's (side, scope id)."""
    a_of = {sb: sa for sa, sb in calls.items()}
    children: dict[tuple[str, str] | None, list[tuple[str, str]]] = {}
    for s in b.scopes:
        children.setdefault(None if s.parent is None else ("b", s.parent), []).append(("b", s.id))
    a_children = a.children()
    for s in a.scopes:
        if s.id in calls:
            continue
        parent = None if s.parent is None else ("b", calls[s.parent]) if s.parent in calls else ("a", s.parent)
        siblings = children.setdefault(parent, [])
        previous = a_children.get(s.parent, [])
        k = previous.index(s.id)
        before = next((calls[p] for p in reversed(previous[:k]) if p in calls), None)
        spot = siblings.index(("b", before)) + 1 if before is not None and ("b", before) in siblings else 0
        while spot < len(siblings) and siblings[spot][0] == "a":  # after earlier removed siblings
            spot += 1
        siblings.insert(spot, ("a", s.id))
    out: list[DiffCall] = []
    keys: list[tuple[str, str]] = []
    _walk(None, 0, children, out, keys, a, b, a_of, records, one_sided)
    _mark_containers(out)
    return out, keys


def _walk(key: Any, depth: int, children: dict, out: list[DiffCall], keys: list[tuple[str, str]], a: GraphIR,
          b: GraphIR, a_of: dict[str, str], records: dict, one_sided: dict) -> None:
    stack = [(depth, k) for k in reversed(children.get(key, []))]
    while stack:
        depth, (side, sid) = stack.pop()
        own = records.get((side, sid), [])
        if side == "a":
            s = a.scope(sid)
            status = "pass-through" if one_sided[(side, sid)] else "removed"
            before, after = _facts(s), None
        else:
            s = b.scope(sid)
            other = a_of.get(sid)
            if other is None:
                status = "pass-through" if one_sided[(side, sid)] else "added"
                before = None
            else:
                status = "changed" if own else "same"
                before = _facts(a.scope(other))
            after = _facts(s)
        fields = tuple(dict.fromkeys(c.field for c in own))
        notes = tuple(c.words for c in own)
        out.append(DiffCall(depth, s.label, status, before, after, fields, s.path, s.class_name, notes))
        keys.append((side, sid))
        stack.extend((depth + 1, k) for k in reversed(children.get((side, sid), [])))


def _mark_containers(calls: list[DiffCall]) -> None:
    """A call containing an added, removed or changed call is changed."""
    open_calls: list[int] = []
    for i, c in enumerate(calls):
        while open_calls and calls[open_calls[-1]].depth >= c.depth:
            open_calls.pop()
        if c.status in ("changed", "added", "removed"):
            for k in open_calls:
                if calls[k].status == "same":
                    old = calls[k]
                    calls[k] = DiffCall(old.depth, old.label, "changed", old.before, old.after, old.changed,
                                        old.path, old.cls, old.notes)
        open_calls.append(i)


# -- text ------------------------------------------------------------------------------


def _ends(calls: list[DiffCall]) -> list[int]:
    """For each call, the index after its last descendant."""
    ends = [len(calls)] * len(calls)
    open_calls: list[int] = []
    for i, c in enumerate(calls):
        while open_calls and calls[open_calls[-1]].depth >= c.depth:
            ends[open_calls.pop()] = i
        open_calls.append(i)
    return ends


def _relative(path: str, root: str) -> str:
    return path[len(root):] if root and path.startswith(root) else path


def _signature(calls: list[DiffCall], i: int, end: int) -> tuple[Any, ...]:
    root = calls[i].path
    return tuple(
        (_relative(c.path, root), c.cls, c.status, c.depth - calls[i].depth,
         tuple((f, n) for f, n in zip(c.changed, c.notes) if f not in NAMING_FIELDS))
        for c in calls[i:end]
    )


def folded(calls: list[DiffCall], expand_same: bool = False) -> list[tuple[DiffCall, int, str]]:
    """The lines of the tree: (call, how many it stands for, its folded label). Siblings that
    changed the same way fold; an unchanged, added or removed call hides what it contains."""
    ends = _ends(calls)
    out: list[tuple[DiffCall, int, str]] = []
    i = 0
    while i < len(calls):
        c = calls[i]
        run = [i]
        sig = _signature(calls, i, ends[i])
        j = ends[i]
        while j < len(calls) and calls[j].depth == c.depth and calls[j].cls == c.cls and _foldable(c, calls[j]) \
                and _signature(calls, j, ends[j]) == sig:
            run.append(j)
            j = ends[j]
        label = fold_label(c.path, calls[run[-1]].path, c.cls, len(run)) if len(run) > 1 else c.label
        out.append((c, len(run), label))
        if c.status == "changed" or (expand_same and c.status == "same"):  # the first of a run stands for all
            out += folded(calls[i + 1:ends[i]], expand_same)
        i = j
    return out


def _foldable(first: DiffCall, other: DiffCall) -> bool:
    """Two calls of one module, or two entries of one numbered container, with the same status."""
    if first.status != other.status:
        return False
    if first.path == other.path:
        return True
    (pa, _, a), (pb, _, b) = first.path.rpartition("."), other.path.rpartition(".")
    return pa == pb and a.isdigit() and b.isdigit()


def _notes(c: DiffCall, limit: int = 3) -> str:
    """``params 24.6K → 49.2K, FLOPs 1.2M → 2.4M, output shapes …``; the sizes of an added or removed call."""
    if c.status in ("added", "removed"):
        facts = c.after if c.status == "added" else c.before
        assert facts is not None
        return ", ".join(fact_words(k, facts[k]) for k in DIFF_COUNTS if facts.get(k) is not None)
    if c.status == "pass-through":
        return f"pass-through, only in {'A' if c.after is None else 'B'}"
    shown = [note for _, note in sorted(zip(c.changed, c.notes), key=lambda fn: fn[0] not in DIFF_COUNTS)]
    more = f", +{len(shown) - limit} more" if len(shown) > limit else ""
    return ", ".join(shown[:limit]) + more


def tree_text(calls: list[DiffCall]) -> str:
    """The merged tree, one line a call: ``+`` added, ``-`` removed, ``~`` changed (or containing a change)."""
    lines = []
    for c, _count, label in folded(calls):
        notes = _notes(c)
        lines.append(f"{MARKS[c.status]} {'  ' * c.depth}{visible(label)}{'  ' + visible(notes) if notes else ''}")
    return "\n".join(lines)


def summary_text(calls: list[DiffCall], totals: list[ScopeChange]) -> str:
    """The calls that differ, folded, with parameters and FLOPs before → after and what else changed."""
    rows = [("", "module call", "params", "FLOPs", "what changed")]
    for c, _count, label in folded(calls):
        if c.status in ("same", "pass-through"):
            continue
        cells = [_amount(c, k) for k in DIFF_COUNTS]
        what = ", ".join(f for f in dict.fromkeys(c.changed) if f not in DIFF_COUNTS)
        rows.append((MARKS[c.status], "  " * c.depth + visible(label), *cells, visible(what)))
    if len(rows) == 1:
        return "no differences"
    widths = [max(len(r[k]) for r in rows) for k in range(4)]
    lines = ["  ".join(r[k].ljust(widths[k]) for k in range(4)) + "  " + r[4] for r in rows]
    lines += [f"= total {t.words}" for t in totals]
    return "\n".join(line.rstrip() for line in lines)


def _amount(c: DiffCall, key: str) -> str:
    before = format_diff_value(key, c.before[key]) if c.before else None
    after = format_diff_value(key, c.after[key]) if c.after else None
    if before is None:
        return f"+{after}" if after != "0" else "0"
    if after is None:
        return f"-{before}" if before != "0" else "0"
    return before if before == after else f"{before} → {after}"
