"""The view model: what a drawing shows of a graph, before any text is written.

Each drawn box is a unit: an IR node, a module call collapsed into one box, a
folded run of repeated blocks, or a small reference box standing in for a value
read far from where it was made. Scopes that are not boxed become clusters.
Edges gather every value flowing between two units; the backward part of a
``backward=True`` graph is set apart first. ``_dot`` turns this view
into DOT text. The web page gets the same folds (``fold_runs``) and the same
backward part as data (``_page``); it still picks its own far values (its hubs).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from torchatlas._ir import GraphIR, Node, Ref, Scope
from torchatlas._view._backward import backward_apart
from torchatlas._view._far import CallDistance
from torchatlas._view._options import ViewOptions
from torchatlas._view._palette import PALETTES

_HIDDEN_KINDS = ("param", "buffer")
# A value read inside this many different module calls (Llama's rotary cos/sin,
# attention masks) keeps its edges into the first call only; the other calls
# get a small reference box. Long edges through many clusters are what makes
# dot slow: Llama-32L at depth 2 took over 150 s with them, under 1 s without.
BROADCAST_CALLS = 3
_LEAF_PREFIX = "torch.nn."


@dataclass(frozen=True)
class DotOptions(ViewOptions):
    """What a diagram shows; every field is also a keyword of ``Graph.render``.

    ``depth``: module nesting to expand; deeper calls collapse into one box. ``fold_repeats``
    (default, as in the tree): a run of identical sibling blocks is drawn once, as its first
    member titled ``layers.0–79 ×80``; collapsed by ``depth``, one double-bordered ``×80`` box."""

    expand_leaf_modules: bool = False
    """Draw the ops inside standard ``torch.nn`` leaf modules (Conv2d, Linear...) instead of one box."""
    show_tensors: bool = False
    """Draw each tensor as its own node instead of a shape label on the edge."""
    show_params: bool = False
    """Draw parameters and buffers and the edges from them."""
    direction: Literal["TB", "LR"] = "TB"
    theme: Literal["light", "dark"] = "light"
    legend: bool = True
    """Add the model name and a colour legend under the diagram."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.direction not in ("TB", "LR"):
            raise ValueError(f"direction must be 'TB' or 'LR', not {self.direction!r}")
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


def call_holding(reader_chain: list[str], producer_chain: list[str]) -> str | None:
    """The module call, just below the deepest one shared with the producer, that holds the
    reader (chains are ``GraphIR.ancestry``); None when the reader is directly in the shared one."""
    shared = _shared_depth(reader_chain, producer_chain)
    return reader_chain[shared] if shared < len(reader_chain) else None


def _shared_depth(a: list[str], b: list[str]) -> int:
    """How many leading scopes two ``GraphIR.ancestry`` chains have in common."""
    depth = 0
    while depth < min(len(a), len(b)) and a[depth] == b[depth]:
        depth += 1
    return depth


def _reader_branches(
    ir: GraphIR, units: dict[str, Unit], readers: dict[Ref, list[str]]
) -> dict[tuple[str, int, str], str | None]:
    """(value, reader unit) -> the module call, below the scope shared with the producer, that holds the reader.

    None when the reader is an op directly in that shared scope. Readers that sit in one call
    there, but in at least ``BROADCAST_CALLS`` repeats of a layer further down (the encoder's
    output read by every decoder layer), are counted by those layers instead.
    """
    chains: dict[str, list[str]] = {}

    def chain(scope_id: str) -> list[str]:
        if scope_id not in chains:
            chains[scope_id] = ir.ancestry(scope_id)
        return chains[scope_id]

    out: dict[tuple[str, int, str], str | None] = {}
    for (src_id, slot), value_readers in readers.items():
        src_chain = chain(ir.node(src_id).scope)
        reader_chains = {
            r: chain(units[r].scope.id if units[r].scope is not None else units[r].node.scope) for r in value_readers
        }
        holding = {r: call_holding(c, src_chain) for r, c in reader_chains.items()}
        calls = set(holding.values()) - {None}
        if len(calls) < BROADCAST_CALLS:
            for call in calls:  # look inside each call for repeated layers that all read the value
                inside = {r: c for r, c in reader_chains.items() if holding[r] == call}
                holding.update(_repeated_layers_holding(ir, inside) or {})
        out.update(((src_id, slot, r), call) for r, call in holding.items())
    return out


def _repeated_layers_holding(ir: GraphIR, reader_chains: dict[str, list[str]]) -> dict[str, str | None] | None:
    """Reader -> the call just below the readers' deepest shared scope that holds it, when at
    least ``BROADCAST_CALLS`` of those calls are repeats of one layer; else None."""
    chains = list(reader_chains.values())
    shared = chains[0]
    for c in chains[1:]:
        shared = shared[: _shared_depth(shared, c)]
    holding = {r: call_holding(c, shared) for r, c in reader_chains.items()}
    groups: dict[Any, set[str]] = {}
    for call in holding.values():
        repeat = ir.scope(call).meta.get("repeat") if call is not None else None
        if isinstance(repeat, dict):
            groups.setdefault(repeat.get("group"), set()).add(call)
    return holding if any(len(calls) >= BROADCAST_CALLS for calls in groups.values()) else None


def build_layout(ir: GraphIR, options: DotOptions) -> Layout:
    """The units and edges to draw; ``ir`` must already carry ``meta["repeat"]`` when folding.

    A ``backward=True`` graph's backward ops are drawn apart (``backward_apart``), whatever
    the output: ``Layout.ir`` is the graph they are drawn from."""
    ir = backward_apart(ir)
    children = ir.children()
    runs = fold_runs(ir, children) if options.fold_repeats else {}
    fold_of = {m: first for first, members in runs.items() for m in members}
    # scope id -> id of the box it is drawn in (absent: drawn as a cluster)
    box_of: dict[str, str] = {}
    depth: dict[str, int] = {}
    boxes: dict[str, Unit] = {}
    root = next((s.id for s in ir.scopes if s.parent is None), None)

    def boxed(s: Scope) -> bool:
        """Drawn as one box: below ``depth``, or a standard leaf module."""
        return (options.depth is not None and depth[s.id] >= options.depth) or (
            s.parent is not None
            and not options.expand_leaf_modules
            and s.cls.startswith(_LEAF_PREFIX)
            and not children[s.id]
        )

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
        elif n.kind in _HIDDEN_KINDS and not options.show_params:
            continue
        else:
            uid = n.id
            container = None if n.scope == root else n.scope
            units[uid] = Unit(uid, "node", container, index, node=n, nodes=[n])
        unit_of[n.id] = uid

    reads: list[tuple[str, int, str, str, bool]] = []
    readers: dict[Ref, list[str]] = {}
    distance = CallDistance(ir)
    far: set[tuple[str, int, str]] = set()  # (value, reader unit) read after FAR_CALLS other calls ran
    for n in ir.nodes:
        dst = unit_of.get(n.id)
        run = hidden_run.get(n.scope)
        for src_id, slot in n.inputs:
            from_param = ir.node(src_id).kind in _HIDDEN_KINDS
            src = unit_of.get(src_id)
            if dst is None or src is None or src == dst or (from_param and not options.show_params):
                continue
            if run is not None and _in_run(ir, ir.node(src_id).scope, folds[run], hidden_run):
                continue  # one member feeding the next: drawn once, inside the first member
            if (run is not None or n.id in later_ops) and loop_of.get(src_id, "") in (run, loop_of.get(n.id)):
                continue  # one iteration of an open loop feeding the next: drawn once
            reads.append((src_id, slot, src, dst, from_param))
            # a read touching a folded run is drawn once, by the first member: its place is not the reader's
            in_run = n.scope in in_runs or ir.node(src_id).scope in in_runs
            if not from_param and not in_run and distance.is_far(ir.node(src_id), n):
                far.add((src_id, slot, dst))
            value_readers = readers.setdefault(Ref(src_id, slot), [])
            if dst not in value_readers:
                value_readers.append(dst)

    branch = _reader_branches(ir, units, readers)
    # value -> the one module call that keeps real edges, for values read in many calls
    kept_call: dict[Ref, str] = {}
    for (src_id, slot), value_readers in readers.items():
        calls = list(dict.fromkeys(b for b in (branch[(src_id, slot, r)] for r in value_readers) if b))
        if len(calls) >= BROADCAST_CALLS:
            kept_call[Ref(src_id, slot)] = calls[0]
    refs: dict[str, Unit] = {}
    edges: dict[tuple[str, str], Edge] = {}
    for src_id, slot, src, dst, from_param in reads:
        kept = kept_call.get(Ref(src_id, slot))
        if (src_id, slot, dst) in far or (kept is not None and branch[(src_id, slot, dst)] not in (None, kept)):
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
