"""The view model: what a drawing shows of a graph, before any text is written.

Each drawn box is a unit: an IR node, a module call collapsed into one box, a
folded run of repeated blocks, or a small reference box standing in for a value
read far from where it was made. Scopes that are not boxed become clusters.
Edges gather every value flowing between two units; the backward part of a
``backward=True`` graph is set apart first. ``_dot`` turns this view
into DOT text. The web page gets the same folds (``fold_runs``), the same
backward part and the same stand-in reads (``_far.stand_in_reads``) as data (``_page``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from torchatlas._ir import GraphIR, Node, Ref, Scope
from torchatlas._ops import collective_kind
from torchatlas._view._backward import BACKWARD_SCOPE, backward_apart
from torchatlas._view._far import stand_in_reads
from torchatlas._view._options import STATE_KINDS, ViewOptions
from torchatlas._view._palette import PALETTES

_LEAF_PREFIX = "torch.nn."


@dataclass(frozen=True)
class DotOptions(ViewOptions):
    """What a diagram shows; every field is also a keyword of ``Graph.render``.

    ``depth``: module nesting to expand; deeper calls collapse into one box. ``fold_repeats``
    (default, as in the tree): a run of identical sibling blocks is drawn once, as its first
    member titled ``layers.0–79 ×80``; collapsed by ``depth``, one double-bordered ``×80`` box.
    Every field of ``ViewOptions`` is honoured."""

    show_tensors: bool = False
    """Draw each tensor as its own node instead of a shape label on the edge."""
    theme: Literal["light", "dark"] = "light"
    legend: bool = True
    """Add the model name and a colour legend under the diagram."""
    fill: str | None = None
    """The overlay (``graph.overlay``) whose values fill the boxes; None: the graph's first number
    overlay, if it has any. Every overlay's values are written in the boxes either way."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.theme not in PALETTES:
            raise ValueError(f"theme must be one of {', '.join(PALETTES)}, not {self.theme!r}")


@dataclass
class Unit:
    """One drawn DOT node: an IR node, a collapsed module call, a folded run, or a reference to a far value."""

    id: str
    kind: Literal["node", "box", "fold", "ref"]
    container: str | None
    """The expanded scope whose cluster holds this unit; None for the top level."""
    first: int
    """Execution index of its first node, for ordering."""
    node: Node | None = None
    scope: Scope | None = None
    """Box: the collapsed scope. Fold: the first member."""
    members: list[Scope] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)
    source: str | None = None
    """Ref: the unit the referenced value comes from (``node`` is its producer, ``slot`` which output)."""
    slot: int = 0


@dataclass
class Edge:
    """All values flowing between two units, drawn as one edge."""

    values: list[Ref] = field(default_factory=list)
    from_param: bool = False


@dataclass
class Layout:
    """Every unit and edge of one diagram; ``root`` is the model's own scope, drawn as the page, not a cluster."""

    units: dict[str, Unit]
    edges: dict[tuple[str, str], Edge]
    root: str | None
    ir: GraphIR
    """The graph the units are drawn from: the analysed one with its backward part set apart."""
    folds: dict[str, list[Scope]] = field(default_factory=dict)
    """First member id -> the members of a run drawn open, as its first member (``layers.0–79 ×80``)."""

    def first_inside(self) -> dict[str, int]:
        """Expanded scope -> first execution index of any unit drawn inside it (empty ones are
        left out): the order a writer lays containers out in."""
        first: dict[str, int] = {}
        for unit in self.units.values():
            cur = unit.container
            while cur is not None and cur != self.root:
                first[cur] = min(first.get(cur, unit.first), unit.first)
                cur = self.ir.scope(cur).parent
        return first

    def element_count(self, show_tensors: bool) -> int:
        """Nodes plus edges once written out: what ``dot``'s layout time grows with."""
        if show_tensors:
            # each value becomes a node with one edge from its producer and one to each reader
            drawn = [e for (src, _), e in self.edges.items() if self.units[src].kind != "ref"]
            values = {v for e in drawn for v in e.values}
            reads = sum(len(e.values) for e in drawn)
            return len(self.units) + len(self.edges) - len(drawn) + 2 * len(values) + reads
        return len(self.units) + len(self.edges)


def fold_runs(ir: GraphIR, children: dict[str | None, list[str]] | None = None) -> dict[str, list[str]]:
    """First member id -> member ids, for runs of ``meta["repeat"]`` siblings (index 0, 1, 2...):
    what every renderer folds (``layers.0–79 ×80``)."""
    children = ir.children() if children is None else children
    runs: dict[str, list[str]] = {}
    for kids in children.values():
        current: list[str] = []
        group = None
        for sid in kids:
            rep = ir.scope(sid).meta.get("repeat")
            if not isinstance(rep, dict):
                current = []
                continue
            if rep.get("index") == 0:
                current, group = [sid], rep.get("group")
                runs[sid] = current
            elif current and rep.get("group") == group and rep.get("index") == len(current):
                current.append(sid)
            else:
                current = []
    return {first: members for first, members in runs.items() if len(members) > 1}


def fold_totals(ir: GraphIR, first: str) -> dict[str, int | float]:
    """The numbers the repeats pass totalled for the run ``first`` heads (``repeat_groups``'
    ``totals``: FLOPs, MACs, times summed, parameters once per module); ``{}`` for none."""
    group = (ir.scope(first).meta.get("repeat") or {}).get("group")
    for entry in ir.meta.get("repeat_groups") or ():
        if isinstance(entry, dict) and entry.get("group") == group:
            return dict(entry.get("totals") or {})
    return {}


def standard_leaves(ir: GraphIR, options: ViewOptions) -> set[str]:
    """Module calls drawn as one box at any depth: standard ``torch.nn`` layers that call no
    other module (Conv2d, Linear, LSTM) and run no collective, unless ``expand_leaf_modules``;
    the diagram's and the page's first view alike."""
    if options.expand_leaf_modules:
        return set()
    children = ir.children()
    # one that runs a collective (tensor parallelism's row-wise Linear) is open: the collective shows
    talking = {n.scope for n in ir.ops() if collective_kind(n.target) is not None}
    return {
        s.id for s in ir.scopes
        if s.parent is not None and s.cls.startswith(_LEAF_PREFIX) and not children.get(s.id) and s.id not in talking
    }


def build_layout(ir: GraphIR, options: DotOptions) -> Layout:
    """The units and edges to draw; ``ir`` must already carry ``meta["repeat"]`` when folding.

    A ``backward=True`` graph's backward ops are drawn apart (``backward_apart``), whatever
    the output: ``Layout.ir`` is the graph they are drawn from."""
    ir = backward_apart(ir)
    hidden = options.hidden_kinds()
    children = ir.children()
    runs = fold_runs(ir, children) if options.fold_repeats else {}
    fold_of = {m: first for first, members in runs.items() for m in members}
    # scope id -> id of the box it is drawn in (absent: drawn as a cluster)
    box_of: dict[str, str] = {}
    depth: dict[str, int] = {}
    boxes: dict[str, Unit] = {}
    root = next((s.id for s in ir.scopes if s.parent is None), None)

    leaves = standard_leaves(ir, options)

    def boxed(s: Scope) -> bool:
        """Drawn as one box: below ``depth``, or a standard leaf module."""
        return (options.depth is not None and depth[s.id] >= options.depth) or s.id in leaves

    # A run drawn open shows its first member; the others' nodes stand for the first one's.
    folds: dict[str, list[Scope]] = {}
    aliases: dict[str, str] = {}  # node id in a later member -> the first member's node at its place
    hidden_run: dict[str, str] = {}  # scope id inside a member after the first -> the run's first member
    in_runs: set[str] = set()  # scope ids inside any member of a folded run
    for s in ir.scopes:
        container = None if s.parent == root else s.parent
        depth[s.id] = 0 if s.parent is None else depth[s.parent] + 1
        if s.id in fold_of or s.parent in in_runs:
            in_runs.add(s.id)
        if s.parent is not None and s.parent in hidden_run:
            hidden_run[s.id] = hidden_run[s.parent]
        elif s.parent is not None and s.parent in box_of:
            box_of[s.id] = box_of[s.parent]
        elif s.id in fold_of and fold_of[s.id] in folds:
            hidden_run[s.id] = fold_of[s.id]
        elif s.id in fold_of:
            first = fold_of[s.id]
            members = [ir.scope(m) for m in runs[first]]
            if not boxed(s) and (alias := _member_aliases(ir, members)) is not None:
                folds[first] = members
                aliases.update(alias)
                continue
            box_of[s.id] = f"fold_{first}"
            if s.id == first:
                boxes[box_of[s.id]] = Unit(box_of[s.id], "fold", container, 0, scope=s, members=members)
        elif boxed(s):
            box_of[s.id] = s.id
            boxes[s.id] = Unit(s.id, "box", container, 0, scope=s, members=[s])

    # a folded loop's box holds the caller's ops of every iteration too (node meta "repeat");
    # drawn open, its later iterations' ops stand for the first one's, as its later calls do
    loop_box = {ir.scope(first).meta["repeat"].get("group"): f"fold_{first}" for first in runs}
    loop_of: dict[str, str] = {}  # a loop's caller op -> the run's first member
    later_ops: dict[str, str] = {}  # such an op in a later iteration -> the first iteration's
    for entry in ir.meta.get("repeat_groups") or ():
        body = entry.get("body") if isinstance(entry, dict) else None
        first = (entry.get("scopes") or [None])[0] if body else None
        if first in runs:
            loop_of.update((node_id, first) for ops in body for node_id in ops)
            if first in folds:
                later_ops.update((node_id, head) for ops in body[1:] for head, node_id in zip(body[0], ops))
    units: dict[str, Unit] = {}
    unit_of: dict[str, str] = {}
    for index, n in enumerate(ir.nodes):
        if n.scope in hidden_run:
            if aliases[n.id] in unit_of:
                unit_of[n.id] = unit_of[aliases[n.id]]
            continue
        if n.id in later_ops:  # a later iteration of a loop drawn open: drawn as the first one's op
            if later_ops[n.id] in unit_of:
                unit_of[n.id] = unit_of[later_ops[n.id]]
            continue
        body = n.meta.get("repeat") if loop_box and n.kind == "op" else None
        if n.kind == "output" and n.inputs and ir.node(n.inputs[0]).scope.startswith(BACKWARD_SCOPE):
            continue  # a parameter's gradient: its backward box lists it (a row of one box per parameter says nothing)
        if n.kind in ("input", "output"):
            uid = n.id
            units[uid] = Unit(uid, "node", None, index, node=n, nodes=[n])
        elif isinstance(body, dict) and loop_box.get(body.get("group")) in units:
            uid = loop_box[body["group"]]
            units[uid].nodes.append(n)
        elif n.scope in box_of:
            uid = box_of[n.scope]
            if uid not in units:
                units[uid] = boxes[uid]
                boxes[uid].first = index
            units[uid].nodes.append(n)
        elif n.kind in hidden:
            continue
        else:
            uid = n.id
            container = None if n.scope == root else n.scope
            units[uid] = Unit(uid, "node", container, index, node=n, nodes=[n])
        unit_of[n.id] = uid

    reads: list[tuple[str, int, str, str, bool]] = []
    # the one far rule (``_far.stand_in_reads``): a value is a stand-in beside a box where every
    # read of it there is a stand-in read; a read touching a folded run is drawn once, by the
    # first member, whose place is not the reader's
    stand_in = stand_in_reads(ir, in_runs, STATE_KINDS)
    near: set[tuple[str, int, str]] = set()  # (value, reader unit) read there as an edge at least once
    for n in ir.nodes:
        dst = unit_of.get(n.id)
        run = hidden_run.get(n.scope)
        for position, (src_id, slot) in enumerate(n.inputs):
            from_param = ir.node(src_id).kind in STATE_KINDS
            src = unit_of.get(src_id)
            if dst is None or src is None or src == dst or ir.node(src_id).kind in hidden:
                continue
            if run is not None and _in_run(ir, ir.node(src_id).scope, folds[run], hidden_run):
                continue  # one member feeding the next: drawn once, inside the first member
            if (run is not None or n.id in later_ops) and loop_of.get(src_id, "") in (run, loop_of.get(n.id)):
                continue  # one iteration of an open loop feeding the next: drawn once
            if n.scope.startswith(BACKWARD_SCOPE) and not ir.node(src_id).scope.startswith(BACKWARD_SCOPE):
                continue  # a tensor autograd saved: the backward part is its own region, not joined back
            reads.append((src_id, slot, src, dst, from_param))
            if (n.id, position) not in stand_in:
                near.add((src_id, slot, dst))

    refs: dict[str, Unit] = {}
    edges: dict[tuple[str, str], Edge] = {}
    for src_id, slot, src, dst, from_param in reads:
        if (src_id, slot, dst) not in near:
            ref = f"ref_{src_id}_{slot}_{dst}"
            target = units[dst]
            refs.setdefault(
                ref, Unit(ref, "ref", target.container, target.first, node=ir.node(src_id), source=src, slot=slot)
            )
            src = ref
        edge = edges.setdefault((src, dst), Edge(from_param=from_param))
        if (src_id, slot) not in edge.values:
            edge.values.append(Ref(src_id, slot))
    units.update(refs)

    return Layout(units, edges, root, ir, folds)


def _member_aliases(ir: GraphIR, members: list[Scope]) -> dict[str, str] | None:
    """Node id in each later member of a run -> the first member's node at the same place;
    None when the members' nodes do not line up one to one (the run is then drawn closed)."""
    chains = {m.id: i for i, m in enumerate(members)}
    placed: list[list[Node]] = [[] for _ in members]
    member_of: dict[str, int | None] = {}
    for n in ir.nodes:
        if n.scope not in member_of:
            member_of[n.scope] = next((chains[s] for s in ir.ancestry(n.scope) if s in chains), None)
        where = member_of[n.scope]
        if where is not None:
            placed[where].append(n)
    first = placed[0]
    aliases: dict[str, str] = {}
    for nodes in placed[1:]:
        if [(n.kind, n.target) for n in nodes] != [(n.kind, n.target) for n in first]:
            return None
        aliases.update((n.id, f.id) for n, f in zip(nodes, first, strict=True))
    return aliases


def _in_run(ir: GraphIR, scope_id: str, members: list[Scope], hidden_run: dict[str, str]) -> bool:
    """Whether a scope lies inside one of a run's members."""
    return hidden_run.get(scope_id) == members[0].id or members[0].id in ir.ancestry(scope_id)


def rank_pins(ir: GraphIR, layout: Layout) -> list[tuple[str, str]]:
    """Invisible (unit, unit) edges that keep each module call's cluster below the last value
    it reads from outside.

    Without them ``dot`` ranks a unit that reads an early value (a decoder layer's
    cross-attention keys reading the encoder's output, a bias each layer passes to the next)
    right under that value: its cluster then reaches up beside the calls before it, and the
    layers stand side by side in a staircase instead of one under the other.
    """
    position = {n.id: i for i, n in enumerate(ir.nodes)}
    chains: dict[str | None, tuple[str, ...]] = {None: ()}

    def clusters(container: str | None) -> tuple[str, ...]:
        """The cluster a unit is drawn in and the clusters around it, innermost first."""
        if container not in chains:
            chains[container] = tuple(s for s in reversed(ir.ancestry(container)) if s != layout.root)
        return chains[container]

    latest: dict[str, tuple[int, str]] = {}  # cluster -> (producer position, unit) of the last value read into it
    entries: dict[str, list[str]] = {}  # cluster -> units that read from outside it
    for (src, dst), edge in layout.edges.items():
        if edge.from_param or not edge.values:
            continue
        around_src = set(clusters(layout.units[src].container))
        produced = max(position[ref.node] for ref in edge.values)
        for cluster in clusters(layout.units[dst].container):
            if cluster in around_src:  # nested: every cluster further out holds both ends
                break
            if cluster not in latest or produced > latest[cluster][0]:
                latest[cluster] = (produced, src)
            entries.setdefault(cluster, []).append(dst)
    pins: dict[tuple[str, str], None] = {}
    for cluster, readers in entries.items():
        source = latest[cluster][1]
        for unit in readers:
            if unit != source and (source, unit) not in layout.edges:
                pins[(source, unit)] = None
    return list(pins)
