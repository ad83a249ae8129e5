"""Differences between two captures: added/removed module calls, changed shapes, parameters, FLOPs.

Calls are matched by ``(path, call)``; calls left over on both sides are then
paired by structure (same class and structural hash, in call order), which finds
renamed modules. Parameter and FLOP changes are reported at the calls whose *own*
share changed (their total minus their children's), so one edited layer is not
echoed by every ancestor; graph totals are reported separately.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torchatlas._ir import GraphIR, Scope
from torchatlas._passes._analyze import ensure_analyzed
from torchatlas._passes._repeats import structural_hashes
from torchatlas._text import format_count, format_shapes, markdown_text, visible


@dataclass(frozen=True)
class ScopeChange:
    """One changed quantity of a module call present in both graphs."""

    scope: str
    """The call's label in the second graph, e.g. ``fc (Linear)``."""
    field: str
    """``class``, ``path``, ``input shapes``, ``output shapes``, ``parameters`` or ``FLOPs``."""
    before: str
    after: str


@dataclass(frozen=True)
class DiffCall:
    """One module call of the merged picture of two graphs, in tree order."""

    depth: int
    """Nesting: the model's own call is 0."""
    label: str
    """``fc (Linear)``: the call's label in ``b`` (in ``a`` for a removed call)."""
    status: str
    """``same``, ``changed``, ``added`` (only in ``b``) or ``removed`` (only in ``a``)."""
    before: dict[str, str] | None
    """The call's facts in ``a`` (label, class, input and output shapes, parameters, FLOPs); None when added."""
    after: dict[str, str] | None
    """The same facts in ``b``; None when removed."""
    changed: tuple[str, ...] = ()
    """The fields that differ (``output shapes``, ``parameters``...)."""


@dataclass
class GraphDiff:
    """What changed from graph ``a`` to graph ``b``."""

    added: list[str] = field(default_factory=list)
    """Labels of calls only in ``b``."""
    removed: list[str] = field(default_factory=list)
    """Labels of calls only in ``a``."""
    changed: list[ScopeChange] = field(default_factory=list)
    totals: list[ScopeChange] = field(default_factory=list)
    """Whole-graph parameter and FLOP totals that differ (``scope`` is ``"<total>"``)."""
    calls: list[DiffCall] = field(default_factory=list)
    """Every module call of both graphs merged into one tree: ``b``'s calls in order, each
    removed call under its parent, for the visual diff."""

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed or self.totals)

    def to_dict(self) -> dict[str, Any]:
        def rows(changes: list[ScopeChange]) -> list[dict[str, str]]:
            return [{"scope": c.scope, "field": c.field, "before": c.before, "after": c.after} for c in changes]

        calls = [
            {"depth": c.depth, "label": c.label, "status": c.status, "before": c.before, "after": c.after,
             "changed": list(c.changed)}
            for c in self.calls
        ]
        return {
            "added": list(self.added), "removed": list(self.removed), "changed": rows(self.changed),
            "totals": rows(self.totals), "calls": calls,
        }

    def __str__(self) -> str:
        if not self:
            return "no differences"
        lines = [f"- {visible(label)}" for label in self.removed]
        lines += [f"+ {visible(label)}" for label in self.added]
        lines += [f"~ {visible(c.scope)}: {c.field} {visible(c.before)} -> {visible(c.after)}" for c in self.changed]
        lines += [f"= total {c.field}: {c.before} -> {c.after}" for c in self.totals]
        return "\n".join(lines)

    def to_markdown(self) -> str:
        if not self:
            return "No differences.\n"
        out: list[str] = []
        if self.removed:
            out += ["**Removed**", ""] + [f"- {markdown_text(label)}" for label in self.removed] + [""]
        if self.added:
            out += ["**Added**", ""] + [f"- {markdown_text(label)}" for label in self.added] + [""]
        changes = self.changed + self.totals
        if changes:
            out += ["| module call | what | before | after |", "|---|---|---|---|"]
            out += [f"| {markdown_text(c.scope)} | {c.field} | {markdown_text(c.before)} | {markdown_text(c.after)} |" for c in changes]
            out.append("")
        return "\n".join(out)


def diff(a: GraphIR, b: GraphIR) -> GraphDiff:
    """Compare two graphs (analysed or not) module call by module call."""
    a, b = ensure_analyzed(a), ensure_analyzed(b)
    pairs, only_a, only_b = _match(a, b)
    result = GraphDiff(removed=[s.label for s in only_a], added=[s.label for s in only_b])
    own_a, own_b = _own_amounts(a), _own_amounts(b)
    for sa, sb in pairs:
        label = sb.label
        if sa.cls != sb.cls:
            # Same name from another module: show where each class comes from.
            names = (sa.class_name, sb.class_name) if sa.class_name != sb.class_name else (sa.cls, sb.cls)
            result.changed.append(ScopeChange(label, "class", *names))
        if (sa.path, sa.call) != (sb.path, sb.call):
            result.changed.append(ScopeChange(label, "path", sa.label, sb.label))
        for key, name in (("input_shapes", "input shapes"), ("output_shapes", "output shapes")):
            before, after = sa.meta.get(key, []), sb.meta.get(key, [])
            if before != after:
                result.changed.append(ScopeChange(label, name, format_shapes(before), format_shapes(after)))
        for key, name in (("params", "parameters"), ("flops", "FLOPs")):
            if own_a[key][sa.id] != own_b[key][sb.id]:
                before, after = format_count(sa.meta.get(key)), format_count(sb.meta.get(key))
                result.changed.append(ScopeChange(label, name, before, after))
    for key, name in (("param_count", "parameters"), ("flops", "FLOPs")):
        if a.meta.get(key) != b.meta.get(key):
            result.totals.append(ScopeChange("<total>", name, format_count(a.meta.get(key)), format_count(b.meta.get(key))))
    result.calls = _merged_calls(a, b, pairs, only_a, result.changed)
    return result


def _facts(scope: Scope) -> dict[str, str]:
    m = scope.meta
    return {
        "label": scope.label,
        "class": scope.cls,
        "input shapes": format_shapes(m.get("input_shapes", [])),
        "output shapes": format_shapes(m.get("output_shapes", [])),
        "parameters": format_count(m.get("params")),
        "FLOPs": format_count(m.get("flops")),
    }


def _merged_calls(
    a: GraphIR, b: GraphIR, pairs: list[tuple[Scope, Scope]], only_a: list[Scope], changes: list[ScopeChange]
) -> list[DiffCall]:
    """``b``'s call tree with ``a``'s removed calls hung under their (matched) parents."""
    a_of = {sb.id: sa for sa, sb in pairs}
    b_of = {sa.id: sb.id for sa, sb in pairs}
    fields_of: dict[str, list[str]] = {}
    for c in changes:
        fields_of.setdefault(c.scope, []).append(c.field)
    children: dict[str | None, list[tuple[str, Scope]]] = {}
    for s in b.scopes:
        children.setdefault(s.parent, []).append(("b", s))
    for s in only_a:  # under the parent's match in b, or under a removed parent
        parent = None if s.parent is None else b_of.get(s.parent, f"a:{s.parent}")
        children.setdefault(parent, []).append(("a", s))
    out: list[DiffCall] = []
    stack = [(0, side, s) for side, s in reversed(children.get(None, []))]
    while stack:
        depth, side, s = stack.pop()
        if side == "a":
            out.append(DiffCall(depth, s.label, "removed", _facts(s), None))
            key: str = f"a:{s.id}"
        else:
            before = a_of.get(s.id)
            changed = tuple(fields_of.get(s.label, ())) if before is not None else ()
            status = "added" if before is None else "changed" if changed else "same"
            out.append(DiffCall(depth, s.label, status, _facts(before) if before else None, _facts(s), changed))
            key = s.id
        stack.extend((depth + 1, side, c) for side, c in reversed(children.get(key, [])))
    return out


def _match(a: GraphIR, b: GraphIR) -> tuple[list[tuple[Scope, Scope]], list[Scope], list[Scope]]:
    by_key = {(s.path, s.call): s for s in b.scopes}
    pairs: list[tuple[Scope, Scope]] = []
    matched_b: set[str] = set()
    left: list[Scope] = []
    for s in a.scopes:
        other = by_key.get((s.path, s.call))
        if other is not None:
            pairs.append((s, other))
            matched_b.add(other.id)
        else:
            left.append(s)
    right = [s for s in b.scopes if s.id not in matched_b]
    if left and right:
        hash_a, hash_b = _hashes(a), _hashes(b)
        waiting: dict[tuple[str, str], list[Scope]] = {}
        for s in right:
            waiting.setdefault((s.cls, hash_b[s.id]), []).append(s)
        still_left: list[Scope] = []
        for s in left:
            queue = waiting.get((s.cls, hash_a[s.id]))
            if queue:
                other = queue.pop(0)
                pairs.append((s, other))
                matched_b.add(other.id)
            else:
                still_left.append(s)
        left = still_left
        right = [s for s in right if s.id not in matched_b]
    order = {s.id: i for i, s in enumerate(b.scopes)}
    pairs.sort(key=lambda p: order[p[1].id])
    return pairs, left, right


def _hashes(ir: GraphIR) -> dict[str, str]:
    if all("structure_hash" in s.meta for s in ir.scopes):
        return {s.id: s.meta["structure_hash"] for s in ir.scopes}
    return structural_hashes(ir)


def _own_amounts(ir: GraphIR) -> dict[str, dict[str, Any]]:
    """Per scope, its total minus its children's: what changes where an edit was made.

    Parameters belong to module paths, so children called more than once count once.
    """
    children = ir.children()
    out: dict[str, dict[str, Any]] = {"params": {}, "flops": {}}
    for s in ir.scopes:
        kids = [ir.scope(c) for c in children[s.id]]
        distinct = {k.path: k for k in kids}.values()
        out["params"][s.id] = _minus(s.meta.get("params"), [k.meta.get("params") for k in distinct])
        out["flops"][s.id] = _minus(s.meta.get("flops"), [k.meta.get("flops") for k in kids])
    return out


def _minus(total: Any, parts: list[Any]) -> Any:
    if not isinstance(total, int) or any(not isinstance(p, int) for p in parts):
        return total
    return total - sum(parts)
