"""The words on every box, built once: a ``Words`` per op, call, fold and stand-in, and a label
per edge, which the diagram, the page, the tree and Model Explorer lay out and never spell
themselves. Each quantity has one speller here (``params_words``, ``nonfinite_words``,
``far_name``…), so a fact reads the same in every output.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from torchatlas._ir import GraphIR, Node, Ref, Scope, TensorMeta
from torchatlas._text import format_compact, format_duration
from torchatlas._view._labels import (
    collective_text,
    counted_reads,
    decisions,
    fold_name,
    input_title,
    loop_note,
    op_display,
    read_mark,
    relative_name,
    scope_name,
    shape_list,
    shape_text,
    value_source_name,
)

MARK_KINDS = ("failed", "nonfinite", "unused", "in-place", "size only", "decision", "backward", "collective")
"""What a box can be marked as, in the order the marks win: the first is the box's subtitle."""


@dataclass(frozen=True)
class Mark:
    """A state a box is in, and its one spelling."""

    kind: str
    """One of ``MARK_KINDS``: how a writer styles it (red border, dashed, a diamond…)."""
    text: str
    """``✗ failed: shape mismatch``, ``⚠ NaN×8``, ``unused``: what every output writes."""


@dataclass(frozen=True)
class Words:
    """Everything one box says; a writer lays it out and styles it, and adds no word."""

    title: str
    """The op's title (``add (+)``), the call's name below its caller (``layer1.0``), the fold's
    name (``layers.0–11``), the input's name (``input_ids``), a stand-in's ``↪ stem.act``."""
    subtitle: str | None = None
    """The class of a call or fold (``Conv2d``); a value's shape."""
    facts: tuple[str, ...] = ()
    """``2×8 → 2×8``, ``1.2M params``, ``1.20 ms``: one speller per quantity."""
    marks: tuple[Mark, ...] = ()
    """In ``MARK_KINDS`` order: the first is the one that wins where one line is shown."""
    badge: str | None = None
    """``×80`` on a fold."""

    def has(self, kind: str) -> bool:
        return any(m.kind == kind for m in self.marks)


# -- one speller per quantity ----------------------------------------------------------


def params_words(count: int) -> str:
    """``1.2M params``: a parameter count, on a box, in a panel, in an export."""
    return f"{format_compact(count)} params"


def run_words(count: int, each: str, total: str) -> str:
    """``218.0M ×80 = 17.4B``: a folded run's number, one member's ×N and the run's total, in
    the summary's cells and on the diagram's box alike; a number of no size (``-``, ``0``) as it is."""
    return each if each in ("-", "", "0") else f"{each} ×{count} = {total}"


def fold_params_words(members: list[Scope], total: int) -> str:
    """A folded run's parameters: ``10.3K ×2 = 20.6K params`` where each member owns its own,
    ``20 params`` where every member is a call of one shared module (owned once)."""
    owners = list({s.path: s.meta for s in members}.values())
    each = owners[0].get("params")
    if len(owners) < 2 or not isinstance(each, int) or isinstance(each, bool):
        return params_words(total)
    return f"{run_words(len(owners), format_compact(each), format_compact(total))} params"


def nonfinite_words(counts: Mapping[str, Any]) -> str:
    """``NaN×8 Inf×1``: an op's non-finite output counts (zeros left out)."""
    counted = {name: counts.get(key) for key, name in (("nan", "NaN"), ("inf", "Inf"))}  # a loaded file's other keys left out
    return " ".join(f"{name}×{format_compact(int(v))}" for name, v in counted.items() if isinstance(v, (int, float)) and not isinstance(v, bool) and 1 <= v < 2**63)


def nonfinite_mark(node: Node) -> Mark | None:
    """``⚠ NaN×8``: NaN or Inf came out of the op (``trace(stats=True)``)."""
    counts = node.meta.get("nonfinite")
    text = nonfinite_words(counts) if isinstance(counts, dict) else ""
    return Mark("nonfinite", f"⚠ {text}") if text else None


def nonfinite_inside_mark(ops: Any) -> Mark | None:
    """``⚠ 1 op with NaN/Inf inside``: a call whose ops made NaN or Inf."""
    if not isinstance(ops, int) or isinstance(ops, bool) or ops <= 0:
        return None
    return Mark("nonfinite", f"⚠ {format_compact(ops)} op{'s' if ops != 1 else ''} with NaN/Inf inside")


def failed_mark(node: Node) -> Mark | None:
    """``✗ failed: <error>``: the op a partial trace stopped at."""
    return Mark("failed", f"✗ failed: {node.meta['error']}") if "error" in node.meta else None


FAILED_INSIDE = Mark("failed", "✗ failed inside")
"""A call holding the op a partial trace stopped at (the failures pass's ``failed``)."""


def far_name(ir: GraphIR, ref: Ref, model: str) -> str:
    """``↪ stem.act``: a stand-in for a value drawn in full elsewhere, named where it comes
    from (``value_source_name``), the same at every depth and in every output."""
    return f"↪ {value_source_name(ir, ref, model)}"


def time_facts(numbers: Mapping[str, Any]) -> list[str]:
    """``1.20 ms`` and ``CUDA 812 µs`` of a profiled call (its meta, or a run's totals)."""
    facts = []
    for key, prefix in (("time_us", ""), ("cuda_time_us", "CUDA ")):
        if isinstance(time := numbers.get(key), (int, float)) and not isinstance(time, bool):
            facts.append(prefix + format_duration(time))
    return facts


def io_fact(ins: list[str], outs: list[str]) -> str:
    """``2×8 → 2×8``; a side with no tensor is ``–``."""
    return f"{', '.join(ins) or '–'} → {', '.join(outs) or '–'}"


def stats_words(stats: Mapping[str, Any]) -> str:
    """``min -0.79  max 1.39  mean -0.0406  std 0.653  NaN 0  Inf 8  zeros 12%``: one output's statistics."""

    def number(v: Any) -> str:
        return str(v) if isinstance(v, int) else f"{v:.3g}"

    parts = [f"{name} {number(stats[key])}" for key, name in (("min", "min"), ("max", "max"), ("mean", "mean"), ("std", "std"), ("nan", "NaN"), ("inf", "Inf")) if key in stats]
    if "zeros" in stats:
        zeros = 100 * stats["zeros"]
        parts.append(f"zeros {zeros:.{2 if 0 < zeros < 1 else 0}f}%")
    if "sampled" in stats:  # stats="sample": the numbers are a strided sample's
        parts.append(f"of a sample of {stats['sampled']}")
    return "  ".join(parts)


DIFF_STATUS = {
    "same": "unchanged",
    "changed": "changed",
    "added": "added in B",
    "removed": "removed in B",
    "pass-through": "hands its input on; only on one side",
}
"""A diff's merged graph: what each status says, in the list, the tooltip and the panel."""


PAGE_WORDS: dict[str, str] = {
    # the details panel: its hint, sections, rows and buttons
    "hint": "Click a box to see its details. Click a module to open or close it.",
    "kind": "kind", "target": "target", "path": "path", "variable": "variable", "module": "module",
    "class": "class", "call": "call", "collective": "collective", "decides": "decides", "flops": "FLOPs",
    "time": "time", "cudaTime": "CUDA time", "outputBytes": "output bytes", "activationBytes": "activation bytes",
    "repeat": "repeat", "repeatOf": "{i} of {n}", "ops": "ops", "parameters": "parameters", "nonfiniteOps": "NaN/Inf ops",
    "moduleCall": "module call", "status": "status", "diff": "A → B", "overlays": "Overlays", "outputStats": "Output stats",
    "tensors": "Tensors", "inputs": "inputs", "outputs": "outputs", "out": "out", "source": "source",
    "sourceSection": "Source", "calledFrom": "Called from", "shapes": "shapes",
    "expand": "Expand", "collapse": "Collapse", "fold": "Fold ×{n}", "unfold": "Unfold ×{n}",
    "copy": "Copy {what}", "copyTitle": "Copy the {what} to the clipboard", "copied": "Copied ✓", "copyFailed": "Copy failed",
    # the graph, the dock and notices
    "unfoldTitle": "Unfold: one box per repeat",
    "boxesShown": "{status} · {boxes} boxes shown",
    "scaleNote": "(log scale, {n} boxes on screen; blank: none)",
    "sizeNote": "· size: √{name}, 1× to {most}× at {word}",
    "runs": "Runs", "runsOfOutput": "Runs: its output ({op})",
    "comparedMarks": "· red outline: diverges here · faded: inherits a difference",
    "layoutFailed": "Layout failed: {error}",
    "openedToDepth": "Opened modules down to depth {depth}; deeper levels would exceed {budget} boxes. Click a module to open it.",
}
"""Every word of the page outside its boxes and toolbar (the details panel, the dock, notices):
``web/src`` reads them from the document (``PageDocument.ui``), ``{name}`` filled in there."""


# -- words per box ---------------------------------------------------------------------


def op_marks(node: Node, repeats: list[Node] | None = None) -> tuple[Mark, ...]:
    """An op's marks in ``MARK_KINDS`` order."""
    marks = [failed_mark(node), nonfinite_mark(node)]
    if node.meta.get("dead"):
        marks.append(Mark("unused", "unused"))
    if node.inplace:
        marks.append(Mark("in-place", "in-place"))
    if node.meta.get("size_only"):
        marks.append(Mark("size only", "size only"))
    reads = decisions(node) + [r for other in repeats or () for r in decisions(other)]
    if reads:  # a loop's outcomes counted: ``◆ break: went on ×3, broke``
        marks.append(Mark("decision", f"◆ {read_mark(*counted_reads(reads)[-1])}"))
    collective = collective_text(node)
    if collective is not None:
        marks.append(Mark("collective", collective))
    return tuple(m for m in marks if m is not None)


def op_words(node: Node, repeats: list[Node] | None = None) -> Words:
    return Words(op_display(node), marks=op_marks(node, repeats))


def value_words(ir: GraphIR, node: Node, dominant: str | None) -> Words:
    """An input, output, parameter or constant: its name and shape."""
    meta = node.outputs[0] if node.outputs else None
    if node.kind == "input":
        title = input_title(ir, node)
    elif node.kind == "output":
        title = node.path or "output"
        meta = ir.value_meta(node.inputs[0]) if node.inputs else meta
    else:
        title = (node.path or node.kind).rsplit(".", 1)[-1]
    return Words(title, shape_text(meta, dominant))


def call_title(ir: GraphIR, scope: Scope, model: str) -> str:
    """A call's name below its caller's path (``layers.0``, ``fc#1``; the model's title for its own)."""
    parent = ir.scope(scope.parent).path if scope.parent is not None and ir.has_scope(scope.parent) else ""
    return relative_name(scope_name(scope, model), parent)


def call_marks(scope: Scope, failed: bool) -> tuple[Mark, ...]:
    marks = [FAILED_INSIDE if failed else None, nonfinite_inside_mark(scope.meta.get("nonfinite_ops"))]
    return tuple(m for m in marks if m is not None)


def call_words(ir: GraphIR, scope: Scope, model: str, facts: tuple[str, ...] = ()) -> Words:
    """A module call's box: its name, its class, ``facts``, and whether it failed or made NaN."""
    return Words(call_title(ir, scope, model), scope.class_name, facts, call_marks(scope, bool(scope.meta.get("failed"))))


def fold_words(ir: GraphIR, members: list[Scope], facts: tuple[str, ...] = ()) -> Words:
    """A folded run: ``layers.0–11``, its class, its totals, ``×12``; a loop a break ended says where."""
    first = members[0]
    parent = ir.scope(first.parent).path if first.parent is not None else ""
    note = loop_note(ir, first).removeprefix(" ").removeprefix(", ")
    marks = tuple(m for s in members for m in call_marks(s, bool(s.meta.get("failed"))))
    notes = (Mark("decision", note),) if note else ()
    return Words(relative_name(fold_name(members), parent), first.class_name, facts, tuple(dict.fromkeys(marks)) + notes, f"×{len(members)}")


def declared_params(ir: GraphIR, members: list[Scope], nodes: list[Node]) -> int:
    """Parameters owned by ``members``' modules, each once however many members own it (the
    calls of one shared module); from the model's parameter list when captured."""
    declared = ir.meta.get("parameters")
    if isinstance(declared, list):
        prefixes = {scope.path + "." if scope.path else "" for scope in members}
        return sum(
            TensorMeta(tuple(p.get("shape", ())), "", "").numel()
            for p in declared
            if any(str(path).startswith(prefix) for path in [p.get("path", ""), *p.get("shared_with", [])] for prefix in prefixes)
        )
    return sum(n.outputs[0].numel() for n in nodes if n.kind == "param" and n.outputs)


def shapes_of(ir: GraphIR, values: list[Ref], dominant: str | None, most: int | None = None) -> list[str]:
    """One shape per tensor, in the tree's spelling (``2×10×96, 4×2×48, 4×2×48``; three alike ``×3``)."""
    return shape_list([ir.value_meta(v) for v in dict.fromkeys(values)], dominant, most)
