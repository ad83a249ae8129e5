"""The page document: what the web page receives of a graph, as typed data.

Every field name is the JSON key the viewer (``web/src``) reads, and every field says what it
holds below it. Python decides every word, number, fold and stand-in; the viewer lays the
document out and draws it. Per-node and per-scope keys are one to three letters, since a
70B model's page holds thousands of them; the document's own keys are words.

``to_json`` writes a document as plain JSON data, leaving out every field that is None, so a
page carries only what a graph has (a plain trace has no ``st``, ``tu``, ``df``…).
Indices (``s``, ``i``, ``p``, ``out``…) are positions in ``PageDocument.nodes`` and
``.scopes``; ``o``, ``op``, ``w`` and a source's first item index the interned ``metas``,
``names``, ``words`` and ``files``, so a string the 80 layers of a stack share is stored once.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import Any, Literal

Flag = Literal[1]
"""A mark that is 1 where it holds and left out where it does not."""

SourceRef = list
"""``[file, line, code]``: an index into ``files``, the line, and the source lines shown (or null)."""


@dataclass(kw_only=True, slots=True)
class _Facts:
    """The fields ops and module calls share: numbers to colour by, their words, a diff's marks."""

    nm: str | None = None
    """An op: the variable the code assigned its result to (``= hidden_states``); a call: its
    box name below its caller's path (``layers.0``, ``fc#1``), as the summary and diagram name it."""
    src: SourceRef | None = None
    """Where it ran in the model's code (see ``SourceRef``)."""
    f: int | float | None = None
    """FLOPs: an op's own, a call's inclusive."""
    cb: int | float | None = None
    """Communication bytes: a collective's, a call's inclusive."""
    ab: int | float | None = None
    """Activation bytes: an op's outputs', a call's inclusive."""
    tu: int | float | None = None
    """Profiled time in µs (``profile=True``)."""
    ctu: int | float | None = None
    """Profiled CUDA time in µs."""
    st: list[dict[str, int | float] | None] | None = None
    """``trace(stats=True)``: per output (a call: per returned value), min, max, mean, std, absmax,
    nan, inf, zeros, sampled at 6 digits; null for an output without stats."""
    stw: list[str | None] | None = None
    """``st`` as the details panel writes it: ``min -0.79  max 1.39  mean -0.0406 …``."""
    w: int | None = None
    """Index into ``words``: the numbers above (``f``, ``ab``, ``tu``…) as every output spells them."""
    df: str | None = None
    """A diff's merged graph: ``same``, ``changed``, ``added`` (only in B) or ``removed`` (only in A)."""
    dfn: str | None = None
    """A diff's badge: the short note of what changed."""
    dfc: list[str] | None = None
    """A diff: every change, one line each."""
    dfa: str | None = None
    """A diff: a renamed module's path in A, so search finds it by either name."""
    dch: Flag | None = None
    """A diff: 1 where anything differs (what the fill menu's "changes" colours)."""
    drk: Literal[0, 1] | None = None
    """A multi-rank page: 1 where the ranks run different ops, shapes or collectives, 0 where they
    agree (the fill menu's "differs across ranks" colours the 1s darkest)."""
    dfw: str | None = None
    """A diff: ``df`` in words (``removed in B``), in the tooltip and the panel as in the list."""
    mk: list[list[str]] | None = None
    """Its marks (``_view.Words.marks``), ``[kind, words]`` each, the one that wins first:
    ``["failed", "✗ failed: …"]``, ``["nonfinite", "⚠ NaN×8"]``, ``["unused", "unused"]``."""
    ov: dict[str, int | float | str] | None = None
    """``graph.overlay``: overlay name -> its value here (a call's: its own, else its inside's);
    a number overlay is in the fill menu as ``ov:<name>``."""
    ovw: dict[str, str] | None = None
    """``ov`` in words, as the tree and summary write them (``0.127``, ``✗ diverges here``)."""
    ovs: Literal["here", "diverges", "inherits"] | None = None
    """``torchatlas.compare``'s mark here, drawn on the box: ``here`` the first divergence (or a
    call holding it), ``diverges`` an op past the tolerance with every input within it,
    ``inherits`` one past it because an input was (faded)."""


@dataclass(kw_only=True, slots=True)
class PageNode(_Facts):
    """One IR node (an input, a parameter, a constant, an op, an output): ``PageDocument.nodes``."""

    k: int
    """Its kind: an index into ``kinds``."""
    s: int
    """The module call it ran in: an index into ``scopes``."""
    c: int
    """Its colour category: an index into ``categories``."""
    i: list[int] | None = None
    """The nodes it reads, in argument order: indices into ``nodes``."""
    sl: list[int] | None = None
    """Which output of each input it reads (``i``'s slots), where any is not the first."""
    fr: list[int] | None = None
    """Positions in ``i`` read far: drawn as a ``↪`` stand-in beside it instead of an edge, by
    the one far rule the diagram draws by (``_view.stand_in_reads``)."""
    o: list[int] | None = None
    """Its outputs: indices into ``metas``."""
    fw: list[str] | None = None
    """A value read far: its stand-in's words per output (``↪ stem.act``), as the diagram's."""
    pr: str | None = None
    """The parameters an op reads, shown on its box while they are hidden: ``W 16×3×3×3 · b 16``."""
    t: str | None = None
    """The op's target (``torch.nn.functional.linear``)."""
    op: int | None = None
    """Its title, an index into ``names``: an op's (``add (+)``), an input's name (``input_ids``),
    a parameter's last name (``weight``), as every output titles it."""
    path: str | None = None
    """An input's or output's place in the call (``args[0]``, ``kwargs['mask']``), a parameter's name."""
    ip: Flag | None = None
    """1: the op writes its input in place."""
    dead: Flag | None = None
    """1: nothing reads its result; drawn faded, as the tree lists it apart."""
    dc: list[str] | None = None
    """Every such read, with its outcome, counted over a loop's iterations."""
    so: Flag | None = None
    """1: only its size was read."""
    rg: list[Any] | None = None
    """A folded loop's caller op: ``[fold group, iteration]``; drawn in the fold's box."""
    cm: Flag | None = None
    """1: a collective (``all_reduce``…); its edges are drawn dashed."""
    cl: str | None = None
    """A collective's words in the details panel, as the tree writes them."""
    a: str | None = None
    """The op's arguments that are not tensors, as the tree writes them."""
    nf: list[int] | None = None
    """``[NaN count, Inf count]`` of its outputs, where either is not 0."""
    err: str | None = None
    """The error a partial trace stopped at, on the op that raised it."""
    cr: int | None = None
    """``compile_report``: the compiled graph it ran in, -1 where eager."""
    cmp: list[list[str]] | None = None
    """``torchatlas.compare``: the op in every run, a column per run of ``PageDocument.compared``
    (the first run's first), a cell per field (its op, outputs, status, errors)."""
    cmph: list[list[int]] | None = None
    """The cells of ``cmp`` that differ, ``[run, field]`` each: highlighted."""


@dataclass(kw_only=True, slots=True)
class PageScope(_Facts):
    """One module call: ``PageDocument.scopes``, the model's own call first, parents before children."""

    p: int
    """Its caller: an index into ``scopes``, -1 for the model's own call."""
    path: str
    """The module's path in the model (``layers.0.mlp``); empty for the model."""
    cls: str
    """The module's class, qualified (``torch.nn.modules.linear.Linear``)."""
    call: int
    """Which call of this module it is, from 0."""
    out: list[int] | None = None
    """The nodes whose values it returned: indices into ``nodes``."""
    osl: list[int] | None = None
    """Which output of each returned node (``out``'s slots), where any is not the first."""
    c: int | None = None
    """A module holding no other module: its colour category (by its ops, as in the diagrams)."""
    rep: list[Any] | None = None
    """A member of a run the outputs fold: ``[fold group, index in the run, run length]``."""
    params: int | float | None = None
    """Parameters inside it."""
    pw: str | None = None
    """``params`` in words, as every output writes them: ``7.1B params``."""
    nf: int | None = None
    """Ops with NaN/Inf outputs inside it (0 included, with ``stats=True``)."""
    err: Flag | None = None
    """1: the failing op of a partial trace is inside; shown even while closed."""
    gb: int | None = None
    """``compile_report``: graph breaks inside it."""
    cw: str | None = None
    """The collectives it runs, its callees' included, as its closed box says them:
    ``⇄ all_reduce ×2 4.00 KiB``."""
    bw: Flag | None = None
    """1: the backward part of a ``backward=True`` graph; drawn dashed, as in the diagram."""


@dataclass(kw_only=True, slots=True)
class PageMeta:
    """One tensor's description, shared by every output of that shape: ``PageDocument.metas``."""

    shape: list[int]
    """Its sizes."""
    dtype: str
    """``float32``, ``int64``…"""
    device: str
    """``cpu``, ``cuda:0``, ``meta``…"""
    pl: str | None = None
    """A DTensor's placements as the tree words them."""
    x: str
    """The edge label and box subtitle: ``2×10×96``, the dtype where it is not the graph's main one."""
    full: str
    """The tooltip's and details panel's line: ``2×10×96  float32  cpu``."""


@dataclass(kw_only=True, slots=True)
class PageFoldBox:
    """A run of identical sibling calls folded to one ``×N`` box: ``PageDocument.folds``."""

    name: str
    """``layers.0–79`` below its caller's path, as the tree, summary and diagram name it."""
    v: dict[str, int | float]
    """The run's totals by metric key (``f``, ``params``, ``ab``…), as the repeats pass totalled them."""
    w: dict[str, str]
    """``v`` as every output spells it."""


@dataclass(kw_only=True, slots=True)
class PageBreak:
    """One ``torch.compile`` graph break or recompile: ``PageCompile.breaks``."""

    kind: str
    """A short class of the reason: ``data-dependent``, ``print/logging``, ``.item()/.tolist()``…, or ``recompile``."""
    reason: str
    """Its reason, short (``_view.short_reason``)."""
    full: str
    """Its reason, as dynamo gave it."""
    graph: int | None = None
    """The compiled graph the break ends; left out for a recompile."""
    call: int
    """The input set it happened on: 0 for the first, 1 for the next…"""
    src: SourceRef | None = None
    """Where in the model's code."""
    s: int | None = None
    """The module call it happened in: an index into ``scopes``."""
    n: int | None = None
    """The op it resumed at: an index into ``nodes``."""


@dataclass(kw_only=True, slots=True)
class PageCompile:
    """``compile_report``: the compiled graphs and the breaks between them."""

    graphs: int
    """How many graphs torch.compile made."""
    colors: list[str]
    """The colour of each compiled graph, in turn."""
    eager: str
    """The colour of ops that ran eagerly."""
    breakColor: str
    """The colour of a graph break's mark."""
    breaks: list[PageBreak]
    """Every break and recompile, in order."""


@dataclass(kw_only=True, slots=True)
class PageView:
    """The page's first view, from the one set of view options (``_view.page_view``)."""

    hidden: list[str]
    """Node kinds drawn only while the params switch is on (the diagram's rule)."""
    state: list[str]
    """Node kinds that are a module's state: an op's box lists the weights it reads."""
    fold: bool
    """Whether runs start folded."""
    depth: int | None = None
    """How deep calls start open; left out: as deep as fits the window."""
    direction: str
    """Which way values flow: ELK's ``DOWN`` or ``RIGHT``."""
    closed: list[int] = field(default_factory=list)
    """Scope indices that start closed at any depth: standard ``torch.nn`` layers, as the
    diagram boxes them (``_view.standard_leaves``); a click opens them."""
    fill: str | None = None
    """The fill menu's choice the page starts with (``ov:<name>``: an overlay's, ``HtmlOptions.fill``);
    left out: the category colours."""


@dataclass(kw_only=True, slots=True)
class PageCompared:
    """``torchatlas.compare``'s runs, the columns of an op's table in the details panel."""

    runs: list[str]
    """Each run's label, the first run (the one the others are measured against) first."""
    fields: list[str]
    """The table's rows: the names of the cells of ``PageNode.cmp``'s columns."""


@dataclass(kw_only=True, slots=True)
class PageDocument:
    """The whole document: the ``<script type="application/json">`` block of a page."""

    title: str
    """The page's title (the model's, as the tree's first line)."""
    status: str
    """The status line: ``1,234 ops · 32 module calls``, as ``repr(graph)`` says it."""
    view: PageView
    """The first view."""
    folds: dict[str, PageFoldBox]
    """Fold group (``g`` and the first member's scope index) -> the run."""
    overlaySteps: int
    """How many colours the fill menu's scale has."""
    metrics: list[list[str]]
    """The numbers boxes can be coloured by, where the graph has any: ``[key, menu name, unit]``."""
    kinds: list[str]
    """Node kinds, indexed by ``PageNode.k``."""
    categories: list[str]
    """Colour categories, indexed by ``PageNode.c`` and ``PageScope.c``."""
    legend: list[list[str]]
    """The legend's entries: ``[category, words]``, for the categories drawn (a graph of no
    convolution lists no convolution)."""
    scopes: list[PageScope]
    """Every module call."""
    nodes: list[PageNode]
    """Every node, in execution order."""
    files: list[str]
    """Source file names, indexed by a ``SourceRef``'s first item."""
    metas: list[PageMeta]
    """Tensor descriptions, indexed by ``PageNode.o``."""
    names: list[str]
    """Op short names, indexed by ``PageNode.op``."""
    words: list[dict[str, str]]
    """A box's numbers in words (metric key -> words), indexed by ``w``."""
    compile: PageCompile | None = None
    """``compile_report``: its graphs and breaks."""
    ui: dict[str, str] = field(default_factory=dict)
    """The page's words outside its boxes and toolbar (``PAGE_WORDS``: the details panel's rows
    and buttons, the dock's notes), ``{name}`` filled in by the viewer."""
    compared: PageCompared | None = None
    """``torchatlas.compare``: the runs compared, where this graph is the first run's."""


DOCUMENT_TYPES: tuple[type, ...] = (
    PageDocument, PageView, PageFoldBox, PageScope, PageNode, PageMeta, PageCompile, PageBreak, PageCompared,
)
"""Every type the document is made of."""

_KEYS: dict[type, tuple[str, ...]] = {t: tuple(f.name for f in fields(t)) for t in DOCUMENT_TYPES}
_VALUES = {t: attrgetter(*keys) for t, keys in _KEYS.items()}
_HOLDERS = (PageDocument, PageCompile)
"""The types with parts of the document inside them; the others hold plain values only."""


def to_json(value: Any) -> Any:
    """A document, or any part of it, as plain JSON data: fields that are None left out."""
    kind = type(value)
    if kind in _HOLDERS:
        return {key: to_json(item) for key in _KEYS[kind] if (item := getattr(value, key)) is not None}
    if kind in _KEYS:  # the thousands of nodes and scopes: their fields read at once
        return {key: item for key, item in zip(_KEYS[kind], _VALUES[kind](value)) if item is not None}
    if kind is list:
        return [to_json(item) for item in value] if value and type(value[0]) in _KEYS else value
    if kind is dict:
        return {key: to_json(item) for key, item in value.items()}
    return value
