"""The interactive HTML viewer: one self-contained page per graph.

The page inlines the viewer bundle (``web/viewer.js`` and ``web/viewer.css``,
built from the repository's ``web/`` folder with ``npm ci && npm run build``)
and the graph as a compact JSON document. It needs no server and no network,
so it works opened from ``file://``, mailed around, or inside a notebook iframe.

Everything taken from the graph is data: the JSON sits in a
``<script type="application/json">`` block with ``<``, ``>`` and ``&`` escaped
as ``\\u003c``-style sequences, so a module named ``</script>`` cannot end the
block, and the viewer puts every string on screen through ``textContent``.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchatlas._ir import NODE_KINDS, GraphIR, Scope, Source
from torchatlas._ops import CATEGORIES, LEGEND, category, op_name
from torchatlas._render._labels import model_title
from torchatlas._render._palette import PALETTES
from torchatlas._text import visible

BUNDLE_DIR = Path(__file__).parent / "web"

_SCRIPT_ESCAPES = {ord("<"): "\\u003c", ord(">"): "\\u003e", ord("&"): "\\u0026"}


class ViewerBundleMissing(RuntimeError):
    """The JavaScript viewer was not built (a source checkout without ``npm run build``)."""


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
    return None if src is None else [files(src.file), src.line, src.code]


def _valid_repeats(ir: GraphIR) -> dict[str, list[Any]]:
    """Scope id -> [group, index, count] for fold groups whose members are siblings."""
    members: dict[str, list[Scope]] = {}
    for s in ir.scopes:
        rep = s.meta.get("repeat")
        if isinstance(rep, dict) and "group" in rep:
            members.setdefault(str(rep["group"]), []).append(s)
    out: dict[str, list[Any]] = {}
    for group, scopes in members.items():
        if len(scopes) > 1 and len({s.parent for s in scopes}) == 1:
            for i, s in enumerate(scopes):
                out[s.id] = [group, i, len(scopes)]
    return out


def _number(value: Any) -> int | float | None:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def viewer_document(ir: GraphIR, title: str | None = None) -> dict[str, Any]:
    """The compact JSON document the viewer reads: indices instead of ids, shared strings interned."""
    scopes = list(ir.scopes)
    roots = [s for s in scopes if s.parent is None]
    if len(roots) != 1 or scopes[0].parent is not None:
        # The viewer draws one root; graphs with several (or none) get a synthetic one.
        scopes = [Scope(id="__root__", parent=None, path="", cls=str(ir.meta.get("model", "graph")), call=0)] + [
            s if s.parent is not None else Scope(**{**_scope_fields(s), "parent": "__root__"}) for s in scopes
        ]
    scope_index = {s.id: i for i, s in enumerate(scopes)}
    node_index = {n.id: i for i, n in enumerate(ir.nodes)}
    files, metas, names = _Interner(), _Interner(), _Interner()
    categories = list(CATEGORIES)
    repeats = _valid_repeats(ir)

    out_nodes = []
    for n in ir.nodes:
        d: dict[str, Any] = {"k": NODE_KINDS.index(n.kind), "s": scope_index[n.scope], "c": categories.index(category(n.target, n.kind))}
        if n.inputs:
            d["i"] = [node_index[r.node] for r in n.inputs]
            if any(r.slot for r in n.inputs):
                d["sl"] = [r.slot for r in n.inputs]
        if n.outputs:
            d["o"] = [metas({"shape": list(m.shape), "dtype": m.dtype, "device": m.device}) for m in n.outputs]
        if n.target is not None:
            d["t"] = n.target
            d["op"] = names(op_name(n.target))
        if n.path is not None:
            d["path"] = n.path
        if n.name is not None:
            d["nm"] = n.name
        if n.inplace:
            d["ip"] = 1
        if n.source is not None:
            d["src"] = _source(n.source, files)
        if _number(n.meta.get("flops")) is not None:
            d["f"] = n.meta["flops"]
        if "error" in n.meta:  # the op a partial trace stopped at
            d["err"] = str(n.meta["error"])
        out_nodes.append(d)

    # Module calls holding the failing op show it even while collapsed.
    failed_scopes = {sid for n in ir.nodes if "error" in n.meta for sid in ir.ancestry(n.scope)}
    out_scopes = []
    for s in scopes:
        d = {"p": -1 if s.parent is None else scope_index[s.parent], "path": s.path, "cls": s.cls, "call": s.call}
        if s.source is not None:
            d["src"] = _source(s.source, files)
        if s.outputs:
            d["out"] = [node_index[r.node] for r in s.outputs]
            if any(r.slot for r in s.outputs):
                d["osl"] = [r.slot for r in s.outputs]
        if s.id in repeats:
            d["rep"] = repeats[s.id]
        if _number(s.meta.get("params")) is not None:
            d["params"] = s.meta["params"]
        if _number(s.meta.get("flops")) is not None:
            d["f"] = s.meta["flops"]
        if s.id in failed_scopes:
            d["err"] = 1
        out_scopes.append(d)

    return {
        "title": title or model_title(ir),
        "kinds": list(NODE_KINDS),
        "categories": categories,
        "legend": [list(item) for item in LEGEND],
        "scopes": out_scopes,
        "nodes": out_nodes,
        "files": files.items,
        "metas": metas.items,
        "names": names.items,
    }


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
            **{f"--cluster-{i}": p.cluster_fills[i % len(p.cluster_fills)] for i in range(4)},
            **{f"--fill-{c}": p.fill[c] for c in CATEGORIES},
            **{f"--border-{c}": p.border[c] for c in CATEGORIES},
        }
        body = "".join(f"{k}:{v};" for k, v in decls.items())
        rules.append(f':root[data-theme="{theme}"]{{{body}}}')
    for c in CATEGORIES:
        rules.append(f'.unit[data-category="{c}"] .box{{fill:var(--fill-{c});stroke:var(--border-{c})}}')
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
class HtmlOptions:
    """What the web page shows; every field is also a keyword of ``Graph.to_html``."""

    title: str | None = None
    """The page's title; default: the model's class name."""


def to_html(ir: GraphIR, options: HtmlOptions | None = None) -> str:
    """A self-contained interactive page for the analysed ``ir`` (works offline, from ``file://``)."""
    script, style = _bundle()
    doc = viewer_document(ir, (options or HtmlOptions()).title)
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en" data-theme="light">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '<meta name="generator" content="torchatlas">\n'
        f"<title>{_plain_text(doc['title'])} · torchatlas</title>\n"
        f"<style>\n{palette_css()}\n{style}\n</style>\n</head>\n<body>\n"
        '<div id="atlas"><noscript>This graph viewer needs JavaScript.</noscript></div>\n'
        f'<script type="application/json" id="atlas-data">{script_json(doc)}</script>\n'
        f"<script>\n{script}\n</script>\n</body>\n</html>\n"
    )


def notebook_html(ir: GraphIR, height: int = 640) -> str:
    """An ``<iframe srcdoc>`` holding the page, for Jupyter's ``_repr_html_``.

    An iframe keeps the viewer's styles and scripts away from the notebook's own.
    """
    page = to_html(ir)
    return (
        f'<iframe srcdoc="{html.escape(page, quote=True)}" '
        f'style="width:100%;height:{int(height)}px;border:1px solid #ddd;border-radius:6px" '
        'sandbox="allow-scripts allow-downloads" loading="lazy"></iframe>'
    )
