"""The visual diff: one self-contained page for ``torchatlas.diff(a, b).to_html()``.

It draws the merged module-call tree of both graphs (``GraphDiff.to_dict()["calls"]``)
with added, removed and changed calls coloured; a click on a call shows its facts in
both graphs side by side, the changed ones marked. The page is static HTML with one
small inline script, under a hash-based Content-Security-Policy; every user string
goes through ``visible`` and HTML escaping.
"""

from __future__ import annotations

import html
import json
from typing import Any

from torchatlas._render._html import sha256_source
from torchatlas._text import visible

_STATUS = {
    "same": ("", "unchanged"),
    "changed": ("~", "changed"),
    "added": ("+", "added in B"),
    "removed": ("−", "removed from B"),
}
_FIELDS = ("label", "class", "input shapes", "output shapes", "parameters", "FLOPs")

_STYLE = """
body{font:13px/1.45 system-ui,sans-serif;margin:0;color:#1f2430;background:#fff;display:flex;height:100vh}
main{flex:1;overflow:auto;padding:12px 16px}
aside{width:38%;max-width:520px;border-left:1px solid #d5dbe5;overflow:auto;padding:12px 16px;background:#f7f9fc}
h1{font-size:16px;margin:0 0 4px}
.counts span{margin-right:14px}
.row{padding:1px 6px;border-radius:4px;cursor:pointer;white-space:pre;font-family:ui-monospace,monospace}
.row:hover,.row.sel{outline:2px solid #4a78c2}
.added{background:#dcf2d9}.removed{background:#f7dede;text-decoration:line-through}
.changed{background:#fff0b3}.mark{display:inline-block;width:1.2em;font-weight:bold}
table{border-collapse:collapse;width:100%}td,th{border-bottom:1px solid #d5dbe5;padding:3px 6px;text-align:left;
vertical-align:top;word-break:break-all}tr.diff td{background:#fff0b3}
@media (prefers-color-scheme:dark){body{color:#e6e9ef;background:#16191f}aside{background:#1f242c;border-color:#333a44}
.added{background:#244a2a}.removed{background:#5a2e2e}.changed{background:#5a4a12}tr.diff td{background:#5a4a12}}
"""

_SCRIPT = """
const calls = JSON.parse(document.getElementById('calls').textContent);
const panel = document.getElementById('panel');
function cell(text){const td=document.createElement('td');td.textContent=text??'—';return td;}
function show(i){
  document.querySelectorAll('.row.sel').forEach(r=>r.classList.remove('sel'));
  document.querySelector(`[data-i="${i}"]`).classList.add('sel');
  const c = calls[i]; panel.replaceChildren();
  const h = document.createElement('h1'); h.textContent = c.label + ' — ' + c.status; panel.append(h);
  const t = document.createElement('table');
  const head = document.createElement('tr');
  ['', 'A', 'B'].forEach(x=>{const th=document.createElement('th');th.textContent=x;head.append(th);});
  t.append(head);
  for (const f of FIELDS){
    const tr = document.createElement('tr');
    if (c.changed.includes(f)) tr.className = 'diff';
    tr.append(cell(f), cell(c.before && c.before[f]), cell(c.after && c.after[f]));
    t.append(tr);
  }
  panel.append(t);
}
document.querySelectorAll('.row').forEach(r=>r.addEventListener('click',()=>show(+r.dataset.i)));
"""


def diff_page(doc: dict[str, Any], title: str = "torchatlas diff") -> str:
    """The page for a diff document (``GraphDiff.to_dict()``)."""
    calls = [_visible_call(c) for c in doc.get("calls", [])]
    counts = {status: sum(c["status"] == status for c in calls) for status in _STATUS}
    rows = []
    for i, c in enumerate(calls):
        mark, meaning = _STATUS[c["status"]]
        rows.append(
            f'<div class="row {c["status"]}" data-i="{i}" title="{meaning}">'
            f'{"  " * c["depth"]}<span class="mark">{mark}</span>{html.escape(c["label"])}</div>'
        )
    totals = "".join(
        f"<li>total {html.escape(t['field'])}: {html.escape(visible(t['before']))} → {html.escape(visible(t['after']))}</li>"
        for t in doc.get("totals", [])
    )
    script = f"const FIELDS = {json.dumps(list(_FIELDS))};{_SCRIPT}"
    data = json.dumps(calls).replace("</", "<\\/")
    csp = f"default-src 'none'; script-src {sha256_source(script)}; style-src {sha256_source(_STYLE)}"
    summary = " ".join(
        f'<span class="{status}">{_STATUS[status][0] or "="} {counts[status]} {_STATUS[status][1]}</span>'
        for status in ("added", "removed", "changed", "same")
    )
    return (
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
        f'<meta http-equiv="Content-Security-Policy" content="{csp}">\n'
        f"<title>{html.escape(visible(title))}</title>\n<style>{_STYLE}</style></head>\n"
        f"<body><main><h1>{html.escape(visible(title))}</h1>\n<p class=\"counts\">{summary}</p>\n"
        f"<ul>{totals}</ul>\n" + "\n".join(rows) + "\n</main>\n"
        '<aside id="panel"><p>Click a module call to see it in both graphs.</p></aside>\n'
        f'<script type="application/json" id="calls">{data}</script>\n'
        f"<script>{script}</script></body></html>\n"
    )


def _visible_call(call: dict[str, Any]) -> dict[str, Any]:
    """The call with every user string as ``visible`` writes it (controls and bidi escaped)."""

    def facts(side: dict[str, str] | None) -> dict[str, str] | None:
        return None if side is None else {k: visible(str(v)) for k, v in side.items()}

    status = call.get("status") if call.get("status") in _STATUS else "same"
    return {
        "depth": int(call.get("depth", 0)),
        "label": visible(str(call.get("label", ""))),
        "status": status,
        "before": facts(call.get("before")),
        "after": facts(call.get("after")),
        "changed": [str(f) for f in call.get("changed", [])],
    }
