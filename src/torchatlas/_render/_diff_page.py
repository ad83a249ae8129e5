"""The visual diff: one self-contained page for ``torchatlas.diff(a, b).to_html()``.

It draws the merged module-call tree of both graphs (``GraphDiff.to_dict()["calls"]``)
with added, removed and changed calls coloured and a before → after badge on each
changed call's totals; a click on a call shows its facts in both graphs side by side
and every change inside it. "changed only" hides unchanged calls; the search box
matches a call's name in either graph. The page is static HTML with one small inline
script, under a hash-based Content-Security-Policy; every user string goes through
``visible`` and HTML escaping, and the JSON block has ``<``, ``>`` and ``&`` escaped, so
no name can end it or open a comment inside it.
"""

from __future__ import annotations

import html
import json
from typing import Any

from torchatlas._ir import GraphIR
from torchatlas._render._html import HtmlOptions, sha256_source, to_html
from torchatlas._text import DIFF_COUNTS, change_words, fact_words, format_diff_value, visible
from torchatlas._view import DIFF_STATUS

_MARKS = {"same": "", "changed": "~", "added": "+", "removed": "−", "pass-through": ""}
_STATUS = {status: (mark, DIFF_STATUS[status]) for status, mark in _MARKS.items()}
"""Each status's mark in the list, and its words: the page's tooltips' and panel's (``_view.DIFF_STATUS``)."""
_FIELDS = ("label", "class", "input shapes", "output shapes", "parameters", "FLOPs")
_JSON_ESCAPES = {ord("<"): "\\u003c", ord(">"): "\\u003e", ord("&"): "\\u0026"}

_STYLE = """
body{font:13px/1.45 system-ui,sans-serif;margin:0;color:#1f2430;background:#fff;display:flex;height:100vh}
main{flex:1;overflow:auto;padding:12px 16px}
aside{width:38%;max-width:560px;border-left:1px solid #d5dbe5;overflow:auto;padding:12px 16px;background:#f7f9fc}
h1{font-size:16px;margin:0 0 4px}h2{font-size:14px;margin:14px 0 4px}
.counts span{margin-right:14px}.verdict{font-weight:600}
.tools{display:flex;gap:14px;align-items:center;margin:6px 0 10px}.tools input[type=search]{width:18em}
.row{padding:1px 6px;border-radius:4px;cursor:pointer;white-space:pre;font-family:ui-monospace,monospace}
.row:hover,.row.sel{outline:2px solid #4a78c2}.row.hide{display:none}
.added{background:#dcf2d9}.removed{background:#f7dede;text-decoration:line-through}
.changed{background:#fff0b3}.mark{display:inline-block;width:1.2em;font-weight:bold}
.badge{margin-left:10px;padding:0 5px;border-radius:8px;background:#f2d37a;font-size:11px;text-decoration:none;display:inline-block}
table{border-collapse:collapse;width:100%}td,th{border-bottom:1px solid #d5dbe5;padding:3px 6px;text-align:left;
vertical-align:top;overflow-wrap:anywhere;word-break:normal}td:first-child{white-space:nowrap}
tr.diff td{background:#fff0b3}ul.notes{padding-left:1.2em;margin:4px 0}ul.notes li{overflow-wrap:anywhere}
@media (prefers-color-scheme:dark){body{color:#e6e9ef;background:#16191f}aside{background:#1f242c;border-color:#333a44}
.added{background:#244a2a}.removed{background:#5a2e2e}.changed{background:#5a4a12}tr.diff td{background:#5a4a12}
.badge{background:#7a6520}}
"""

_SCRIPT = """
const calls = JSON.parse(document.getElementById('calls').textContent);
const panel = document.getElementById('panel');
const rows = [...document.querySelectorAll('.row')];
const changedOnly = document.getElementById('changed-only');
const search = document.getElementById('search');
function el(tag, text){const e=document.createElement(tag);if(text!==undefined)e.textContent=text;return e;}
function cell(text){return el('td', text ?? '—');}
function show(i){
  rows.forEach(r=>r.classList.toggle('sel', +r.dataset.i === i));
  const c = calls[i]; panel.replaceChildren();
  panel.append(el('h1', c.label + ' — ' + c.status));
  const t = el('table');
  const head = el('tr');
  ['', 'A', 'B'].forEach(x=>head.append(el('th', x)));
  t.append(head);
  for (const f of FIELDS){
    const tr = el('tr');
    if (c.changed.includes(f)) tr.className = 'diff';
    tr.append(cell(f), cell(c.before && c.before[f]), cell(c.after && c.after[f]));
    t.append(tr);
  }
  panel.append(t);
  if (c.notes.length){
    panel.append(el('h2', 'What changed in this call'));
    const ul = el('ul'); ul.className = 'notes';
    c.notes.forEach(n=>ul.append(el('li', n)));
    panel.append(ul);
  }
}
function matches(c, q){
  return !q || [c.label, c.before && c.before.label, c.after && c.after.label].some(x=>x && x.toLowerCase().includes(q));
}
function filter(){
  const q = search.value.trim().toLowerCase();
  rows.forEach(r=>{const c = calls[+r.dataset.i];
    r.classList.toggle('hide', (changedOnly.checked && c.status === 'same') || !matches(c, q));});
}
rows.forEach(r=>r.addEventListener('click',()=>show(+r.dataset.i)));
changedOnly.addEventListener('change', filter);
search.addEventListener('input', filter);
"""


def diff_page(doc: dict[str, Any], title: str = "torchatlas diff") -> str:
    """The page for a diff document (``GraphDiff.to_dict()``)."""
    calls = [_visible_call(c) for c in doc.get("calls", [])]
    counts = {status: sum(c["status"] == status for c in calls) for status in _STATUS}
    rows = []
    for i, c in enumerate(calls):
        mark, meaning = _STATUS[c["status"]]
        badge = _badge(c)
        rows.append(
            f'<div class="row {c["status"]}" data-i="{i}" title="{meaning}">'
            f'{"  " * c["depth"]}<span class="mark">{mark}</span>{html.escape(c["label"])}'
            + (f'<span class="badge">{html.escape(badge)}</span>' if badge else "") + "</div>"
        )
    totals = "".join(
        f"<li>total {html.escape(visible(str(t.get('field', ''))))}: {html.escape(visible(str(t.get('before', ''))))} → "
        f"{html.escape(visible(str(t.get('after', ''))))}</li>"
        for t in doc.get("totals", [])
    )
    script = f"const FIELDS = {json.dumps(list(_FIELDS))};{_SCRIPT}"
    data = json.dumps(calls).translate(_JSON_ESCAPES)
    csp = f"default-src 'none'; script-src {sha256_source(script)}; style-src {sha256_source(_STYLE)}"
    summary = " ".join(
        f'<span class="{status}">{_STATUS[status][0] or "="} {counts[status]} {_STATUS[status][1]}</span>'
        for status in ("added", "removed", "changed", "same")
    )
    verdict = "A and B compute the same (up to naming)" if doc.get("equal") else "A and B differ"
    return (
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
        f'<meta http-equiv="Content-Security-Policy" content="{csp}">\n'
        f"<title>{html.escape(visible(title))}</title>\n<style>{_STYLE}</style></head>\n"
        f"<body><main><h1>{html.escape(visible(title))}</h1>\n"
        f'<p class="verdict">{verdict}</p>\n<p class="counts">{summary}</p>\n'
        f"<ul>{totals}</ul>\n"
        '<div class="tools"><label><input type="checkbox" id="changed-only"> changed only</label>'
        '<input type="search" id="search" placeholder="find a module in A or B" aria-label="Find a module"></div>\n'
        + "\n".join(rows) + "\n</main>\n"
        '<aside id="panel"><p>Click a module call to see it in both graphs.</p></aside>\n'
        f'<script type="application/json" id="calls">{data}</script>\n'
        f"<script>{script}</script></body></html>\n"
    )


_DIFF_ROW = ' class="diff"'
_LIST_STYLE = """
.diff-list{position:fixed;left:12px;bottom:36px;z-index:20;max-width:min(46em,60vw);max-height:40vh;overflow:auto;
font:12px system-ui,sans-serif;background:var(--bg);color:var(--text);border:1px solid var(--cluster-border);
border-radius:6px;padding:4px 8px}
.diff-list>summary{font-weight:600;cursor:pointer}.diff-list .counts span{margin-right:10px}
.diff-list details.call>summary{cursor:pointer;white-space:nowrap;font-family:ui-monospace,monospace;border-radius:4px;padding:0 4px}
.diff-list .added>summary{background:#c8ecc3}.diff-list .removed>summary{background:#f6d2d2}
.diff-list .changed>summary{background:#ffe9a8}.diff-list .mark{display:inline-block;width:1.2em;font-weight:bold}
.diff-list .badge{margin-left:8px;font-size:11px;opacity:.8}
.diff-list table{border-collapse:collapse;margin:2px 0 6px 1.6em}.diff-list td,.diff-list th{padding:1px 6px;text-align:left;
vertical-align:top;overflow-wrap:anywhere;border-bottom:1px solid var(--cluster-border)}.diff-list td:first-child{white-space:nowrap}
.diff-list tr.diff td{background:#ffe9a8}.diff-list ul.notes{margin:0 0 6px 1.6em;padding-left:1em}
:root[data-theme="dark"] .diff-list :is(.added>summary){background:#244a2a}
:root[data-theme="dark"] .diff-list :is(.removed>summary){background:#5a2e2e}
:root[data-theme="dark"] .diff-list :is(.changed>summary,tr.diff td){background:#5a4a12}
"""


def diff_graph_page(graph: GraphIR, doc: dict[str, Any], title: str = "torchatlas diff") -> str:
    """Both graphs as one in the viewer (``GraphDiff.graph``): added boxes green, removed red,
    changed amber with the change as their subtitle; the fill menu's "changes" colours only what
    changed; the calls that differ listed beside it, each opening to both sides' facts."""
    calls = [_visible_call(c) for c in doc.get("calls", [])]
    counts = {status: sum(c["status"] == status for c in calls) for status in _STATUS}
    verdict = "A and B compute the same (up to naming)" if doc.get("equal") else "A and B differ"
    summary = " ".join(
        f'<span class="{status}">{_STATUS[status][0] or "="} {counts[status]} {_STATUS[status][1]}</span>'
        for status in ("added", "removed", "changed", "same")
    )
    rows = []
    for c in calls:
        if c["status"] in ("same", "pass-through"):
            continue
        badge = _badge(c)
        table = "".join(
            f'<tr{_DIFF_ROW if f in c["changed"] else ""}><td>{html.escape(f)}</td>'
            f"<td>{html.escape((c['before'] or {}).get(f, '—'))}</td><td>{html.escape((c['after'] or {}).get(f, '—'))}</td></tr>"
            for f in _FIELDS
        )
        notes = "".join(f"<li>{html.escape(n)}</li>" for n in c["notes"])
        rows.append(
            f'<details class="call {c["status"]}"><summary>{"  " * c["depth"]}<span class="mark">{_STATUS[c["status"]][0]}</span>'
            f'{html.escape(c["label"])}' + (f'<span class="badge">{html.escape(badge)}</span>' if badge else "")
            + f"</summary><table><tr><th></th><th>A</th><th>B</th></tr>{table}</table>"
            + (f'<ul class="notes">{notes}</ul>' if notes else "") + "</details>"
        )
    aside = (
        f'<details class="diff-list"><summary>{verdict}: '
        f'{len(rows)} module calls differ</summary>'
        f'<p class="counts">{summary}</p>' + "".join(rows) + "</details>\n"
    )
    return to_html(graph, HtmlOptions(title=title), beside=(aside, _LIST_STYLE))


def _badge(call: dict[str, Any]) -> str:
    """``params 24.6K → 49.2K`` for a changed call whose totals moved; an added or removed call's size."""
    if call["status"] == "changed":
        parts = []
        for key in DIFF_COUNTS:
            before, after = (call["before"] or {}).get(key), (call["after"] or {}).get(key)
            if before != after:
                parts.append(visible(change_words(key, before, after)))
        return ", ".join(parts)
    if call["status"] in ("added", "removed"):
        facts = call["after"] if call["status"] == "added" else call["before"]
        return visible(fact_words("parameters", (facts or {}).get("parameters")))
    return ""


def _visible_call(call: dict[str, Any]) -> dict[str, Any]:
    """The call with every user string as ``visible`` writes it (controls and bidi escaped)."""

    def facts(side: dict[str, Any] | None) -> dict[str, str] | None:
        return None if side is None else {k: visible(format_diff_value(k, v)) for k, v in side.items()}

    status = call.get("status") if call.get("status") in _STATUS else "same"
    return {
        "depth": int(call.get("depth", 0)),
        "label": visible(str(call.get("label", ""))),
        "status": status,
        "before": facts(call.get("before")),
        "after": facts(call.get("after")),
        "changed": [visible(str(f)) for f in call.get("changed", [])],
        "notes": [visible(str(n)) for n in call.get("notes", [])],
    }
