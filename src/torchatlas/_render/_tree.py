"""The text tree: module hierarchy, and inside each call its data flow as a
series-parallel tree, so branches that fork and join show as sibling branches.

The lines are drawn by ``_tree_lines``: iteratively, with Unicode guides and an ASCII fallback,
in the manner of rich's ``tree.py``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import ClassVar

from torchatlas._ir import GraphIR, Node, Ref, TensorMeta, read_locally
from torchatlas._ops import collective_kind, op_name
from torchatlas._text import count_runs, format_duration, to_ascii, visible
from torchatlas._view import (
    FAILED_INSIDE,
    GATHERED_PARAMS,
    LINE_LIMIT,
    Mark,
    ReadingNames,
    ViewOptions,
    backward_groups,
    break_anchors,
    break_label,
    collective_text,
    decision_text,
    decisions,
    dominant_dtype,
    failed_mark,
    fold_runs,
    fold_totals,
    forward_part,
    forward_reads,
    gathered_parameters,
    input_title,
    loop_iterations,
    nonfinite_inside_mark,
    nonfinite_mark,
    of_the_loss,
    op_display,
    overlay_marks,
    relative_name,
    run_label,
    shape_text,
    short_source,
    size_only_text,
    variable_name,
)

from ._flow import SINK, SOURCE, Item, ScopeFlow, scope_flows, unused_ops
from ._tree_lines import ASCII_GUIDES, UNICODE_GUIDES, Line, close_trailing_forks, draw
from ._tree_refs import distinct_labels, joined_as, reference_names, tangled, untangled

# Ops that join a bypassing value back into the main path: only these make a "skip connection".
JOINS = frozenset({"add", "sub", "cat", "concat", "concatenate", "stack", "hstack", "vstack"})


@dataclass(frozen=True)
class TreeOptions(ViewOptions):
    """What the text tree shows; every field is also a keyword of ``Graph.tree``.

    ``depth``: deeper calls are one line each; ``fold_repeats``: a run of identical sibling
    calls (``layers.0–79 ×80``) is shown once, expanded as its first member. The tree lists
    ops and module calls as lines of text, so the fields about drawn boxes are refused (``UNHONOURED``)."""

    UNHONOURED: ClassVar[dict[str, str]] = {
        "expand_leaf_modules": "it always lists a leaf module's ops (one op: the call's own line)",
        "show_params": "its lines are ops and module calls, parameters and buffers never are",
        "show_constants": "its lines are ops and module calls, constants never are",
        "direction": "text reads top to bottom",
    }

    ascii: bool = False
    """Draw with ``|--`` and spell arrows and marks in ASCII."""
    source: bool = False
    """Append the user file:line of each op and module call."""


def render_tree(ir: GraphIR, options: TreeOptions | None = None) -> str:
    """The whole tree as text."""
    options = options or TreeOptions()
    # FSDP2's storage steps before each all-gather of parameters are one line with it
    root = _TreeBuilder(gathered_parameters(ir), options.depth, options.source, options.fold_repeats).build()
    close_trailing_forks(root)
    text = "\n".join(draw(root, ASCII_GUIDES if options.ascii else UNICODE_GUIDES))
    return to_ascii(text) if options.ascii else text


def _marked(mark: Mark | None) -> str:
    """``  ⚠ NaN×8``: a mark as the tree writes it after a line, in every output's words."""
    return f"  {mark.text}" if mark is not None else ""


def _overlay_mark(text: str) -> str:
    """``  [error 2.1e-03, ✗ diverges here]``: the graph's overlays (``graph.overlay``, compare)."""
    return f"  [{text}]" if text else ""


def _without(flow: ScopeFlow, rep: dict[Item, Item]) -> ScopeFlow:
    """``flow`` with the items ``rep`` maps left out: their edges start or end at the items they
    map to, where that keeps execution order (a later iteration reading the one before does not)."""
    if not any(it in rep for it in flow.items):
        return flow
    items = [it for it in flow.items if it not in rep]
    position = {it: k for k, it in enumerate(items)}
    edges: dict[Item, list[Item]] = {}
    for a, targets in flow.edges.items():
        ra = rep.get(a, a)
        for b in targets:
            rb = rep.get(b, b)
            if ra == rb or (ra in position and rb in position and position[rb] <= position[ra]):
                continue
            out = edges.setdefault(ra, [])
            if rb not in out:
                out.append(rb)
    references = {
        b: [(rep.get(a, a), ref) for a, ref in refs] for b, refs in flow.references.items() if b not in rep
    }
    return ScopeFlow(items, edges, references, flow.inputs)


MAX_LEVELS = 100
"""The most levels of module calls the tree opens (deeper calls are one line each, as with depth=)."""


class _TreeBuilder:
    def __init__(self, ir: GraphIR, depth: int | None, source: bool = False, fold: bool = True) -> None:
        self.ir = ir
        self.children = ir.children()
        # first member's scope id -> the run's scope ids
        self.runs = fold_runs(ir, self.children) if fold else {}
        self.folded = {sid for run in self.runs.values() for sid in run[1:]}
        # Laying out a call recurses into the calls inside it: nesting past this many levels is cut
        # as depth= cuts it (a document may nest calls any number of levels deep).
        self.depth = min(depth, MAX_LEVELS) if depth is not None else MAX_LEVELS
        self.show_source = source
        self.flows = scope_flows(forward_part(ir))  # backward ops: a section of their own
        # a folded loop: its later iterations (calls and the caller's ops) stand for the first
        self.iterations: dict[str, list[Node]] = {}
        loop_items = self.loop_items(ir) if fold else {}
        if loop_items:
            self.flows = {sid: _without(flow, loop_items) for sid, flow in self.flows.items()}
        self.backward = backward_groups(ir)
        self.dtype = dominant_dtype(ir)
        self._preds: dict[int, dict[Item, list[Item]]] = {}
        # item -> side values it reads; items whose value is also returned beside the main output
        self.references = {item: refs for flow in self.flows.values() for item, refs in flow.references.items()}
        self.references.pop(SINK, None)
        # returned beside the main output while also read on: a branch that would seem to end
        self.returned_too = {
            p for flow in self.flows.values() for p, _ in flow.references.get(SINK, ()) if flow.edges.get(p)
        }
        self.reading = ReadingNames(ir)
        self.dead = unused_ops(ir)
        self.failed_scopes = {s.id for s in ir.scopes if s.meta.get("failed")}  # the failures pass
        self.breaks = {item: [break_label(b) for b in brks] for item, brks in break_anchors(ir).items()}
        self.overlays = overlay_marks(ir)
        self.probing = False
        """Lay out without drawing, only to learn whether a numbered listing is needed (``_tree_refs``)."""
        self.probe_failed = False

    def loop_items(self, ir: GraphIR) -> dict[Item, Item]:
        """Item of a folded loop's later iteration -> the same item of its first iteration;
        fills ``iterations`` (a first-iteration op -> the same op in the later ones)."""
        rep: dict[Item, Item] = {}
        for entry in ir.meta.get("repeat_groups") or ():
            members = entry.get("scopes") if isinstance(entry, dict) else None
            if entry.get("body") and members and members[0] in self.runs:
                rep.update((Item(True, sid), Item(True, members[0])) for sid in members[1:])
        self.iterations = {first: later for first, later in loop_iterations(ir).items() if later}
        rep.update((Item(False, n.id), Item(False, first)) for first, later in self.iterations.items() for n in later)
        return rep

    # -- labels -----------------------------------------------------------------

    def shapes(self, metas: list[TensorMeta | None]) -> str:
        """``1×8×64``; several: ``(1×8×100, 1×2×8×16 ×4)``, a run of equal shapes counted once
        (a cache's keys and values per layer)."""
        parts = count_runs(shape_text(m, self.dtype) for m in metas)
        return parts[0] if len(metas) == 1 else "(" + ", ".join(parts) + ")"

    def scope_label(self, scope_id: str) -> str:
        scope = self.ir.scope(scope_id)
        label = scope.label if scope.parent is not None else scope.class_name
        flow = self.flows[scope_id]
        outs = scope.outputs
        run = self.runs.get(scope_id)
        if run:
            last = self.ir.scope(run[-1])
            label = run_label(self.ir, scope, last, len(run))
            outs = last.outputs
        label = relative_name(label, self.ir.scope(scope.parent).path) if scope.parent else label  # below its caller, as everywhere
        out_metas = [self.ir.value_meta(r) for r in outs]
        ins = read_locally([self.ir.value_meta(r) for r in self.ir.call_inputs(scope, flow.inputs)], out_metas)
        io = ""
        if ins or outs:
            io = f"  {self.shapes(ins) if ins else '()'} → {self.shapes(out_metas) if outs else '()'}"
        where = f"  @ {short_source(scope.source)}" if self.show_source and scope.source else ""
        # a call whose result only had its size read (``n = self.aux(h).shape[-1]``) says so, as an op does
        sized = size_only_text([self.ir.node(r) for r in outs]) if outs else ""
        return visible(label + io + sized + where, LINE_LIMIT)

    def names_operands(self, node: Node) -> list[str]:
        """``(a, b)`` after a join's op: its operands' variables, when every one has a name and no
        name stands for two values (``hidden_states + residual`` where both were once ``hidden_states``)."""
        refs = [r for r in node.inputs if self.ir.node(r).kind == "op"]
        names = [self.reading.read_by_op(r, node) or self.ref_name(r) for r in refs]
        if len(names) < 2 or not all(names):
            return []
        values_of: dict[str | None, set[Ref]] = {}
        for ref, name in zip(refs, names):
            values_of.setdefault(name, set()).add(ref)
        return [] if any(len(values) > 1 for values in values_of.values()) else [n for n in names if n]

    def op_label(self, node: Node) -> str:
        text = op_display(node)
        collective = collective_text(node)
        gathered = node.meta.get(GATHERED_PARAMS)
        if collective is not None and gathered:  # ⇄ all_gather over dp:4, 4.25 KiB: 2 params
            text = f"{collective}: {gathered} param{'s' if gathered > 1 else ''}"
        elif collective is not None:
            text = f"{collective}: {text}" if op_name(node.target) != collective_kind(node.target) else collective
        operands = self.names_operands(node)
        if operands:
            text += " (" + ", ".join(operands) + ")"
        if node.id in self.iterations:  # a folded loop's body op ran once per iteration, as its calls did
            text += f" ×{len(self.iterations[node.id]) + 1}"
        text += f" → {self.shapes(list(node.outputs))}" if node.outputs else ""
        if node.inplace:
            text += "  [in-place]"
        if node.name:
            text = f"{node.name} = {text}"
        if node.meta.get("dead"):
            text += "  (unused)"
        text += decision_text(node, self.iterations.get(node.id))
        text += _marked(nonfinite_mark(node)) + _marked(failed_mark(node))
        text += _overlay_mark(self.overlays.text(node.id))
        if self.show_source and node.source:
            text += f"  @ {short_source(node.source)}"
        return visible(text, LINE_LIMIT)

    def item_label(self, item: Item) -> str:
        text = self.scope_label(item.id) if item.is_scope else self.op_label(self.ir.node(item.id))
        side = self.references.get(item)
        if side:
            text += "  ← " + ", ".join(reference_names(self, item, side))
        if item in self.returned_too:
            text += "  (also returned)"
        return text

    def read_name(self, reader: Item, ref: Ref) -> str | None:
        """What the reader calls a side value: the parameter a call was given it as, or the
        variable a call's result was assigned to where it is read (``_view.ReadingNames``)."""
        if reader.is_scope:
            name = self.reading.read_by_call(ref, reader.id)
        else:
            name = self.reading.read_by_op(ref, self.ir.node(reader.id))
        return visible(name, LINE_LIMIT) if name else None

    def ref_name(self, ref: Ref) -> str | None:
        """The variable holding this one value: ``h`` of ``h, gate = x.chunk(2)``."""
        return variable_name(self.ir.node(ref), ref.slot)

    def value_name(self, producer: Item, ref: Ref) -> str:
        """What a side value is called: its variable, else the input or call it comes from."""
        node = self.ir.node(ref)
        name = self.ref_name(ref)
        if name:
            return visible(name, LINE_LIMIT)
        if node.kind == "input":
            return visible(input_title(self.ir, node), LINE_LIMIT)
        if producer.is_scope:
            return visible(self.ir.scope(producer.id).label, LINE_LIMIT)
        return visible(op_display(node), LINE_LIMIT) if producer != SOURCE else "input"

    def item_name(self, item: Item) -> str | None:
        """The variable(s) an item's result was assigned to, for branch labels."""
        if item.is_scope:
            names = [self.ref_name(r) for r in self.ir.scope(item.id).outputs]
            return ", ".join(dict.fromkeys(names)) if names and all(names) else None  # type: ignore[arg-type]
        return self.ir.node(item.id).name

    def short_name(self, item: Item) -> str:
        """What yields an unnamed value: the call's name inside its parent, or the op."""
        if not item.is_scope:
            return op_display(self.ir.node(item.id))
        scope = self.ir.scope(item.id)
        return relative_name(scope.path, self.ir.scope(scope.parent).path if scope.parent is not None else "")

    # -- structure ---------------------------------------------------------------

    def build(self) -> Line:
        roots = self.children[None]
        if not roots:
            return Line("(empty graph)")
        top = self.item_line(Item(True, roots[0]), 0)
        assert top is not None  # the model's own call is never a folded member
        top.children += [line for line in (self.item_line(Item(True, extra), 1) for extra in roots[1:]) if line]
        if self.backward:
            top.children.append(self.backward_section())
        return top

    def backward_section(self) -> Line:
        """``◀ backward``: per forward call, its gradient ops and the saved tensors they read."""
        count = sum(len(nodes) for _, nodes in self.backward)
        section = Line(f"◀ backward ({count} ops)")
        read = forward_reads(self.ir)
        for forward, nodes in self.backward:
            saved = dict.fromkeys(
                self.saved_name(s) for n in nodes for s in n.meta.get("saved_from", ()) if self.ir.has_node(s)
            )
            label = "◀ " + ("(loss)" if of_the_loss(forward, nodes, read) else forward.label)
            line = Line(visible(label + (f"  ← saved: {', '.join(saved)}" if saved else ""), LINE_LIMIT))
            if self.depth >= 2:
                line.children = [Line(self.op_label(n)) for n in nodes]
            section.children.append(line)
        return section

    def saved_name(self, node_id: str) -> str:
        """A forward op named by its call: ``fc2.addmm``."""
        node = self.ir.node(node_id)
        path = self.ir.scope(node.scope).path
        return f"{path}.{op_display(node)}" if path else op_display(node)

    def time_mark(self, scope_id: str) -> str:
        """``  time 1.2 ms`` (and ``, CUDA 0.8 ms``) on a profiled call; a folded run's totals
        from the repeats pass, as the summary and diagram read them."""
        numbers = fold_totals(self.ir, scope_id) if self.runs.get(scope_id) else self.ir.scope(scope_id).meta
        cpu, device = numbers.get("time_us"), numbers.get("cuda_time_us")
        if not isinstance(cpu, (int, float)):
            return ""
        return f"  time {format_duration(cpu)}" + (f", CUDA {format_duration(device)}" if isinstance(device, (int, float)) else "")

    def item_line(self, item: Item, level: int) -> Line | None:
        """The item's line with what is inside it; None for a folded member of a run."""
        if item.is_scope and item.id in self.folded:
            return None
        if self.probing:
            return Line("")
        line = Line(self.item_label(item), before=self.breaks.get(item.id, []))
        if not item.is_scope:
            return line
        line.text += self.time_mark(item.id)
        closed = self.depth is not None and level >= self.depth
        flow = self.flows.get(item.id)
        one_op = flow is not None and level > 0 and len(flow.items) == 1 and not flow.items[0].is_scope and not self.children[item.id]
        line.text += _overlay_mark(self.overlays.text(item.id, inside=closed or one_op))
        if closed:
            failed = FAILED_INSIDE if item.id in self.failed_scopes else None
            line.text += _marked(failed) + _marked(nonfinite_inside_mark(self.ir.scope(item.id).meta.get("nonfinite_ops")))
            if self.ir.scope(item.id).meta.get("graph_breaks"):
                line.text += f"  ✂ {self.ir.scope(item.id).meta['graph_breaks']} graph break(s) inside"
            return line
        if one_op and "error" not in self.ir.node(flow.items[0].id).meta:
            op = self.ir.node(flow.items[0].id)
            if decisions(op):  # the op's line is not drawn: its decisions go on the call's
                line.text += decision_text(op, self.iterations.get(op.id))
            line.text += _marked(nonfinite_mark(op))
            return line  # a leaf module that is one op: its own line says it all
        # Ops whose results nothing uses would jump over the live flow: listed apart, at the end.
        dead = self.listed_apart(flow)
        apart = set(dead)
        live = [it for it in flow.items if it not in apart] if dead else flow.items
        # Flow that does not nest is broken at values read in several places (named references).
        line.children = self.sequence(untangled(self, flow, live) or flow, live, level + 1)
        if dead:
            line.children.append(self.unused(dead) if len(dead) > 1 else self.item_line(dead[0], level + 1))
        return line

    def listed_apart(self, flow: ScopeFlow) -> list[Item]:
        """Unused ops, except a chain that is all that reads the step just before it
        (``gate(h).sigmoid().mean()`` read by Python): that one stays in place."""
        readers: dict[Item, set[Item]] = {a: set(targets) for a, targets in flow.edges.items()}
        for b, refs in flow.references.items():
            for a, _ in refs:
                readers.setdefault(a, set()).add(b)
        apart: list[Item] = []
        kept: set[Item] = set()
        previous: Item | None = None
        for it in flow.items:
            if it in self.dead:
                tail = previous is not None and set(self.preds(flow, it)) <= {previous} and (
                    previous in kept or all(b in self.dead for b in readers.get(previous, ()))
                )
                if not tail:
                    apart.append(it)
                    continue
                kept.add(it)
            previous = it
        return apart

    def unused(self, items: list[Item]) -> Line:
        counts = Counter(op_display(self.ir.node(it.id)) for it in items)
        names = [f"{name} ×{n}" if n > 1 else name for name, n in counts.items()]
        shown = ", ".join(names[:4]) + (", …" if len(names) > 4 else "")
        # a graph break at one of them stays in sight, before the group
        breaks = [mark for it in items for mark in self.breaks.get(it.id, [])]
        return Line(visible(f"┬ (unused: {len(items)} ops: {shown})", LINE_LIMIT), before=breaks)

    def sequence(self, flow: ScopeFlow, items: list[Item], level: int) -> list[Line]:
        """Series-parallel layout of ``items``, a topologically ordered subset of the scope.

        Edges entering the subset come from its virtual source and edges leaving it go
        to its virtual sink. An item is a series cut when no edge jumps over it.
        """
        if len(items) <= 1:
            return [line for line in (self.item_line(i, level) for i in items) if line is not None]
        pos = {it: k for k, it in enumerate(items)}
        n = len(items)
        cover = [0] * (n + 1)
        for b in items:
            for a in self.preds(flow, b):
                if a not in pos and pos[b] > 0:  # from outside the subset: its source
                    cover[0] += 1
                    cover[pos[b]] -= 1
        for a in items:
            for b in flow.edges.get(a, ()):
                if b in self.dead and b not in pos:
                    continue  # listed apart: see item_line
                pb = pos.get(b, n)
                if pb > pos[a] + 1:
                    cover[pos[a] + 1] += 1
                    cover[pb] -= 1
        cuts, running = [], 0
        for k in range(n):
            running += cover[k]
            if running == 0:
                cuts.append(k)
        if not cuts:
            return self.parallel(flow, items, level, bypass=None)
        out: list[Line] = []
        start = 0
        for cut in [*cuts, n]:
            if cut > start:
                section = items[start:cut]
                out.extend(self.parallel(flow, section, level, bypass=self.bypass_label(flow, items, section, cut)))
            line = self.item_line(items[cut], level) if cut < n else None
            if line is not None:
                hidden = self.reads_from_inside(flow, items[cut], items[start:cut])
                if hidden:
                    line.text = visible(f"{line.text}  ← {', '.join(hidden)}", LINE_LIMIT)
                out.append(line)
            start = cut + 1
        return out

    def reads_from_inside(self, flow: ScopeFlow, item: Item, section: list[Item]) -> list[str]:
        """Names of the values ``item`` reads from inside ``section`` other than the ends of its
        branches, which the layout already shows flowing into ``item`` (``c`` in
        ``e = stack([a, b, c]).sum(0); e.exp() + c``)."""
        position = {it: k for k, it in enumerate(section)}
        preds = [p for p in self.preds(flow, item) if p in position]
        if not preds or (not item.is_scope and self.names_operands(self.ir.node(item.id))):
            return []
        successors = {a: [b for b in flow.edges.get(a, ()) if b in position] for a in section}
        # a branch's end: no step of the section reads it; every other pred is out of sight
        return list(dict.fromkeys(
            self.item_name(p) or self.short_name(p) for p in preds if successors[p] and not (p.is_scope and p.id in self.folded)
        ))

    def bypass_label(self, flow: ScopeFlow, items: list[Item], section: list[Item], cut: int) -> str:
        """The line for the value that jumps over ``section``: ``(skip connection)`` when an
        add or a cat joins it back, its variable's name when another step reads it, and
        nothing when the section is a side computation whose result nothing joins."""
        inside, after = set(section), [*items[cut:], SINK]
        if not any(b in after for a in section for b in flow.edges.get(a, ())):
            return ""  # a side branch: read by reference or not at all
        for b in after:
            for a in self.preds(flow, b):
                if a not in inside and a not in after:
                    if not any(a in self.preds(flow, it) for it in section):
                        return ""  # the section does not read the value: a side branch that b joins
                    if not b.is_scope and b != SINK and op_name(self.ir.node(b.id).target) in JOINS:
                        return "(skip connection)"
                    name = self.item_name(a) if a != SOURCE else None
                    return visible(name, LINE_LIMIT) if name else ""
        return ""

    def forget(self, flow: ScopeFlow) -> None:
        """Drop what was worked out for ``flow`` (a trial layout's, whose id may be reused)."""
        self._preds.pop(id(flow), None)

    def preds(self, flow: ScopeFlow, item: Item) -> list[Item]:
        cache = self._preds.get(id(flow))
        if cache is None:
            cache = self._preds[id(flow)] = {}
            for a, targets in flow.edges.items():
                for b in targets:
                    cache.setdefault(b, []).append(a)
        return cache.get(item, [])

    def parallel(self, flow: ScopeFlow, items: list[Item], level: int, bypass: str | None) -> list[Line]:
        """A section with no cut point inside: its connected components are branches.

        ``bypass``: the section lies between two cuts, so a single component there is
        jumped over by an edge from before it to after it; this labels that edge's branch
        (empty: no branch line). None: the section is not bypassed.
        """
        members = set(items)
        parent = {it: it for it in items}

        def find(x: Item) -> Item:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        for a in items:
            for b in flow.edges.get(a, ()):
                if b in members:
                    parent[find(a)] = find(b)
        groups: dict[Item, list[Item]] = {}
        for it in items:
            groups.setdefault(find(it), []).append(it)
        # side values first: a branch whose result others read by reference comes before them
        read = {p for it in items for p, _ in self.references.get(it, ())}
        branches = sorted(groups.values(), key=lambda branch: not read.intersection(branch))
        if len(branches) == 1 and bypass is None:
            return tangled(self, flow, items, level)
        lines = distinct_labels(self, branches, [self.branch(flow, branch, level) for branch in branches])
        if len(branches) == 1 and bypass:
            lines.append(Line("┬ " + bypass))
        return lines

    def branch(self, flow: ScopeFlow, items: list[Item], level: int) -> Line:
        body = self.sequence(flow, items, level)
        end = items[-1]
        returned = SINK in flow.edges.get(end, ()) or any(p == end for p, _ in flow.references.get(SINK, ()))
        if len(body) == 1 and not body[0].children:
            return Line("┬ " + body[0].text, before=body[0].before, returned=returned)
        name = joined_as(self, flow, end, set(items)) or self.item_name(end) or self.short_name(end)
        return Line("┬ " + visible(name, LINE_LIMIT), body, returned=returned)

    def listing(self, flow: ScopeFlow, items: list[Item], level: int) -> list[Line]:
        """Fallback for flow that is not series-parallel: numbered items with explicit inputs."""
        shown = [it for it in items if not (it.is_scope and it.id in self.folded)]
        number = {it: k + 1 for k, it in enumerate(shown)}
        first_of = {Item(True, sid): Item(True, run[0]) for run in self.runs.values() for sid in run}
        lines = []
        for it in shown:
            line = self.item_line(it, level)
            assert line is not None
            preds = dict.fromkeys(first_of.get(p, p) for p in self.preds(flow, it))
            refs = ", ".join(f"[{number[p]}]" for p in preds if p in number and p != it)
            line.text = f"[{number[it]}] {line.text}" + (f"  ← {refs}" if refs else "")
            lines.append(line)
        return lines
