"""Dynamo's compiled graphs laid over the eager graph: which op ran in which graph, and
where each graph break falls.

A pure function of the eager graph and plain records of what dynamo compiled
(:class:`CompileFacts`). The two runs execute the same code in the same order (but for
code only eager runs, behind ``torch.compiler.is_compiling()``), so the ops of the compiled
graphs, in the order they ran, line up with the eager ops by op order and name first, and
their user source line second (:func:`_pairs`): ops inside ``torch.nn`` modules have
torch's source, which neither side keeps. An op no compiled graph holds has no region.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .._ir import GraphIR, Node
from .._ops import op_name

Key = tuple[str, int]
"""A user source line: file and line number."""


@dataclass
class CompiledGraph:
    """One graph dynamo compiled."""

    keys: list[Key | None]
    """The user source line of each of its ops, in graph order (None where dynamo kept no stack)."""
    reason: str
    """Why dynamo ended the graph there (its ``compile_subgraph_reason``)."""
    graph_break: bool
    """True when that reason is a graph break, not the end of the frame."""
    stack: list[tuple[str, int, str]]
    """The user frames (file, line, code) where dynamo ended it, outermost first."""
    call: int
    """The input set whose run compiled it (0: the first)."""
    names: list[str] = field(default_factory=list)
    """The name of each of its ops (``_ops.op_name``), in graph order, as ``keys``."""


@dataclass
class GuardFailure:
    """A compiled frame dynamo would not reuse for a later input set, so it compiled it again."""

    reason: str
    file: str
    line: int
    code: str
    call: int


@dataclass
class CompileFacts:
    graphs: list[CompiledGraph] = field(default_factory=list)
    runs: list[tuple[int, int]] = field(default_factory=list)
    """(input set, graph index) for every run of a compiled graph, in the order they ran."""
    failures: list[GuardFailure] = field(default_factory=list)


_KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (".item()/.tolist()", ("item()", "tolist", "capture_scalar_outputs")),
    ("print/logging", ("`print`", "builtin print", "logging.", "logger")),
    ("dynamic shape guard", ("dynamic shape", "dynamic_shape", "data-dependent expression", "symbolic shape")),
    ("data-dependent", ("generic_jump", "data-dependent", "data dependent", "data_dependent")),
)
"""Short classes of dynamo's reason texts, first match wins; anything else is an unsupported call."""


def break_kind(reason: str) -> str:
    """The class of dynamo's reason, read from its heading and explanation (its hints name
    other cases, such as ``print``, as examples)."""
    lines = [line.strip() for line in reason.splitlines()]
    lower = " ".join(line for line in lines[:1] + [x for x in lines if x.startswith("Explanation:")]).lower()
    for kind, words in _KINDS:
        if any(w.lower() in lower for w in words):
            return kind
    return "unsupported call"


def _key(node: Node) -> Key | None:
    return (node.source.file, node.source.line) if node.source is not None else None


Step = tuple[str | None, Key | None]
"""One op as the alignment compares it: its name, and its user source line where known."""


def _same(a: Step, b: Step) -> bool:
    """The same op: equal names, and equal lines where both sides know theirs."""
    return a[0] == b[0] and (a[1] is None or b[1] is None or a[1] == b[1])


def _same_line(a: Step, b: Step) -> bool:
    """The same user line, whatever the two sides call the op (dynamo may spell it differently)."""
    return a[1] is not None and a[1] == b[1]


_LOOKAHEAD = 48
"""How many ops the alignment skips, at most, on both sides together to find the next common line."""


def _pairs(ours: list[Step], theirs: list[Step]) -> list[tuple[int, int]]:
    """Matched positions of two sequences of ops that run in the same order.

    Walks both in step; where they differ, it goes on at the nearest pair of the same op
    (:func:`_same`), skipping the fewest ops on both sides together (an op only one side
    has, such as dynamo's ``size`` calls, or one each that the two sides spell differently).
    Local by design: repeated layers repeat every op, so a global longest match would pair
    one layer's ops with another's.
    """
    pairs = []
    i = j = 0
    while i < len(ours) and j < len(theirs):
        if _same(ours[i], theirs[j]) or _same_line(ours[i], theirs[j]):
            pairs.append((i, j))
            i, j = i + 1, j + 1
            continue
        skip = next(
            (
                (a, total - a)
                for same in (_same, _same_line)  # the same op first; else the same line
                for total in range(1, _LOOKAHEAD)
                for a in range(total + 1)
                if i + a < len(ours) and j + total - a < len(theirs) and same(ours[i + a], theirs[j + total - a])
            ),
            (1, 1),  # nothing near: one op each, spelled differently
        )
        i, j = i + skip[0], j + skip[1]
    return pairs


def _align(ops: list[Node], facts: CompileFacts, runs: list[int]) -> tuple[list[int | None], list[int]]:
    """The run (index into ``runs``) each op ran in, or None where it ran eagerly between
    runs; and where each run ends in ``ops``.

    Ops line up by name and line, whether or not dynamo broke the forward: a forward compiled
    whole may still have run ops only eagerly (code behind ``torch.compiler.is_compiling()``).
    An unmatched op between two ops of one run ran in it, as dynamo may fold or respell an op,
    unless it is on a user line no compiled graph holds, with no compiled op of unknown line
    opposite it: that op ran only eagerly (see :func:`_widen` for the ops just outside a run's matched ones).
    """
    ours = [(op_name(n.target), _key(n)) for n in ops]
    theirs = [
        (r, step)
        for r, g in enumerate(runs)
        for step in zip(facts.graphs[g].names or [None] * len(facts.graphs[g].keys), facts.graphs[g].keys)
    ]
    matched: list[int | None] = [None] * len(ops)
    pairs = _pairs(ours, [step for _, step in theirs])
    for a, b in pairs:
        matched[a] = theirs[b][0]
    compiled_lines = {key for g in runs for key in facts.graphs[g].keys if key is not None}
    opposite = [False] * len(ops)  # a compiled op of no known line lies between the same two matched ops
    for (a1, b1), (a2, b2) in zip(pairs, pairs[1:]):
        if any(theirs[b][1][1] is None for b in range(b1 + 1, b2)):
            opposite[a1 + 1:a2] = [True] * (a2 - a1 - 1)
    eager_only = [not opposite[i] and ours[i][1] is not None and ours[i][1] not in compiled_lines for i in range(len(ops))]
    # An op dynamo folded or spelled differently, between two ops of one run, ran in that run.
    following: list[int | None] = [None] * len(ops)
    nxt: int | None = None
    for i in range(len(ops) - 1, -1, -1):
        following[i] = nxt
        nxt = matched[i] if matched[i] is not None else nxt
    filled: list[int | None] = []
    previous: int | None = None
    for i, run in enumerate(matched):
        previous = run if run is not None else previous
        filled.append(run if run is not None else (previous if previous == following[i] and not eager_only[i] else None))
    _widen(filled, pairs, [r for r, _ in theirs], eager_only)
    last: dict[int, int] = {}
    for i, run in enumerate(filled):
        if run is not None:
            last[run] = i
    ends, end = [], 0
    for r in range(len(runs)):
        end = max(end, last[r] + 1) if r in last else end
        ends.append(end)
    return filled, ends


def _widen(filled: list[int | None], pairs: list[tuple[int, int]], run_of_theirs: list[int], eager_only: list[bool]) -> None:
    """Where the first run's graph has ops before its first matched op that no eager op
    matched, as many unplaced eager ops just before it ran in that run (the forward's first
    ops, with torch's source on both sides); the same after the last run's last matched op.
    Runs between breaks are not widened: the ops next to a break may have run eagerly."""
    if not pairs:
        return
    (a, b), (z, y) = pairs[0], pairs[-1]
    first, last = run_of_theirs[b], run_of_theirs[y]
    lead = sum(1 for j in range(b) if run_of_theirs[j] == first)
    i = a - 1
    while lead > 0 and i >= 0 and filled[i] is None and not eager_only[i]:
        filled[i], lead, i = first, lead - 1, i - 1
    trail = sum(1 for j in range(y + 1, len(run_of_theirs)) if run_of_theirs[j] == last)
    i = z + 1
    while trail > 0 and i < len(filled) and filled[i] is None and not eager_only[i]:
        filled[i], trail, i = last, trail - 1, i + 1


_NEAR = 16
"""How many ops either side of a break to look at for an op on the break's own line."""


def _scope_at(ir: GraphIR, ops: list[Node], boundary: int, key: Key | None) -> str | None:
    """The module call a break at ``key`` happened in: the call of an op on that line near the
    boundary (its caller, when the line called a module), else the calls around the boundary share it."""
    near = [i for i in range(max(0, boundary - _NEAR), min(len(ops), boundary + _NEAR)) if key and _key(ops[i]) == key]
    if near:
        scope = ir.scope(ops[min(near, key=lambda i: abs(i - boundary + 0.5))].scope)
        while scope.parent is not None and scope.source is not None and (scope.source.file, scope.source.line) == key:
            scope = ir.scope(scope.parent)
        return scope.id
    around = [ops[i].scope for i in (boundary - 1, boundary) if 0 <= i < len(ops)]
    if not around:
        return ir.scopes[0].id if ir.scopes else None
    chains = [ir.ancestry(s) for s in around]
    common = [a for a, b in zip(chains[0], chains[-1]) if a == b]
    return common[-1] if common else around[0]


def _source(file: str, line: int, code: str) -> dict[str, Any]:
    return {"file": file, "line": line, "code": code}


def annotate(ir: GraphIR, facts: CompileFacts) -> GraphIR:
    """``ir`` with ``compile_region`` on every op and ``graph_breaks``/``compile_graphs`` in its meta."""
    ops = list(ir.ops())
    runs = [g for call, g in facts.runs if call == 0]
    run_of, ends = _align(ops, facts, runs)
    breaks: list[dict[str, Any]] = []
    reported: set[int] = set()
    for r, g in enumerate(runs):
        graph = facts.graphs[g]
        if not graph.graph_break or g in reported:
            continue
        reported.add(g)  # a graph that runs again (a block called per layer) breaks once, where it first ran
        file, line, code = graph.stack[-1] if graph.stack else ("", 0, "")
        key = (file, line) if graph.stack else None
        boundary = ends[r]
        breaks.append({
            "kind": break_kind(graph.reason), "reason": graph.reason,
            "source": _source(file, line, code) if key else None, "scope": _scope_at(ir, ops, boundary, key),
            "node": ops[boundary].id if boundary < len(ops) else None, "graph": g, "call": 0,
        })
    for failure in facts.failures:
        first = min(
            (i for i, n in enumerate(ops) if n.source and n.source.file == failure.file and n.source.line >= failure.line),
            key=lambda i: ops[i].source.line if ops[i].source else 0, default=None,
        )
        breaks.append({
            "kind": "recompile", "reason": failure.reason, "source": _source(failure.file, failure.line, failure.code),
            "scope": _scope_at(ir, ops, first, _key(ops[first])) if first is not None else None,
            "node": ops[first].id if first is not None else None, "graph": None, "call": failure.call,
        })
    regions = {n.id: {"compile_region": runs[r] if r is not None else None} for n, r in zip(ops, run_of)}
    return ir.with_meta(nodes=regions, graph={"compile_graphs": len(facts.graphs), "graph_breaks": breaks})
