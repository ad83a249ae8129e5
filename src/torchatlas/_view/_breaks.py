"""Graph breaks as renderers show them: a short reason, and the item of a module call's
listing each break sits before (graphs from ``compile_report``)."""

from __future__ import annotations

import re
from collections import Counter

from torchatlas._ir import GraphBreak, GraphIR
from torchatlas._text import visible

from ._labels import short_source

_REASON_CHARS = 110
_STATEMENT = re.compile(r"(if|elif|while|assert)\b")
_CALLED = re.compile(r"`(?P<name>[^`]{1,80})`|(?:function|method|builtin|operator|call to) '?(?P<word>[\w.]{1,80})")


def dynamo_words(brk: GraphBreak, limit: int = _REASON_CHARS) -> str:
    """Dynamo's explanation line where it gives one (its first line is only a heading), cut
    at a word boundary to ``limit`` characters."""
    lines = [line.strip() for line in brk.reason.splitlines() if line.strip()]
    explained = next((line.removeprefix("Explanation:").strip() for line in lines if line.startswith("Explanation:")), None)
    text = explained or (lines[0] if lines else brk.kind)
    if len(text) > limit:
        cut = text[: limit - 1]
        text = (cut.rsplit(" ", 1)[0] if " " in cut else cut).rstrip(" ,;:") + "…"
    return visible(text)


def plain_reason(brk: GraphBreak) -> str:
    """Why the graph broke, in a user's words: ``branch on a tensor value (if at m.py:12)``,
    ``print() in forward``, ``.item() leaves the graph``, ``unsupported call to getrefcount``."""
    code = brk.source.code if brk.source is not None else ""
    where = short_source(brk.source) if brk.source is not None else ""
    if brk.kind == "data-dependent":
        statement = _STATEMENT.match(code)
        what = statement.group(1).replace("elif", "if") if statement else ""
        at = f" ({what} at {where})" if what and where else (f" (at {where})" if where else "")
        return visible(f"branch on a tensor value{at}")
    if brk.kind == "print/logging":
        return "print() in forward" if "print" in code or "`print`" in brk.reason else "logging call in forward"
    if brk.kind == ".item()/.tolist()":
        return ".tolist() leaves the graph" if "tolist" in code and "item" not in code else ".item() leaves the graph"
    if brk.kind == "dynamic shape guard":
        return "a size that depends on tensor values"
    if brk.kind == "recompile":
        return "compiled again: a guard failed"
    explained = next((line for line in brk.reason.splitlines() if "Explanation:" in line), brk.reason)
    called = _CALLED.search(explained)
    name = (called.group("name") or called.group("word")).rstrip(".") if called else ""
    return visible(f"unsupported call to {name}" if name else "unsupported call")


def short_reason(brk: GraphBreak) -> str:
    """The plain reason first, then dynamo's own words: ``print() in forward — Dynamo does not…``."""
    return f"{plain_reason(brk)} — {dynamo_words(brk)}"


def break_label(brk: GraphBreak) -> str:
    """``✂ graph break: <plain reason> — <dynamo's words>  @ file.py:12``."""
    where = f"  @ {short_source(brk.source)}" if brk.source else ""
    return f"✂ graph break: {short_reason(brk)}{where}"


def break_anchors(ir: GraphIR) -> dict[str, list[GraphBreak]]:
    """Item id (an op, or a module call) -> the breaks just before it, in the listing of the
    call the break happened in: the op execution went on with, or the call that holds it."""
    anchors: dict[str, list[GraphBreak]] = {}
    for brk in ir.graph_breaks:
        if brk.kind == "recompile" or brk.node is None:
            continue
        node = ir.node(brk.node)
        chain = ir.ancestry(node.scope)
        item = node.id
        if brk.scope in chain and brk.scope != node.scope:
            item = chain[chain.index(brk.scope) + 1]
        anchors.setdefault(item, []).append(brk)
    return anchors


def kind_counts(ir: GraphIR) -> list[tuple[str, int]]:
    """Breaks (and recompiles) by kind, most frequent first."""
    return Counter(b.kind for b in ir.graph_breaks).most_common()
