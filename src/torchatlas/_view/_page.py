"""What the web page says of a graph, decided here so that it reads as the tree, the summary
and the diagram do: every number in its one spelling, every shape, every fold's name and
totals, the graph's counts, and which reads are drawn as ``↪`` stand-ins (the diagram's rule,
``stand_in_reads``). ``page_document`` puts all of it in the typed page document
(``_document``) that ``_render/_html`` writes into the page; the viewer (``web/src``) lays it
out and formats no graph fact, nor decides a stand-in, of its own.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from torchatlas._ir import NODE_KINDS, GraphIR, Ref, Scope, Source, TensorMeta
from torchatlas._ops import CATEGORIES, LEGEND, category, collective_kind
from torchatlas._text import format_bytes, format_compact, format_duration, format_shape, format_si, visible
from torchatlas._view._backward import BACKWARD_SCOPE, backward_apart
from torchatlas._view._breaks import short_reason
from torchatlas._view._compared import compared_fields, compared_runs, overlay_fields, with_fill
from torchatlas._view._document import (
    PageBreak,
    PageCompile,
    PageDocument,
    PageFoldBox,
    PageMeta,
    PageNode,
    PageScope,
    PageView,
    SourceRef,
)
from torchatlas._view._far import stand_in_reads
from torchatlas._view._labels import (
    arguments_text,
    collective_text,
    collectives_under,
    counted_reads,
    decisions,
    dominant_dtype,
    fold_name,
    held_collectives_text,
    loop_iterations,
    model_title,
    op_display,
    placement_text,
    read_label,
    relative_name,
    scope_name,
    shape_text,
)
from torchatlas._view._options import STATE_KINDS, ViewOptions
from torchatlas._view._overlays import overlay_marks
from torchatlas._view._palette import COMPILE_REGIONS, EAGER_REGION, GRAPH_BREAK, PALETTES, leaf_module_category
from torchatlas._view._units import fold_runs, fold_totals, standard_leaves
from torchatlas._view._words import (
    DIFF_STATUS,
    PAGE_WORDS,
    call_marks,
    far_name,
    op_marks,
    params_words,
    stats_words,
    value_words,
)


def _count(value: Any) -> str:
    return f"{value:,}"


METRIC_WORDS: dict[str, Callable[[Any], str]] = {
    "f": format_si,  # FLOPs, as the summary writes them: 653.32K
    "params": format_compact,  # parameters, as the diagram writes them: 7.1B
    "ab": format_bytes,  # bytes: 1.50 KiB, 0.98 GiB
    "tu": format_duration,  # time: 812 µs, 3.40 ms
    "ctu": format_duration,
    "nf": _count,  # ops with NaN/Inf outputs
}
"""Page metric key -> the one spelling of that quantity in every output."""


def metric_words(values: Mapping[str, Any]) -> dict[str, str]:
    """``{"f": 653320, "ab": 1024}`` -> ``{"f": "653.32K", "ab": "1.00 KiB"}`` for the keys the page colours by."""
    return {key: METRIC_WORDS[key](value) for key, value in values.items() if key in METRIC_WORDS and value is not None}


@dataclass(frozen=True)
class ShapeWords:
    """How the page writes one tensor."""

    shape: str
    """``2×10×96``, with the dtype where it is not the graph's main one (``1×16 int64``); a 0-d
    tensor is ``scalar``: an edge's label and a box's subtitle, as the tree and diagram write it."""
    full: str
    """``2×10×96  float32  cpu``: a tooltip's and the details panel's line."""


def shape_words(meta: TensorMeta, dominant: str | None = None) -> ShapeWords:
    return ShapeWords(shape_text(meta, dominant), visible(f"{format_shape(meta.shape)}  {meta.dtype}  {meta.device}"))


@dataclass(frozen=True)
class PageFold:
    """A run of identical sibling calls the page folds to one ``×N`` box: the one fold rule
    (``fold_runs``), so the page folds what the tree and the diagram fold."""

    members: list[str]
    """The members' scope ids, in call order."""
    name: str
    """``layers.0–79`` below its caller's path; a loop calling one module: its path alone
    (``block``), as in the tree, the summary and the diagram."""
    totals: dict[str, int | float] = field(default_factory=dict)
    """The run's numbers (page metric keys), as the repeats pass totalled them (``repeat_groups``)."""
    words: dict[str, str] = field(default_factory=dict)
    """``totals`` as every output writes them."""


_PAGE_KEYS = {"flops": "f", "params": "params", "activation_bytes": "ab", "time_us": "tu", "cuda_time_us": "ctu", "nonfinite_ops": "nf"}
"""The repeats pass's run totals (scope meta keys) -> the page's metric keys."""


def page_folds(ir: GraphIR) -> dict[str, PageFold]:
    """First member's scope id -> its run, for every run the outputs fold, with the totals
    the repeats pass wrote for it (``repeat_groups``' ``totals``)."""
    folds: dict[str, PageFold] = {}
    for first, member_ids in fold_runs(ir).items():
        members = [ir.scope(sid) for sid in member_ids]
        found = fold_totals(ir, first)
        totals = {page: found[key] for key, page in _PAGE_KEYS.items() if _number(found.get(key))}
        parent = ir.scope(members[0].parent).path if members[0].parent is not None else ""
        folds[first] = PageFold(member_ids, relative_name(fold_name(members), parent), totals, metric_words(totals))
    return folds


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value and abs(value) != float("inf")


def call_name(ir: GraphIR, scope_id: str, model: str) -> str:
    """A module call's box name below its caller's path, ``#k`` for a repeated call
    (``layers.0``, ``fc#1``; the model's title for its own call): the summary's and the diagram's."""
    scope = ir.scope(scope_id)
    parent = ir.scope(scope.parent).path if scope.parent is not None and ir.has_scope(scope.parent) else ""
    return relative_name(scope_name(scope, model), parent)


@dataclass(frozen=True)
class GraphCounts:
    """How big a graph is, as ``repr(graph)`` and the page's status line say it."""

    ops: int
    calls: int
    """Module calls, the model's own included (``len(ir.scopes)``)."""

    @property
    def text(self) -> str:
        """``1,234 ops · 32 module calls``."""
        return f"{self.ops:,} op{'s' if self.ops != 1 else ''} · {self.calls:,} module call{'s' if self.calls != 1 else ''}"


def graph_counts(ir: GraphIR) -> GraphCounts:
    return GraphCounts(sum(1 for _ in ir.ops()), len(ir.scopes))


def page_view(options: ViewOptions, closed: list[int] | None = None) -> PageView:
    """The page's first view from the one set of view options: which node kinds it hides
    (the diagram's rule, ``ViewOptions.hidden_kinds``; the params switch shows them), which
    kinds are a module's state (an op's box lists the weights it reads), whether
    runs start folded, how deep calls start open (None: as deep as fits the window) and
    which way values flow (ELK's ``DOWN`` or ``RIGHT``)."""
    return PageView(
        hidden=sorted(options.hidden_kinds()),
        state=sorted(STATE_KINDS),
        fold=options.fold_repeats,
        depth=options.depth,
        direction="RIGHT" if options.direction == "LR" else "DOWN",
        closed=closed or [],
    )


# The numbers a box can be coloured by: page key, menu name, unit (how the scale writes it).
# Ops and module calls carry the same key: an op its own number, a call the inclusive one.
METRICS: tuple[tuple[str, str, str], ...] = (
    ("f", "FLOPs", "count"),
    ("params", "params", "count"),
    ("ab", "activation bytes", "bytes"),
    ("tu", "time", "us"),
    ("ctu", "CUDA time", "us"),
    ("nf", "NaN/Inf ops", "count"),
    ("cb", "communication bytes", "bytes"),
    ("dch", "changes (diff)", "count"),
    ("drk", "differs across ranks", "count"),
)
METRIC_KEYS = tuple(key for key, _, _ in METRICS)


class _Interner:
    """Repeated strings (files, shapes, op names) are stored once and referenced by index."""

    def __init__(self) -> None:
        self.items: list[Any] = []
        self._index: dict[Any, int] = {}

    def __call__(self, value: Any, key: Any = None) -> int:
        """``value``'s index; ``key``: what makes two values the same (default: the value itself)."""
        key = value if key is None else key
        if key not in self._index:
            self._index[key] = len(self.items)
            self.items.append(value)
        return self._index[key]


def _source(src: Source | None, files: _Interner) -> SourceRef | None:
    if src is None:
        return None
    code = None if src.code is None else "\n".join(visible(line) for line in src.code.split("\n"))
    return [files(visible(src.file)), src.line, code]


def _finite(value: Any) -> int | float | None:
    """A count the page can show: finite (JSON has no NaN or Infinity), not a bool."""
    ok = isinstance(value, int) and not isinstance(value, bool) or isinstance(value, float) and math.isfinite(value)
    return value if ok else None


_STATS = ("min", "max", "mean", "std", "absmax", "nan", "inf", "zeros", "sampled")


def _stats_words(stats: list[Any]) -> list[str | None]:
    return [stats_words(s) if isinstance(s, dict) else None for s in stats]


def _stats(stats: Any) -> list[Any] | None:
    """``trace(stats=True)``: each output's numbers at 6 digits (one that is not a finite number left out),
    or null for an output without stats."""
    if not isinstance(stats, list):
        return None
    return [
        {k: float(f"{v:.6g}") if isinstance(v, float) else v for k in _STATS if _finite(v := s.get(k)) is not None}
        if isinstance(s, dict) else None
        for s in stats
    ]


def _facts(meta: dict[str, Any], bytes_key: str | None) -> dict[str, Any]:
    """Fields every node and call may have: a diff's marks; and those of ops and calls (``bytes_key``
    is where their activation bytes are): activation bytes and profiled times."""
    d: dict[str, Any] = {}
    for key, name in ((bytes_key, "ab"), ("time_us", "tu"), ("cuda_time_us", "ctu")) if bytes_key else ():
        if _finite(meta.get(key)) is not None:
            d[name] = meta[key]
    if "diff" in meta:  # a diff's merged graph (``GraphDiff.graph``): which side has the box, its badge, every change
        d["df"] = visible(str(meta["diff"]))
        if meta.get("diff_note"):
            d["dfn"] = visible(str(meta["diff_note"]))
        if meta.get("diff_changes"):
            d["dfc"] = [visible(str(c)) for c in meta["diff_changes"]]
        if isinstance(meta.get("diff_a_path"), str):  # a renamed module's name in A: search finds it by either
            d["dfa"] = visible(meta["diff_a_path"])
        d["dfw"] = DIFF_STATUS.get(meta["diff"], d["df"])
        if meta["diff"] in ("changed", "added", "removed"):
            d["dch"] = 1
    if "ranks_differ" in meta:  # a multi-rank page: where the ranks run different ops, shapes or collectives
        d["drk"] = 1 if meta["ranks_differ"] else 0
    return d


def page_document(ir: GraphIR, title: str | None = None, options: ViewOptions | None = None) -> PageDocument:
    """The document the web page reads of the analysed ``ir``: indices instead of ids, shared
    strings interned, and ``options``' first view.

    A ``backward=True`` graph's backward ops sit apart, in a ``backward`` call after the
    forward ones (``backward_apart``), as in the diagram."""
    options = options or ViewOptions()
    counts = graph_counts(ir)
    ir = backward_apart(ir)
    scopes = list(ir.scopes)
    roots = [s for s in scopes if s.parent is None]
    if len(roots) != 1 or scopes[0].parent is not None:
        # The viewer draws one root; graphs with several (or none) get a synthetic one.
        scopes = [Scope(id="__root__", parent=None, path="", cls=str(ir.meta.get("model", "graph")), call=0)] + [
            s if s.parent is not None else Scope(s.id, "__root__", s.path, s.cls, s.call, s.source, s.outputs, s.meta) for s in scopes
        ]
    scope_index = {s.id: i for i, s in enumerate(scopes)}
    node_index = {n.id: i for i, n in enumerate(ir.nodes)}
    files, metas, names, words_of = _Interner(), _Interner(), _Interner(), _Interner()
    categories = list(CATEGORIES)
    repeats, folds = _fold_data(ir, scope_index)
    # a folded loop's caller ops go in its fold: the repeats pass's group -> the page's
    page_group = {
        ir.scope(sid).meta["repeat"].get("group"): rep[0] for sid, rep in repeats.items()
        if isinstance(ir.scope(sid).meta.get("repeat"), dict)
    }
    iterations = loop_iterations(ir)
    stand_in = stand_in_reads(ir, _in_runs(ir) if options.fold_repeats else (), STATE_KINDS)
    far_read = {ir.node(reader).inputs[j].node: True for reader, j in stand_in}
    dominant = dominant_dtype(ir)
    model = model_title(ir)
    metrics: set[str] = set()
    overlays = overlay_marks(ir)
    compared = compared_runs(ir)
    runs = len(compared.runs) if compared else 0

    def meta_entry(m: TensorMeta) -> int:
        words = shape_words(m, dominant)
        pl = placement_text(m) if m.placements else None
        placed = f"  [{pl}]" if pl else ""  # a DTensor: how the ranks hold it
        entry = PageMeta(shape=list(m.shape), dtype=m.dtype, device=m.device, pl=pl, x=words.shape, full=visible(words.full) + placed)
        return metas(entry, (tuple(m.shape), entry.dtype, entry.device, pl, entry.x, entry.full))

    def words_entry(d: dict[str, Any], keys: tuple[str, ...]) -> int | None:
        """The box's numbers in words, shared by the boxes that have the same (the 80 layers of a stack)."""
        words = metric_words({k: d[k] for k in keys if k in d})
        return words_of(words, json.dumps(words, sort_keys=True)) if words else None

    out_nodes = []
    for n in ir.nodes:
        d: dict[str, Any] = {"k": NODE_KINDS.index(n.kind), "s": scope_index[n.scope], "c": categories.index(category(n.target, n.kind))}
        if n.inputs:
            d["i"] = [node_index[r.node] for r in n.inputs]
            if any(r.slot for r in n.inputs):
                d["sl"] = [r.slot for r in n.inputs]
            if far := [j for j in range(len(n.inputs)) if (n.id, j) in stand_in]:
                d["fr"] = far  # drawn as stand-ins, by the diagram's rule
        if n.outputs:
            d["o"] = [meta_entry(m) for m in n.outputs]
        if n.target is not None:
            d["t"] = visible(n.target)
        d["op"] = names(visible(op_display(n) if n.kind == "op" else value_words(ir, n, dominant).title))
        if n.path is not None:
            d["path"] = visible(n.path)
        if n.name is not None:
            d["nm"] = visible(n.name)
        if n.inplace:
            d["ip"] = 1
        if n.meta.get("dead"):  # nothing reads its result: drawn faded, as the tree lists it apart
            d["dead"] = 1
        if reads := decisions(n) + [r for other in iterations.get(n.id, ()) for r in decisions(other)]:
            # Python read it to decide: a diamond mark, never faded; a loop's outcomes counted
            counted = counted_reads(reads)
            d["dc"] = [visible(read_label(first, outcome)) for first, outcome in counted]
        if n.meta.get("size_only"):
            d["so"] = 1
        body = n.meta.get("repeat") if n.kind == "op" else None
        if isinstance(body, dict) and body.get("group") in page_group and isinstance(body.get("index"), int):
            d["rg"] = [page_group[body["group"]], body["index"]]  # a folded loop's caller op: in the fold's box
        if n.source is not None:
            d["src"] = _source(n.source, files)
        facts = n.meta.get("collective")
        if collective_kind(n.target) is not None and isinstance(facts, dict):  # drawn with dashed edges
            d["cm"] = 1
            d["cl"] = visible(collective_text(n) or "")  # the details panel's words, as the tree's
            if _finite(facts.get("bytes")) is not None:
                d["cb"] = facts["bytes"]
        if _finite(n.meta.get("flops")) is not None:
            d["f"] = n.meta["flops"]
        d.update(_facts(n.meta, "bytes" if n.kind == "op" else None))
        if n.kind == "op" and (n.args or n.kwargs):
            d["a"] = arguments_text(n)
        if (stats := _stats(n.meta.get("stats"))) is not None:
            d["st"], d["stw"] = stats, _stats_words(stats)
        nonfinite = n.meta.get("nonfinite")
        nf = [int(_finite(nonfinite.get(k)) or 0) for k in ("nan", "inf")] if isinstance(nonfinite, dict) else []
        if any(nf):  # NaN and Inf counts of its outputs (trace(stats=True))
            d["nf"] = nf
        if n.kind == "op" and (marks := op_marks(n, iterations.get(n.id))):
            d["mk"] = [[m.kind, visible(m.text)] for m in marks]
        if far_read.get(n.id):
            d["fw"] = [visible(far_name(ir, Ref(n.id, slot), model)) for slot in range(len(n.outputs))]
        if held := [_held(ir.node(r).path or "", shape_text(ir.value_meta(r), dominant)) for r in n.inputs if ir.node(r).kind in STATE_KINDS]:
            d["pr"] = " · ".join(held[:2])
        d["w"] = words_entry(d, ("f", "ab", "tu", "ctu"))
        if "error" in n.meta:  # the op a partial trace stopped at
            d["err"] = visible(str(n.meta["error"]))
        if "compile_region" in n.meta:  # compile_report: the compiled graph it ran in, -1 eager
            d["cr"] = -1 if n.meta["compile_region"] is None else n.meta["compile_region"]
        d.update(overlay_fields(overlays, n.id))
        d.update(compared_fields(n, runs))
        metrics.update(k for k in METRIC_KEYS if k in d)
        out_nodes.append(PageNode(**d))

    # A closed module that holds no other module is coloured by its ops, as in the diagrams.
    parents = {s.parent for s in scopes}
    op_categories: dict[str, set[str]] = {}
    for n in ir.nodes:
        if n.kind == "op" and n.scope not in parents:
            op_categories.setdefault(n.scope, set()).add(category(n.target, n.kind))
    # Module calls holding the failing op show it even while collapsed.
    failed_scopes = {s.id for s in ir.scopes if s.meta.get("failed")}  # the failures pass
    collectives = collectives_under(ir)
    out_scopes = []
    for s in scopes:
        d = {"p": -1 if s.parent is None else scope_index[s.parent], "path": visible(s.path), "cls": visible(s.cls), "call": s.call}
        d["nm"] = visible(call_name(ir, s.id, model) if ir.has_scope(s.id) else model)
        if s.source is not None:
            d["src"] = _source(s.source, files)
        if s.outputs:
            d["out"] = [node_index[r.node] for r in s.outputs]
            if any(r.slot for r in s.outputs):
                d["osl"] = [r.slot for r in s.outputs]
        if s.id in op_categories:
            d["c"] = categories.index(leaf_module_category(op_categories[s.id], s.class_name))
        if s.id in repeats:
            d["rep"] = repeats[s.id]
        if _finite(s.meta.get("params")) is not None:
            d["params"] = s.meta["params"]
            d["pw"] = params_words(d["params"])
        if _finite(s.meta.get("flops")) is not None:
            d["f"] = s.meta["flops"]
        if _finite(s.meta.get("comm_bytes")):
            d["cb"] = s.meta["comm_bytes"]
        d.update(_facts(s.meta, "activation_bytes"))
        if (stats := _stats(s.meta.get("output_stats"))) is not None and any(stats):
            d["st"], d["stw"] = stats, _stats_words(stats)  # of the values the call returned, in `out` order
        if _finite(s.meta.get("nonfinite_ops")) is not None:  # ops with NaN/Inf outputs inside, 0 included
            d["nf"] = s.meta["nonfinite_ops"]
        if s.id in failed_scopes:
            d["err"] = 1
        if marks := call_marks(s, s.id in failed_scopes):
            d["mk"] = [[m.kind, visible(m.text)] for m in marks]
        if s.meta.get("graph_breaks"):
            d["gb"] = s.meta["graph_breaks"]
        held = held_collectives_text(collectives.get(s.id, []))
        if held:
            d["cw"] = visible(held)
        if s.id.startswith(BACKWARD_SCOPE):  # the backward part: drawn dashed, as in the diagram
            d["bw"] = 1
        d["w"] = words_entry(d, ("params", "f", "ab", "tu", "ctu", "nf"))
        d.update(overlay_fields(overlays, s.id))
        metrics.update(k for k in METRIC_KEYS if k in d)
        out_scopes.append(PageScope(**d))

    return PageDocument(
        title=visible(title or model),
        status=counts.text,
        # the backward part starts as one closed box beside the forward graph (a click opens it)
        view=with_fill(
            page_view(options, sorted(scope_index[sid] for sid in {*standard_leaves(ir, options), BACKWARD_SCOPE} if sid in scope_index)),
            overlays, getattr(options, "fill", None),  # HtmlOptions.fill
        ),
        folds=folds,
        overlaySteps=len(PALETTES["light"].overlay),
        metrics=[list(m) for m in METRICS if m[0] in metrics]
        + [[f"ov:{name}", name, ""] for name in overlays.names if overlays.entries[name]["kind"] == "number"],
        kinds=list(NODE_KINDS),
        categories=categories,
        # only what is drawn: the categories of this graph's ops and boxes
        legend=[list(item) for item in LEGEND if categories.index(item[0]) in {x.c for x in (*out_nodes, *out_scopes)}],
        scopes=out_scopes,
        nodes=out_nodes,
        files=files.items,
        metas=metas.items,
        names=names.items,
        words=words_of.items,
        compile=_compile_data(ir, node_index, scope_index, files),
        ui=dict(PAGE_WORDS),
        compared=compared,
    )


def _held(path: str, shape: str) -> str:
    """``W 16×3×3×3``: a parameter an op reads, by its last name (``W`` weight, ``b`` bias)."""
    leaf = path.rsplit(".", 1)[-1]
    return f"{ {'weight': 'W', 'bias': 'b'}.get(leaf, leaf)} {shape}"


def _in_runs(ir: GraphIR) -> set[str]:
    """The scope ids inside a member of a run the outputs fold."""
    members = {m for run in fold_runs(ir).values() for m in run}
    inside: set[str] = set()
    for s in ir.scopes:  # callers come before their calls
        if s.id in members or s.parent in inside:
            inside.add(s.id)
    return inside


def _fold_data(ir: GraphIR, scope_index: dict[str, int]) -> tuple[dict[str, list[Any]], dict[str, PageFoldBox]]:
    """Scope id -> [group, index, count] for the runs every output folds (the one fold rule),
    and group -> its name, totals and their words."""
    rep: dict[str, list[Any]] = {}
    folds: dict[str, PageFoldBox] = {}
    for first, fold in page_folds(ir).items():
        group = f"g{scope_index[first]}"
        for i, sid in enumerate(fold.members):
            rep[sid] = [group, i, len(fold.members)]
        folds[group] = PageFoldBox(name=visible(fold.name), v=fold.totals, w=fold.words)
    return rep, folds


def _compile_data(ir: GraphIR, node_index: dict[str, int], scope_index: dict[str, int], files: _Interner) -> PageCompile | None:
    """``compile_report``: the compiled graphs' colours and every break, with the op it resumed at."""
    if "graph_breaks" not in ir.meta:
        return None
    breaks = [
        PageBreak(
            kind=b.kind, reason=short_reason(b), full=b.reason, graph=b.graph, call=b.call, src=_source(b.source, files),
            s=scope_index.get(b.scope) if b.scope is not None else None, n=node_index.get(b.node) if b.node is not None else None,
        )
        for b in ir.graph_breaks
    ]
    return PageCompile(
        graphs=ir.meta.get("compile_graphs", 0), colors=list(COMPILE_REGIONS), eager=EAGER_REGION, breakColor=GRAPH_BREAK, breaks=breaks,
    )
