"""Graph breaks as renderers show them: a short reason, and the item of a module call's
listing each break sits before (graphs from ``compile_report``)."""

from __future__ import annotations

from collections import Counter

from torchatlas._ir import GraphBreak, GraphIR
from torchatlas._text import visible

_REASON_CHARS = 110


def short_reason(brk: GraphBreak) -> str:
    """Dynamo's explanation line where it gives one (its first line is only a heading), cut short."""
    lines = [line.strip() for line in brk.reason.splitlines() if line.strip()]
    explained = next((line.removeprefix("Explanation:").strip() for line in lines if line.startswith("Explanation:")), None)
    text = explained or (lines[0] if lines else brk.kind)
    return visible(text if len(text) <= _REASON_CHARS else text[: _REASON_CHARS - 1] + "…")


def break_label(brk: GraphBreak) -> str:
    """``✂ graph break: <reason>  @ file.py:12``."""
    where = f"  @ {brk.source.file.replace(chr(92), '/').rsplit('/', 1)[-1]}:{brk.source.line}" if brk.source else ""
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
