"""Differences between two captures, op by op: what changed, where, and whether the computation did.

The graphs are lined up without shared ids (``_diff_match``): module calls by path, then
under a renamed parent by name, structure or shapes; ops inside matched calls by a
sequence alignment. A matched op has changed when its op, argument constants, shapes or
dtypes, or where its inputs come from (the data flow) differ; a matched call when its
class, path, shapes, own parameters (count and shapes) or FLOPs differ. A call containing
a change is changed, and its totals say how (``params 24.6K → 49.2K``).
"""

from __future__ import annotations

import gc
from dataclasses import dataclass, field
from typing import Any

from torchatlas._ir import GraphIR, Node, Ref, Scope
from torchatlas._ops import op_name, op_title
from torchatlas._passes._analyze import ensure_analyzed
from torchatlas._passes._diff_align import Step
from torchatlas._passes._diff_match import Matching, is_unordered, match, resolve, target_family
from torchatlas._passes._diff_merge import merged_graph
from torchatlas._passes._diff_records import NAMING_FIELDS, DiffCall, NodeMatch, ScopeChange, shape_values
from torchatlas._passes._diff_tree import merged_calls, summary_text, tree_text
from torchatlas._passes._repeats import structural_hashes
from torchatlas._text import format_diff_value, format_shape, format_shapes, markdown_text, visible


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
    nodes: list[NodeMatch] = field(default_factory=list)
    """Every node of ``a`` (in order), then the nodes only ``b`` has."""
    graph: GraphIR | None = field(default=None, repr=False, compare=False)
    """Both graphs as one, for the viewer: ``b`` with what only ``a`` had put back where it was,
    each node and call marked (``meta["diff"]``, ``meta["diff_note"]``)."""

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed or self.totals)

    @property
    def equal(self) -> bool:
        """True when ``a`` and ``b`` compute the same thing up to naming: the same ops on the same
        shapes with the same constants, data flow and parameters. Renamed modules, and calls added
        or removed around the same ops (a wrapper, an ``Identity``), do not count."""
        return (
            not self.totals
            and all(c.field in NAMING_FIELDS for c in self.changed)
            and not any(n.status in ("added", "removed") for n in self.nodes)
        )

    def tree(self) -> str:
        """The merged call tree: ``+`` added, ``-`` removed, ``~`` changed or containing a change;
        repeated calls that changed the same way folded (``layers.0–1 (LlamaDecoderLayer) ×2``)."""
        return tree_text(self.calls)

    def summary(self) -> str:
        """The calls that differ, folded, with parameters and FLOPs before → after."""
        return summary_text(self.calls, self.totals)

    def to_dict(self) -> dict[str, Any]:
        def rows(changes: list[ScopeChange]) -> list[dict[str, Any]]:
            return [{"scope": c.scope, "field": c.field, "before": c.before, "after": c.after} for c in changes]

        calls = [
            {"depth": c.depth, "label": c.label, "status": c.status, "before": c.before, "after": c.after,
             "changed": list(c.changed), "notes": list(c.notes)}
            for c in self.calls
        ]
        nodes = [{"a": n.a, "b": n.b, "status": n.status, "reason": n.reason} for n in self.nodes]
        return {
            "equal": self.equal, "added": list(self.added), "removed": list(self.removed), "changed": rows(self.changed),
            "totals": rows(self.totals), "calls": calls, "nodes": nodes,
        }

    def __str__(self) -> str:
        if not self:
            return "no differences"
        lines = [f"- {visible(label)}" for label in self.removed]
        lines += [f"+ {visible(label)}" for label in self.added]
        lines += [f"~ {visible(c.scope)}: {visible(c.words)}" for c in self.changed]
        lines += [f"= total {c.words}" for c in self.totals]
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
            out += [f"| {markdown_text(c.scope)} | {c.field} | {markdown_text(format_diff_value(c.field, c.before))} | "
                    f"{markdown_text(format_diff_value(c.field, c.after))} |" for c in changes]
            out.append("")
        return "\n".join(out)


def diff(a: GraphIR, b: GraphIR) -> GraphDiff:
    """Compare two graphs (analysed or not): module calls, then the ops inside them."""
    a, b = ensure_analyzed(a), ensure_analyzed(b)
    # The diff makes many small tuples and nothing cyclic; with the collector on, its full passes
    # walk both graphs again and again (over half the time on two 80-layer captures).
    collecting = gc.isenabled()
    gc.disable()
    try:
        m = match(a, b, (_hashes(a), _hashes(b)))
        return _Differ(a, b, m).run()
    finally:
        if collecting:
            gc.enable()


class _Differ:
    def __init__(self, a: GraphIR, b: GraphIR, m: Matching) -> None:
        self.a, self.b, self.m = a, b, m
        self.a_of_scope = {sb: sa for sa, sb in m.calls.items()}
        self.records: dict[tuple[str, str], list[ScopeChange]] = {}
        """(side, scope id) -> its changes; a matched call's are filed under its ``b`` id."""
        self.changed_nodes: set[str] = set()
        self.node_changes: dict[str, list[str]] = {}
        """``b``'s node id -> its changes, for the merged graph's badges."""
        self.state_a, self.state_b = _own_state(a), _own_state(b)
        tensors = _tied_names(a, b)
        self.tied_a = _tied_stand_ins(a, tensors, set(m.nodes))
        self.tied_b = _tied_stand_ins(b, tensors, m.matched_b)
        """Per side, an unmatched node of a tied parameter -> the matched node of the same tensor
        (export reads a tied weight under one name, a trace under another)."""
        self._computing: dict[str, set[str]] = {}
        self._children: dict[str, dict[str | None, list[str]]] = {}
        """Per side, the calls running an op of their own that is not a pass-through copy."""
        # An fx graph imported without shape propagation knows no shapes (nor FLOPs): compare what both know.
        self.shapes = _has_shapes(a) and _has_shapes(b)
        self.one_sided = {("a", s.id): self._only_pass_through(a, s.id, "a") for s in a.scopes if s.id not in m.calls}
        self.one_sided.update(
            {("b", s.id): self._only_pass_through(b, s.id, "b") for s in b.scopes if s.id not in self.a_of_scope}
        )

    def run(self) -> GraphDiff:
        for sa, sb in sorted(self.m.calls.items(), key=lambda p: _index(p[1])):
            self._compare_calls(sa, sb)
        for step_a, step_b in self.m.op_pairs:
            self._compare_ops(step_a, step_b)
        self._compare_outputs()
        self._one_sided_ops()
        result = GraphDiff()
        for key, passes in self.one_sided.items():
            if not passes:
                (result.removed if key[0] == "a" else result.added).append(self._label(key))
        order = {("b", s.id): i for i, s in enumerate(self.b.scopes)}
        for key in sorted(self.records, key=lambda k: order.get(k, -1)):
            result.changed += self.records[key]
        for meta_key, name in (("param_count", "parameters"), ("flops", "FLOPs"))[: 2 if self.shapes else 1]:
            before, after = self.a.meta.get(meta_key), self.b.meta.get(meta_key)
            if before != after:
                result.totals.append(ScopeChange("<total>", name, before, after))
        result.nodes = self._node_matches()
        result.calls, keys = merged_calls(self.a, self.b, self.m.calls, self.records, self.one_sided)
        result.graph = merged_graph(self.a, self.b, self.m, result.nodes, self.node_changes, result.calls, keys)
        return result

    # -- calls -------------------------------------------------------------------

    def _label(self, key: tuple[str, str]) -> str:
        side, sid = key
        return (self.a if side == "a" else self.b).scope(sid).label

    def _note(self, side: str, scope_id: str, fld: str, before: Any, after: Any) -> None:
        key = (side, scope_id)
        self.records.setdefault(key, []).append(ScopeChange(self._label(key), fld, before, after))

    def _compare_calls(self, a_id: str, b_id: str) -> None:
        sa, sb = self.a.scope(a_id), self.b.scope(b_id)
        if sa.cls != sb.cls and ("." in sa.cls and "." in sb.cls or sa.class_name != sb.class_name):
            # Same name from another module: show where each class comes from.
            names = (sa.class_name, sb.class_name) if sa.class_name != sb.class_name else (sa.cls, sb.cls)
            self._note("b", b_id, "class", *names)
        if (sa.path, sa.call) != (sb.path, sb.call):
            self._note("b", b_id, "path", sa.label, sb.label)
        before, after = sa.meta.get("input_shapes", []), sb.meta.get("input_shapes", [])
        if before != after and self.shapes:
            self._note("b", b_id, "input shapes", shape_values(before), shape_values(after))
        before, after = self._made(self.a, sa, "a"), self._made(self.b, sb, "b")
        if before != after and self.shapes:
            self._note("b", b_id, "output shapes", shape_values(before), shape_values(after))
        if sa.call == 0 and sb.call == 0:
            before_state, after_state = self.state_a.get(sa.path, {}), self.state_b.get(sb.path, {})
            if before_state != after_state:
                self._note("b", b_id, "parameter shapes", _state_text(before_state), _state_text(after_state))
        for key, name in (("params", "parameters"), ("flops", "FLOPs"))[: 2 if self.shapes else 1]:
            if sa.meta.get(key) != sb.meta.get(key):
                self._note("b", b_id, name, sa.meta.get(key), sb.meta.get(key))

    def _made(self, ir: GraphIR, scope: Scope, side: str) -> list[Any]:
        """The shapes a call returned that it made itself, read through copies: a call handing on
        a copy of its input (export's ``to`` of a float tensor) returned nothing new there."""
        if not scope.outputs:
            return list(scope.meta.get("output_shapes", []))
        shapes = []
        for ref in dict.fromkeys(resolve(ir, r, self.m.pass_through[side]) for r in scope.outputs):
            if scope.id in ir.ancestry(ir.node(ref).scope) and (meta := ir.value_meta(ref)) is not None:
                shapes.append(list(meta.shape))
        return shapes

    def _only_pass_through(self, ir: GraphIR, scope_id: str, side: str) -> bool:
        """A call only one side has that hands its input on (``Identity``, an eval ``Dropout``)."""
        if side not in self._computing:
            self._computing[side] = {n.scope for n in ir.nodes if n.kind == "op" and n.id not in self.m.pass_through[side]}
            self._children[side] = ir.children()
        return not any(sid in self._computing[side] for sid in _subtree(self._children[side], scope_id))

    # -- ops -----------------------------------------------------------------------

    def _home(self, node: Node, side: str) -> tuple[str, str]:
        """The call a change of ``node`` is filed under: its own, as ``b`` sees it where matched."""
        if side == "a" and node.scope in self.m.calls:
            return ("b", self.m.calls[node.scope])
        return (side, node.scope)

    def _compare_ops(self, x: Step, y: Step) -> None:
        main_a, main_b = self.a.node(x.main), self.b.node(y.main)
        last_a, last_b = self.a.node(x.nodes[-1]), self.b.node(y.nodes[-1])
        home = self._home(last_b, "b")
        found: list[tuple[str, str, str]] = []
        if x.name != y.name or main_a.inplace != main_b.inplace:
            found.append(("op", main_a.target or "?", main_b.target or "?"))
        shapes = (
            [m.shape if (m := self.a.value_meta(r)) else None for r in x.sources],
            [m.shape if (m := self.b.value_meta(r)) else None for r in y.sources],
            [m.shape for m in last_a.outputs], [m.shape for m in last_b.outputs],
        )
        differ = sorted(map(repr, shapes[0])) != sorted(map(repr, shapes[1])) or shapes[2] != shapes[3]  # eager and ATen order differ
        if differ and self.shapes:
            found.append(("op shapes", _op_text(x.name, shapes[0], shapes[2]), _op_text(y.name, shapes[1], shapes[3])))
        dtypes_a = [m.dtype for m in last_a.outputs]
        dtypes_b = [m.dtype for m in last_b.outputs]
        if dtypes_a != dtypes_b and self.shapes:
            found.append(("op dtypes", f"{x.name} {', '.join(dtypes_a)}", f"{y.name} {', '.join(dtypes_b)}"))
        nodes_a, nodes_b = [self.a.node(i) for i in x.nodes], [self.b.node(i) for i in y.nodes]
        if len(nodes_a) == len(nodes_b) and all(target_family(p.target) == target_family(q.target) for p, q in zip(nodes_a, nodes_b)):
            same = all(p.args == q.args and p.kwargs == q.kwargs for p, q in zip(nodes_a, nodes_b))
            consts_a, consts_b = ([], []) if same else ([_constants(p) for p in nodes_a], [_constants(q) for q in nodes_b])
            if consts_a != consts_b:
                found.append(("op arguments", _args_text(x.name, consts_a), _args_text(y.name, consts_b)))
        elif len(nodes_a) == len(nodes_b) == 1 and x.name == y.name and x.name in _NUMBERED:
            # Eager against ATen: the spellings differ (keywords, defaults written out), but where both
            # hold as many numbers, those are the op's own (x * 0.5, eps, dim, stride) and must agree.
            numbers_a, numbers_b = _numbers(nodes_a[0]), _numbers(nodes_b[0])
            if len(numbers_a) == len(numbers_b) and numbers_a != numbers_b:
                found.append(("op arguments", f"{x.name}({', '.join(map(str, numbers_a))})",
                              f"{y.name}({', '.join(map(str, numbers_b))})"))
        flow = self._flow(x.sources, y.sources, is_unordered(x, y, self.a, self.b))
        if flow is not None:
            found.append(("data flow", f"{y.name} ← {flow[0]}", f"{y.name} ← {flow[1]}"))
        for fld, before, after in found:
            self._note(*home, fld, before, after)
        if found:
            self.changed_nodes.update(x.nodes)
            badge = _op_badge(found[0], (shapes[2], shapes[3]), (dtypes_a, dtypes_b), (main_a.target, main_b.target))
            self.node_changes[y.nodes[-1]] = [badge] + [
                f"{name.removeprefix('op ')} {before} → {after}" if name != "op" else f"{before} → {after}"
                for name, before, after in found
            ]

    def _flow(self, src_a: list[Ref], src_b: list[Ref], commutative: bool) -> tuple[str, str] | None:
        """Where each input comes from (read through copies), both sides, when the sources differ (and are matched)."""
        mapped, own = [], []
        for ra, rb in zip(src_a, src_b):
            ra, rb = Ref(self.tied_a.get(ra.node, ra.node), ra.slot), Ref(self.tied_b.get(rb.node, rb.node), rb.slot)
            other = self.m.nodes.get(ra.node)
            if other is None or rb.node not in self.m.matched_b:
                continue  # an unmatched source is reported as removed or added already
            mapped.append((other, ra.slot))
            own.append((rb.node, rb.slot))
        if (sorted(mapped) == sorted(own)) if commutative else mapped == own:
            return None
        return ", ".join(self._source(self.a, r) for r in src_a), ", ".join(self._source(self.b, r) for r in src_b)

    def _source(self, ir: GraphIR, ref: Ref) -> str:
        n = ir.node(ref)
        if n.kind == "op":
            where = ir.scope(n.scope).path or "<root>"
            return f"{op_title(n.target)}{f'.{ref.slot}' if ref.slot else ''} in {where}"
        if n.kind == "constant":
            meta = ir.value_meta(ref)
            return f"constant {format_shape(meta.shape) if meta else ''}".strip()
        return f"{n.kind} {n.path}"

    def _compare_outputs(self) -> None:
        for n in self.a.nodes:
            if n.kind != "output" or n.id not in self.m.nodes:
                continue
            other = self.b.node(self.m.nodes[n.id])
            through_a, through_b = self.m.pass_through["a"], self.m.pass_through["b"]
            flow = self._flow([resolve(self.a, r, through_a) for r in n.inputs],
                              [resolve(self.b, r, through_b) for r in other.inputs], False)
            if flow is not None:
                self._note("b", self.b.scopes[0].id, "data flow", f"{n.path} ← {flow[0]}", f"{other.path} ← {flow[1]}")
                self.changed_nodes.add(n.id)

    def _one_sided_ops(self) -> None:
        """Ops nothing lines up with, filed under their call unless that call is itself added or removed."""
        for side, ir, ids in (("a", self.a, self._removed_ops()), ("b", self.b, self.m.only_b_ops)):
            for nid in ids:
                n = ir.node(nid)
                home = self._home(n, side)
                if home in self.one_sided:
                    continue
                text = _op_text(op_name(n.target), [m.shape if (m := ir.value_meta(r)) else None for r in n.inputs], [o.shape for o in n.outputs])
                before, after = (text, "—") if side == "a" else ("—", text)
                self._note(*home, "op removed" if side == "a" else "op added", before, after)

    def _removed_ops(self) -> list[str]:
        return [n.id for n in self.a.nodes if n.kind == "op" and n.id not in self.m.nodes and n.id not in self.m.pass_through["a"]]

    def _node_matches(self) -> list[NodeMatch]:
        unread = {side: _unread_state(ir) for side, ir in (("a", self.a), ("b", self.b))}
        out: list[NodeMatch] = []
        for n in self.a.nodes:
            other = self.m.nodes.get(n.id)
            if other is not None:
                out.append(NodeMatch(n.id, other, "changed" if n.id in self.changed_nodes else "same"))
            elif n.id in self.m.pass_through["a"]:
                out.append(NodeMatch(n.id, None, "pass-through", self.m.node_reasons.get(n.id, "")))
            elif n.id in self.tied_a:
                out.append(NodeMatch(n.id, None, "pass-through", _tied_reason(self.a, self.tied_a[n.id])))
            elif n.id in unread["a"]:
                out.append(NodeMatch(n.id, None, "unread", _UNREAD))
            else:
                out.append(NodeMatch(n.id, None, "removed", self.m.node_reasons.get(n.id, "")))
        for n in self.b.nodes:
            if n.id in self.m.matched_b:
                continue
            if n.id in self.m.pass_through["b"]:
                out.append(NodeMatch(None, n.id, "pass-through", "passes its input through, read through"))
            elif n.id in self.tied_b:
                out.append(NodeMatch(None, n.id, "pass-through", _tied_reason(self.b, self.tied_b[n.id])))
            elif n.id in unread["b"]:
                out.append(NodeMatch(None, n.id, "unread", _UNREAD))
            else:
                out.append(NodeMatch(None, n.id, "added", "nothing in A lines up with it"))
        return out


def _tied_reason(ir: GraphIR, stand_in: str) -> str:
    return f"a tied weight: the same tensor as {ir.node(stand_in).path}, read through"


_UNREAD = "a parameter or buffer no op reads (an export lists every one, a trace the ones read)"


def _unread_state(ir: GraphIR) -> set[str]:
    read = {r.node for n in ir.nodes for r in n.inputs}
    return {n.id for n in ir.nodes if n.kind in ("param", "buffer") and n.id not in read}


def _op_badge(first: tuple[str, str, str], outs: tuple[list[Any], list[Any]], dtypes: tuple[list[str], list[str]],
              targets: tuple[str | None, str | None]) -> str:
    """A changed op's box subtitle: ``relu → tanh``, ``1×6×128 → 1×6×256``, ``float32 → float64``."""
    field = first[0]
    if field == "op":
        return f"{op_title(targets[0])} → {op_title(targets[1])}"
    if field == "op shapes" and outs[0] != outs[1]:
        return f"{format_shapes(outs[0])} → {format_shapes(outs[1])}"
    if field == "op dtypes":
        return f"{', '.join(dtypes[0])} → {', '.join(dtypes[1])}"
    return {"op shapes": "input shapes changed", "op arguments": "arguments changed", "data flow": "reads another value"}.get(field, field)


def _has_shapes(ir: GraphIR) -> bool:
    return any(n.outputs for n in ir.nodes if n.kind == "op")


def _index(scope_id: str) -> int:
    return int(scope_id[1:]) if scope_id[1:].isdigit() else 0


def _subtree(children: dict[str | None, list[str]], scope_id: str) -> list[str]:
    out, stack = [], [scope_id]
    while stack:
        sid = stack.pop()
        out.append(sid)
        stack.extend(children.get(sid, []))
    return out


def _own_state(ir: GraphIR) -> dict[str, dict[str, tuple[Any, ...]]]:
    """Module path -> name -> (shape, the other names it is tied to) of the parameters that
    module holds itself (not its children's)."""
    listed = ir.meta.get("parameters")
    entries = listed if isinstance(listed, list) else [
        {"path": n.path, "shape": list(n.outputs[0].shape)} for n in ir.nodes if n.kind == "param" and n.path and n.outputs
    ]
    out: dict[str, dict[str, tuple[Any, ...]]] = {}
    for e in entries:
        if isinstance(e, dict) and "path" in e:
            names = [str(p) for p in [e["path"], *e.get("shared_with", ())]]
            for path in names:  # a tied weight is every module's it is in, and says what it is tied to
                owner, _, name = path.rpartition(".")
                out.setdefault(owner, {})[name] = (tuple(e.get("shape", ())), tuple(sorted(set(names) - {path})))
    return out


def _tied_stand_ins(ir: GraphIR, tensors: dict[str, str], matched: set[str]) -> dict[str, str]:
    """Parameter nodes nothing matched -> a matched parameter node of the same tied tensor."""
    params = [n for n in ir.nodes if n.kind == "param" and n.path in tensors]
    found = {tensors[str(n.path)]: n.id for n in params if n.id in matched}
    return {n.id: found[tensors[str(n.path)]] for n in params if n.id not in matched and tensors[str(n.path)] in found}


def _tied_names(*irs: GraphIR) -> dict[str, str]:
    """Each name of a parameter tied to others (``shared_with`` in ``meta["parameters"]``) ->
    the first name of its group, groups joined across ``irs`` (names as the first side has them)."""
    groups: list[set[str]] = []
    for ir in irs:
        for e in ir.meta.get("parameters") or ():
            if isinstance(e, dict) and e.get("shared_with"):
                names = {str(e["path"]), *map(str, e["shared_with"])}
                joined = [g for g in groups if g & names]
                groups = [g for g in groups if not g & names] + [names.union(*joined)]
    return {name: min(group) for group in groups for name in group}


def _state_text(state: dict[str, tuple[Any, ...]]) -> str:
    """``weight 50×16 tied to emb.weight, bias 50``; ``-`` for none."""
    return ", ".join(
        f"{name} {format_shape(shape)}" + (f" tied to {', '.join(tied)}" if tied else "") for name, (shape, tied) in state.items()
    ) or "-"


def _constants(n: Node) -> Any:
    """The op's arguments with every tensor a placeholder: the constants it was called with."""

    def norm(v: Any) -> Any:
        if isinstance(v, list):
            return tuple(norm(x) for x in v)
        if isinstance(v, dict):
            if "tensor" in v or "shape_of" in v:
                return "<tensor>"
            if "repr" in v:
                return "<object>"
            return tuple(sorted((k, norm(x)) for k, x in v.items()))
        return v

    return (norm(n.args), norm(n.kwargs))


_NUMBERED = frozenset({
    "mul", "add", "sub", "div", "rsub", "pow", "remainder", "fmod", "clamp", "clip", "eq", "ne", "lt", "le", "gt",
    "ge", "softmax", "log_softmax", "leaky_relu", "hardtanh", "elu", "mean", "sum", "cumsum", "transpose",
    "masked_fill", "fill", "full",
})
"""Ops whose eager and ATen spellings hold the same numbers (no defaults written out on one side only,
as ``max_pool2d``'s padding and dilation are): their numbers are compared across the two."""


def _numbers(n: Node) -> list[Any]:
    """The numbers among an op's arguments (not bools, not inside tensor placeholders), sorted."""
    found: list[Any] = []

    def walk(v: Any) -> None:
        if isinstance(v, bool) or v is None:
            return
        if isinstance(v, (int, float)):
            found.append(v)
        elif isinstance(v, list):
            for x in v:
                walk(x)
        elif isinstance(v, dict) and not ({"tensor", "shape_of", "repr"} & set(v)):
            for x in v.values():
                walk(x)

    walk(n.args)
    walk(n.kwargs)
    return sorted(found)


def _args_text(name: str, constants: list[Any]) -> str:
    def show(v: Any) -> str:
        if isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], str) and not v[0].startswith("<"):
            return f"{v[0]}={show(v[1])}"
        if isinstance(v, tuple):
            return "(" + ", ".join(show(x) for x in v) + ")"
        return str(v)

    parts = []
    for args, kwargs in constants:
        shown = [show(x) for x in args if x != "<tensor>"] + [show(kv) for kv in kwargs]
        parts.append(", ".join(shown))
    return f"{name}({'; '.join(parts)})"


def _op_text(name: str, ins: list[Any], outs: list[Any]) -> str:
    return f"{name}({format_shapes([s for s in ins if s is not None])}): {format_shapes(outs)}"


def _hashes(ir: GraphIR) -> dict[str, str]:
    if all("structure_hash" in s.meta for s in ir.scopes):
        return {s.id: s.meta["structure_hash"] for s in ir.scopes}
    return structural_hashes(ir)


