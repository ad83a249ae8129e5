"""The interactive HTML viewer: one self-contained page per graph.

The page inlines the viewer bundle (``web/viewer.js`` and ``web/viewer.css``,
built from the repository's ``web/`` folder with ``npm ci && npm run build``)
and the graph as the page document the presentation layer decides
(``_view.page_document``: typed dataclasses whose fields are the JSON keys, each
documented in ``_view/_document.py``); this module only writes the shell around it. It needs no server and no network,
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchatlas._ir import GraphIR
from torchatlas._ops import CATEGORIES
from torchatlas._text import visible
from torchatlas._view import (
    BACKWARD,
    COMPILE_REGIONS,
    GRAPH_BREAK,
    PALETTES,
    ViewOptions,
    legend_graphs,
    page_document,
    short_reason,
    to_json,
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


def viewer_document(ir: GraphIR, title: str | None = None, options: ViewOptions | None = None) -> dict[str, Any]:
    """The JSON data of the page document (``_view.page_document``) the viewer reads."""
    return to_json(page_document(ir, title, options))


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
    until the params switch is on, folds, direction, ``depth``, the nesting open at first
    (None: as deep as fits the window; the page opens any call on a click), and whether
    standard ``torch.nn`` layers start open (``expand_leaf_modules``), as in the diagram."""

    title: str | None = None
    """The page's title; default: the model's class name."""
    fill: str | None = None
    """A number overlay (``graph.overlay``; compare's ``error``) the boxes start filled by; None: by category."""


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


def to_html(
    ir: GraphIR, options: HtmlOptions | None = None, beside: tuple[str, str] = ("", ""),
    ranks: tuple[int, list[GraphIR]] | None = None,
) -> str:
    """A self-contained interactive page for the analysed ``ir`` (works offline, from ``file://``).

    ``beside``: static HTML, and its stylesheet, another page puts next to the graph (the
    diff's list of calls); it may hold no script. ``ranks``: (the rank ``ir`` is, every rank's
    graph): the page's rank picker shows each rank's document in turn."""
    bundle, css = _bundle()
    options = options or HtmlOptions()
    doc = viewer_document(ir, options.title, options)
    picker = ""
    if ranks is not None:
        shown, graphs = ranks
        docs = [doc if k == shown else viewer_document(g, options.title, options) for k, g in enumerate(graphs)]
        for k, d in enumerate(docs):
            d["title"] = f"{d['title']} · rank {k}"
        picker = f'<script type="application/json" id="atlas-ranks">{script_json({"shown": shown, "docs": docs})}</script>\n'
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
        f'<script type="application/json" id="atlas-data">{script_json(doc)}</script>\n{picker}'
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


def notebook_html(ir: GraphIR, height: int = 640, options: HtmlOptions | None = None) -> str:
    """An ``<iframe srcdoc>`` holding the page, for Jupyter's ``_repr_html_``.

    An iframe keeps the viewer's styles and scripts away from the notebook's own.
    """
    page = to_html(ir, options)
    return (
        f'<iframe srcdoc="{html.escape(page, quote=True)}" '
        f'style="width:100%;height:{int(height)}px;border:1px solid #ddd;border-radius:6px" '
        'sandbox="allow-scripts allow-downloads" allow="clipboard-write" loading="lazy"></iframe>'
    )


def ranks_page(graphs: list[GraphIR], shown: int, options: HtmlOptions | None = None) -> str:
    """Every rank's graph in one page: rank ``shown`` first, the others behind the rank picker."""
    return to_html(graphs[shown], options, ranks=(shown, graphs))
