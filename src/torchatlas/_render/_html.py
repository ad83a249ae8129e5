"""The interactive HTML viewer: one self-contained page per graph.

The page inlines the viewer bundle (``web/viewer.js`` and ``web/viewer.css``,
built from the repository's ``web/`` folder with ``npm ci && npm run build``)
and the graph as a compact JSON document. It needs no server and no network,
so it works opened from ``file://``, mailed around, or inside a notebook iframe.

Every string taken from the graph is shown as ``_text.visible`` writes it (control
and bidi override characters as escapes), and is data: the JSON sits in a
``<script type="application/json">`` block with ``<``, ``>`` and ``&`` escaped
as ``\\u003c``-style sequences, so a module named ``</script>`` cannot end the
block, and the viewer puts every string on screen through ``textContent``.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from torchatlas._ir import NODE_KINDS, GraphIR, Scope, Source, TensorMeta
from torchatlas._ops import CATEGORIES, LEGEND, category, collective_kind
from torchatlas._text import visible
from torchatlas._view import (
    BACKWARD,
    BACKWARD_SCOPE,
    COMPILE_REGIONS,
    EAGER_REGION,
    GRAPH_BREAK,
    PALETTES,
    ViewOptions,
    arguments_text,
    backward_apart,
    call_name,
    collective_text,
    counted_reads,
    decisions,
    dominant_dtype,
    graph_counts,
    leaf_module_category,
    legend_graphs,
    loop_iterations,
    metric_words,
    model_title,
    nonfinite_words,
    op_display,
    page_folds,
    page_view,
    params_text,
    placement_text,
    read_label,
    read_mark,
    shape_words,
    short_reason,
)

BUNDLE_DIR = Path(__file__).parent / "web"

_SCRIPT_ESCAPES = {ord("<"): "\\u003c", ord(">"): "\\u003e", ord("&"): "\\u0026"}


class ViewerBundleMissing(RuntimeError):
    """The JavaScript viewer was not built (a source checkout without ``npm run build``)."""


def viewer_bundle_built() -> bool:
    return (BUNDLE_DIR / "viewer.js").is_file() and (BUNDLE_DIR / "viewer.css").is_file()


def _bundle() -> tuple[str, str]:
    js, css = BUNDLE_DIR / "viewer.js", BUNDLE_DIR / "viewer.css"
    if not js.is_file() or not css.is_file():
        raise ViewerBundleMissing(
            f"the HTML viewer bundle is missing from {BUNDLE_DIR}; build it from the repository root with "
            "`cd web && npm ci && npm run build`"
        )
    script, style = js.read_text(encoding="utf-8"), css.read_text(encoding="utf-8")
    # The bundle is our own build output; these would end or confuse its raw-text element.
    if "</script" in script.lower() or "<!--" in script:
        raise ViewerBundleMissing(f"{js} contains '</script' or '<!--' and cannot be inlined")
    if "</style" in style.lower():
        raise ViewerBundleMissing(f"{css} contains '</style' and cannot be inlined")
    return script, style


class _Interner:
    """Repeated strings (files, shapes, op names) are stored once and referenced by index."""

    def __init__(self) -> None:
        self.items: list[Any] = []
        self._index: dict[str, int] = {}

    def __call__(self, value: Any) -> int:
        key = json.dumps(value, sort_keys=True)
        if key not in self._index:
            self._index[key] = len(self.items)
            self.items.append(value)
        return self._index[key]


def _source(src: Source | None, files: _Interner) -> list[Any] | None:
    if src is None:
        return None
    code = None if src.code is None else "\n".join(visible(line) for line in src.code.split("\n"))
    return [files(visible(src.file)), src.line, code]


def _fold_data(ir: GraphIR, scope_index: dict[str, int]) -> tuple[dict[str, list[Any]], dict[str, Any]]:
    """Scope id -> [group, index, count] for the runs every output folds (the one fold rule),
    and group -> its name, totals (``v``) and their words (``w``)."""
    rep: dict[str, list[Any]] = {}
    folds: dict[str, Any] = {}
    for first, fold in page_folds(ir).items():
        group = f"g{scope_index[first]}"
        for i, sid in enumerate(fold.members):
            rep[sid] = [group, i, len(fold.members)]
        folds[group] = {"name": visible(fold.name), "v": fold.totals, "w": fold.words}
    return rep, folds


def _number(value: Any) -> int | float | None:
    """A count the page can show: finite (JSON has no NaN or Infinity), not a bool."""
    ok = isinstance(value, int) and not isinstance(value, bool) or isinstance(value, float) and math.isfinite(value)
    return value if ok else None


# The numbers a box can be coloured by: page-data key, menu name, unit (how the scale writes it).
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
)


def _meta(m: TensorMeta) -> dict[str, Any]:
    """A value's shape, dtype and device; a DTensor's placements as the tree words them (``pl``)."""
    d: dict[str, Any] = {"shape": list(m.shape), "dtype": m.dtype, "device": m.device}
    if m.placements:
        d["pl"] = placement_text(m)
    return d


_STATS = ("min", "max", "mean", "std", "absmax", "nan", "inf", "zeros", "sampled")


def _stats_words(stats: list[Any]) -> list[str | None]:
    """``min -0.79  max 1.39  mean -0.0406  std 0.653  NaN 0  Inf 8  zeros 12%`` per output."""

    def number(v: Any) -> str:
        return str(v) if isinstance(v, int) else f"{v:.3g}"

    words: list[str | None] = []
    for s in stats:
        if not isinstance(s, dict):
            words.append(None)
            continue
        parts = [f"{name} {number(s[key])}" for key, name in (("min", "min"), ("max", "max"), ("mean", "mean"), ("std", "std"), ("nan", "NaN"), ("inf", "Inf")) if key in s]
        if "zeros" in s:
            zeros = 100 * s["zeros"]
            parts.append(f"zeros {zeros:.{2 if 0 < zeros < 1 else 0}f}%")
        if "sampled" in s:  # stats="sample": the numbers are a strided sample's
            parts.append(f"of a sample of {s['sampled']}")
        words.append("  ".join(parts))
    return words


def _stats(stats: Any) -> list[Any] | None:
    """``trace(stats=True)``: each output's numbers at 6 digits (one that is not a finite number left out),
    or null for an output without stats."""
    if not isinstance(stats, list):
        return None
    return [
        {k: float(f"{v:.6g}") if isinstance(v, float) else v for k in _STATS if _number(v := s.get(k)) is not None}
        if isinstance(s, dict) else None
        for s in stats
    ]


def _run_time_fields(meta: dict[str, Any], bytes_key: str) -> dict[str, Any]:
    """Page fields shared by ops and module calls: activation bytes and profiled times."""
    d: dict[str, Any] = {}
    for key, field in ((bytes_key, "ab"), ("time_us", "tu"), ("cuda_time_us", "ctu")):
        if _number(meta.get(key)) is not None:
            d[field] = meta[key]
    return d


def viewer_document(ir: GraphIR, title: str | None = None) -> dict[str, Any]:
    """The compact JSON document the viewer reads: indices instead of ids, shared strings interned.

    A ``backward=True`` graph's backward ops sit apart, in a ``backward`` call after the
    forward ones (``backward_apart``), as in the diagram."""
    counts = graph_counts(ir)
    ir = backward_apart(ir)
    scopes = list(ir.scopes)
    roots = [s for s in scopes if s.parent is None]
    if len(roots) != 1 or scopes[0].parent is not None:
        # The viewer draws one root; graphs with several (or none) get a synthetic one.
        scopes = [Scope(id="__root__", parent=None, path="", cls=str(ir.meta.get("model", "graph")), call=0)] + [
            s if s.parent is not None else Scope(**{**_scope_fields(s), "parent": "__root__"}) for s in scopes
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

    dominant = dominant_dtype(ir)
    model = model_title(ir)

    def meta_entry(m: TensorMeta) -> int:
        words, entry = shape_words(m, dominant), _meta(m)
        placed = f"  [{entry['pl']}]" if "pl" in entry else ""  # a DTensor: how the ranks hold it
        return metas({**entry, "x": words.shape, "full": visible(words.full) + placed})

    out_nodes = []
    for n in ir.nodes:
        d: dict[str, Any] = {"k": NODE_KINDS.index(n.kind), "s": scope_index[n.scope], "c": categories.index(category(n.target, n.kind))}
        if n.inputs:
            d["i"] = [node_index[r.node] for r in n.inputs]
            if any(r.slot for r in n.inputs):
                d["sl"] = [r.slot for r in n.inputs]
        if n.outputs:
            d["o"] = [meta_entry(m) for m in n.outputs]
        if n.target is not None:
            d["t"] = visible(n.target)
            d["op"] = names(visible(op_display(n)))
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
            d["dm"] = visible(read_mark(*counted[-1]))
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
            if _number(facts.get("bytes")) is not None:
                d["cb"] = facts["bytes"]
        if _number(n.meta.get("flops")) is not None:
            d["f"] = n.meta["flops"]
        d.update(_run_time_fields(n.meta, "bytes") if n.kind == "op" else {})
        if n.kind == "op" and (n.args or n.kwargs):
            d["a"] = arguments_text(n)
        if (stats := _stats(n.meta.get("stats"))) is not None:
            d["st"], d["stw"] = stats, _stats_words(stats)
        nonfinite = n.meta.get("nonfinite")
        nf = [int(_number(nonfinite.get(k)) or 0) for k in ("nan", "inf")] if isinstance(nonfinite, dict) else []
        if any(nf):  # NaN and Inf counts of its outputs (trace(stats=True))
            d["nf"], d["nfw"] = nf, nonfinite_words(*nf)
        if words := metric_words({k: d[k] for k in ("f", "ab", "tu", "ctu") if k in d}):
            d["w"] = words_of(words)  # the 80 layers of a stack share their words
        if "error" in n.meta:  # the op a partial trace stopped at
            d["err"] = visible(str(n.meta["error"]))
        if "compile_region" in n.meta:  # compile_report: the compiled graph it ran in, -1 eager
            d["cr"] = -1 if n.meta["compile_region"] is None else n.meta["compile_region"]
        d.update(_diff_fields(n.meta))
        out_nodes.append(d)

    # A closed module that holds no other module is coloured by its ops, as in the diagrams.
    parents = {s.parent for s in scopes}
    op_categories: dict[str, set[str]] = {}
    for n in ir.nodes:
        if n.kind == "op" and n.scope not in parents:
            op_categories.setdefault(n.scope, set()).add(category(n.target, n.kind))
    # Module calls holding the failing op show it even while collapsed.
    failed_scopes = {s.id for s in ir.scopes if s.meta.get("failed")}  # the failures pass
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
            d["c"] = categories.index(leaf_module_category(op_categories[s.id]))
        if s.id in repeats:
            d["rep"] = repeats[s.id]
        if _number(s.meta.get("params")) is not None:
            d["params"] = s.meta["params"]
        if _number(s.meta.get("flops")) is not None:
            d["f"] = s.meta["flops"]
        if _number(s.meta.get("comm_bytes")):
            d["cb"] = s.meta["comm_bytes"]
        d.update(_run_time_fields(s.meta, "activation_bytes"))
        if (stats := _stats(s.meta.get("output_stats"))) is not None and any(stats):
            d["st"], d["stw"] = stats, _stats_words(stats)  # of the values the call returned, in `out` order
        if _number(s.meta.get("nonfinite_ops")) is not None:  # ops with NaN/Inf outputs inside, 0 included
            d["nf"] = s.meta["nonfinite_ops"]
        if s.id in failed_scopes:
            d["err"] = 1
        if s.meta.get("graph_breaks"):
            d["gb"] = s.meta["graph_breaks"]
        if s.id.startswith(BACKWARD_SCOPE):  # the backward part: drawn dashed, as in the diagram
            d["bw"] = 1
        if words := metric_words({k: d[k] for k in ("params", "f", "ab", "tu", "ctu", "nf") if k in d}):
            d["w"] = words_of(words)  # the 80 layers of a stack share their words
        if "params" in d:
            d["pw"] = params_text(d["params"])
        d.update(_diff_fields(s.meta))
        out_scopes.append(d)

    return {
        "title": visible(title or model_title(ir)),
        "status": counts.text,
        "folds": folds,
        "overlaySteps": len(PALETTES["light"].overlay),
        "metrics": [list(m) for m in METRICS if any(m[0] in d for d in (*out_scopes, *out_nodes))],
        "kinds": list(NODE_KINDS),
        "categories": categories,
        "legend": [list(item) for item in LEGEND],
        "scopes": out_scopes,
        "nodes": out_nodes,
        "files": files.items,
        "metas": metas.items,
        "names": names.items,
        "words": words_of.items,
        **_compile_data(ir, node_index, scope_index, files),
    }


def _diff_fields(meta: dict[str, Any]) -> dict[str, Any]:
    """A diff's merged graph (``GraphDiff.graph``): which side has the box, its badge, every change;
    ``dch`` (1 where anything differs) is what the fill menu's "changes" colours."""
    if "diff" not in meta:
        return {}
    d: dict[str, Any] = {"df": visible(str(meta["diff"]))}
    if meta.get("diff_note"):
        d["dfn"] = visible(str(meta["diff_note"]))
    if meta.get("diff_changes"):
        d["dfc"] = [visible(str(c)) for c in meta["diff_changes"]]
    if isinstance(meta.get("diff_a_path"), str):  # a renamed module's name in A: search finds it by either
        d["dfa"] = visible(meta["diff_a_path"])
    if meta["diff"] in ("changed", "added", "removed"):
        d["dch"] = 1
    return d


def _compile_data(ir: GraphIR, node_index: dict[str, int], scope_index: dict[str, int], files: _Interner) -> dict[str, Any]:
    """``compile_report``: the compiled graphs' colours and every break, with the op it resumed at."""
    if "graph_breaks" not in ir.meta:
        return {}
    breaks = []
    for b in ir.graph_breaks:
        d: dict[str, Any] = {"kind": b.kind, "reason": short_reason(b), "full": b.reason, "graph": b.graph, "call": b.call}
        if b.source is not None:
            d["src"] = _source(b.source, files)
        if b.scope in scope_index:
            d["s"] = scope_index[b.scope]
        if b.node in node_index:
            d["n"] = node_index[b.node]
        breaks.append(d)
    return {"compile": {
        "graphs": ir.meta.get("compile_graphs", 0), "colors": list(COMPILE_REGIONS), "eager": EAGER_REGION,
        "break": GRAPH_BREAK, "breaks": breaks,
    }}


def _scope_fields(s: Scope) -> dict[str, Any]:
    return {f: getattr(s, f) for f in ("id", "parent", "path", "cls", "call", "source", "outputs", "meta")}


def palette_css() -> str:
    """CSS variables and category rules for both themes, from the shared palettes."""
    rules = []
    for theme, p in PALETTES.items():
        decls = {
            "--bg": p.background,
            "--text": p.text,
            "--muted": p.muted,
            "--edge": p.edge,
            "--cluster-border": p.cluster_border,
            "--badge": p.badge,
            "--backward": BACKWARD,
            **{f"--cluster-{i}": p.cluster_fills[i % len(p.cluster_fills)] for i in range(4)},
            **{f"--overlay-{i}": colour for i, colour in enumerate(p.overlay)},
            **{f"--fill-{c}": p.fill[c] for c in CATEGORIES},
            **{f"--border-{c}": p.border[c] for c in CATEGORIES},
        }
        body = "".join(f"{k}:{v};" for k, v in decls.items())
        rules.append(f':root[data-theme="{theme}"]{{{body}}}')
    rules.extend(f".scale .overlay-{i}{{background:var(--overlay-{i})}}" for i in range(len(PALETTES["light"].overlay)))
    for c in CATEGORIES:
        rules.append(f'.unit[data-category="{c}"] :is(.box,.stack){{fill:var(--fill-{c});stroke:var(--border-{c})}}')
        rules.append(f'.legend-item[data-category="{c}"] .swatch{{background:var(--fill-{c});border-color:var(--border-{c})}}')
        rules.append(f'.details section.head[data-category="{c}"] h3{{border-left-color:var(--border-{c})}}')
    return "\n".join(rules)


def script_json(value: Any) -> str:
    """JSON that is safe inside a ``<script>`` element: no ``</script>``, no ``<!--``.

    ASCII-only, so a lone surrogate from a hostile name stays a ``\\ud800`` escape
    instead of making the page unencodable.
    """
    return json.dumps(value, ensure_ascii=True, allow_nan=False, separators=(",", ":")).translate(_SCRIPT_ESCAPES)


def _plain_text(text: str) -> str:
    """Text for an HTML element: controls, bidi marks and lone surrogates as visible escapes."""
    return html.escape(visible(text))


@dataclass(frozen=True)
class HtmlOptions(ViewOptions):
    """What the web page shows first; every field is also a keyword of ``Graph.to_html``.

    The view options set the page's first view (``_view.page_view``): the node kinds hidden
    until the params switch is on, folds, direction, and ``depth``, the nesting open at first
    (None: as deep as fits the window; the page opens any call on a click)."""

    UNHONOURED: ClassVar[dict[str, str]] = {
        "expand_leaf_modules": "the page opens a leaf module's ops on a click, as any call's",
    }

    title: str | None = None
    """The page's title; default: the model's class name."""


def sha256_source(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii") + "'"


def content_security_policy(script: str, style: str) -> str:
    """The page's policy: only its own script and stylesheet (by hash) run, nothing is fetched.

    Layout workers are started from a ``blob:`` URL holding the page's own script,
    and the PNG export draws the SVG export from a ``blob:`` URL.
    """
    return (
        f"default-src 'none'; script-src {sha256_source(script)}; style-src {sha256_source(style)}; "
        "worker-src blob:; img-src blob:; base-uri 'none'; form-action 'none'"
    )


def to_html(ir: GraphIR, options: HtmlOptions | None = None, beside: tuple[str, str] = ("", "")) -> str:
    """A self-contained interactive page for the analysed ``ir`` (works offline, from ``file://``).

    ``beside``: static HTML, and its stylesheet, another page puts next to the graph (the
    diff's list of calls); it may hold no script."""
    bundle, css = _bundle()
    options = options or HtmlOptions()
    doc = {**viewer_document(ir, options.title), "view": page_view(options)}
    script, style = f"\n{bundle}\n", f"\n{palette_css()}\n{_breaks_css()}\n{css}\n{beside[1]}\n"
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en" data-theme="light">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{content_security_policy(script, style)}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '<meta name="generator" content="torchatlas">\n'
        f"<title>{_plain_text(doc['title'])} · torchatlas</title>\n"
        f"<style>{style}</style>\n</head>\n<body>\n"
        '<div id="atlas"><noscript>This graph viewer needs JavaScript.</noscript></div>\n'
        f"{_breaks_legend(ir)}{beside[0]}"
        f'<script type="application/json" id="atlas-data">{script_json(doc)}</script>\n'
        f"<script>{script}</script>\n</body>\n</html>\n"
    )


def _breaks_css() -> str:
    """The stylesheet of the breaks legend (in the page's hashed stylesheet: the CSP
    refuses inline ``style`` attributes)."""
    rules = [
        ".compile-breaks{position:fixed;left:12px;top:56px;z-index:20;max-width:46em;max-height:40vh;overflow:auto;"
        "font:12px system-ui,sans-serif;background:var(--bg);color:var(--text);"
        "border:1px solid var(--cluster-border);border-radius:6px;padding:4px 8px}",
        f".compile-breaks summary{{color:{GRAPH_BREAK}}}",
        ".compile-breaks .graphs{margin:4px 0}.compile-breaks ol{margin:0;padding-left:1.4em}",
        ".compile-breaks .graph{border:2px solid;border-radius:3px;padding:0 4px;margin-right:4px}",
    ]
    rules += [f".compile-breaks .g{k}{{border-color:{c}}}" for k, c in enumerate(COMPILE_REGIONS)]
    return "\n".join(rules)


def _breaks_legend(ir: GraphIR) -> str:
    """``compile_report``: the compiled graphs' colours and the breaks, as a small static list."""
    if "graph_breaks" not in ir.meta:
        return ""
    graphs = int(ir.meta.get("compile_graphs") or 0)
    shown, more = legend_graphs(graphs)
    swatches = "".join(f'<span class="graph g{g}">graph {g}</span>' for g, _ in shown) + (f"… {more:,} more" if more else "")
    items = "".join(
        f"<li><b>{_plain_text(b.kind)}</b> {_plain_text(short_reason(b))}"
        + (f" <code>{_plain_text(Path(b.source.file).name)}:{b.source.line}</code>" if b.source else "")
        + "</li>"
        for b in ir.graph_breaks
    )
    breaks = sum(1 for b in ir.graph_breaks if b.kind != "recompile")
    return (
        '<details class="compile-breaks"><summary>'
        f"✂ torch.compile: {graphs} graph(s), {breaks} graph break(s)</summary>"
        f'<div class="graphs">{swatches}</div><ol>{items}</ol></details>\n'
    )


def notebook_html(ir: GraphIR, height: int = 640) -> str:
    """An ``<iframe srcdoc>`` holding the page, for Jupyter's ``_repr_html_``.

    An iframe keeps the viewer's styles and scripts away from the notebook's own.
    """
    page = to_html(ir)
    return (
        f'<iframe srcdoc="{html.escape(page, quote=True)}" '
        f'style="width:100%;height:{int(height)}px;border:1px solid #ddd;border-radius:6px" '
        'sandbox="allow-scripts allow-downloads" allow="clipboard-write" loading="lazy"></iframe>'
    )
