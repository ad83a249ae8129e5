"""The words every renderer puts on screen, defined once: shapes, op names, module names,
fold names and the model's title. The page gets them as data through ``_page``."""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

from torchatlas._ir import GraphIR, Node, PythonRead, Ref, Scope, Source, TensorMeta
from torchatlas._ops import collective_kind, op_title
from torchatlas._text import count_runs, format_bytes, format_shape, visible
from torchatlas._text import fold_label as _fold_label
from torchatlas._text import fold_name as _fold_name

from ._names import MAX_READ_LINE

LINE_LIMIT = 2_000
"""Characters of one line of the tree or one summary cell at most: a name of megabytes is
cut before it is escaped."""


def dominant_dtype(ir: GraphIR) -> str | None:
    """The dtype most values have (ties: alphabetical); shapes of other dtypes name theirs."""
    counts = Counter(m.dtype for n in ir.nodes if n.kind in ("op", "input") for m in n.outputs)
    if not counts:
        return None
    return min(counts, key=lambda d: (-counts[d], d))


def shape_text(meta: TensorMeta | None, dominant: str | None = None) -> str:
    """``1×16×32×32``, with the dtype when it is not the dominant one (``4 int64``); ``?`` unknown."""
    if meta is None:
        return "?"
    text = format_shape(meta.shape)
    if meta.dtype and meta.dtype != dominant:
        text += f" {visible(meta.dtype)}"
    if meta.placements:  # a DTensor: its global shape, then how the ranks hold it
        text += f" [{placement_text(meta)}]"
    return text


def placement_text(meta: TensorMeta) -> str:
    """``Shard(1) over tp:4, local 2×16`` (one placement per mesh dimension)."""
    over = ", ".join(
        f"{p} over {name}:{size}" for p, (name, size) in zip(meta.placements, meta.mesh)
    ) or ", ".join(meta.placements)
    local = f", local {format_shape(meta.local_shape)}" if meta.local_shape is not None else ""
    return over + local


def collective_text(node: Node) -> str | None:
    """``⇄ all_reduce over tp:4, 128 B (Partial(sum) → Replicate)``: a collective as the tree marks
    it; None for other nodes."""
    kind = collective_kind(node.target)
    facts = node.meta.get("collective")
    if kind is None or not isinstance(facts, dict):
        return None
    text = f"⇄ {kind}"
    if facts.get("group"):
        text += f" over {facts['group']}:{facts.get('group_size', '?')}"
    if isinstance(facts.get("bytes"), int):
        text += f", {format_bytes(facts['bytes'])}"
    if facts.get("redistribute"):
        text += f" ({facts['redistribute']})"
    return text


def shape_list(metas: list[TensorMeta | None], dominant: str | None = None, most: int | None = None) -> list[str]:
    """Every tensor's shape, in order (``2×10×96, 4×2×48, 4×2×48``), three or more alike in a
    row counted once (``1×8×32 ×3``); past ``most`` entries, ``…``."""
    texts = count_runs(shape_text(meta, dominant) for meta in metas)
    return texts if most is None or len(texts) <= most else [*texts[:most], "…"]


def op_display(node: Node) -> str:
    """An op's title, the one word every output shows for it (tree line, diagram box, page box
    and panel, Model Explorer node, far-value stand-in): its short name with the operator it was
    written as, ``add (+)``, ``add (+=)``, ``getitem ([])``; else ``conv2d``, ``view``, ``addmm``
    (for ``aten.addmm.default``). An in-place write is marked beside it, never in the word."""
    return op_title(node.target or node.kind)


def model_title(ir: GraphIR) -> str:
    """``CoolCNN``: the model's class name, else the root call's class, else ``graph``."""
    model = ir.meta.get("model")
    if isinstance(model, str) and model:
        return model.rsplit(".", 1)[-1]
    roots = [s for s in ir.scopes if s.parent is None]
    return roots[0].class_name if roots else "graph"


def scope_name(scope: Scope, model: str) -> str:
    """A module call's name: its path (the model's title for the root), ``#k`` for the k-th repeat call."""
    name = scope.path or model
    return name + (f"#{scope.call}" if scope.call else "")


def fold_name(members: list[Scope]) -> str:
    """``layers.0–11`` for a run of numbered siblings; the path alone for a loop calling one module."""
    return _fold_name(members[0].path, members[-1].path)


def fold_label(members: list[Scope]) -> str:
    """``layers.0–79 (LlamaDecoderLayer) ×80``."""
    return _fold_label(members[0].path, members[-1].path, members[0].class_name, len(members))


def variable_name(node: Node, slot: int) -> str | None:
    """The variable holding one result where it was made: ``h`` of ``h, gate = x.chunk(2)``."""
    if node.name and len(node.outputs) > 1:
        parts = node.name.split(", ")
        return parts[slot] if len(parts) == len(node.outputs) else node.name
    return node.name


def value_source_name(ir: GraphIR, ref: Ref, model: str) -> str:
    """What a ``↪`` stand-in calls a value drawn in full elsewhere: the innermost module call
    it leaves (``encoder.dropout#1``), else the op's title or the input's name; never the
    variable it had where it was made (``hidden_states`` there means something else here)."""
    producer = ir.node(ref)
    if producer.kind == "input":
        return input_label(producer.path)
    if producer.kind != "op":
        return producer.path or producer.kind
    scope = ir.scope(producer.scope)
    return scope_name(scope, model) if scope.parent is not None and ref in scope.outputs else op_display(producer)


def relative_name(name: str, within: str) -> str:
    """A name inside its enclosing module, without that module's path: ``layer1.0.conv1`` in ``layer1.0`` -> ``conv1``."""
    return name[len(within) + 1 :] if within and name.startswith(within + ".") else name


def input_label(path: str | None) -> str:
    """``kwargs['input_ids']`` -> ``input_ids``; other paths as they are."""
    path = path or "?"
    for prefix in ("kwargs['", 'kwargs["'):
        if path.startswith(prefix) and path.endswith(prefix[-1] + "]"):
            return path[len(prefix) : -2]
    return path


def arguments_text(node: Node, limit: int = 240) -> str:
    """``(%0, %1, %2, [1, 1], [1, 1])`` with ``name=value`` keywords: the op's arguments as
    recorded, ``%k`` for its ``k``-th tensor input, ``shape(%k)`` for a shape read."""
    parts = [_argument(a) for a in node.args] + [f"{k}={_argument(v)}" for k, v in node.kwargs.items()]
    return visible("(" + ", ".join(parts) + ")", limit)


def _argument(value: Any) -> str:
    if isinstance(value, dict) and len(value) == 1:
        (kind, inner), = value.items()
        if kind == "tensor":
            return f"%{inner}"
        if kind == "shape_of":
            return f"shape(%{inner})"
        if kind == "slice" and isinstance(inner, list):
            return ":".join("" if v is None else _argument(v) for v in inner)
        if kind in ("dtype", "repr"):
            return str(inner)
    if isinstance(value, list):
        return "[" + ", ".join(_argument(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_argument(v)}" for k, v in value.items()) + "}"
    return json.dumps(value) if isinstance(value, str) else str(value)


_OUTCOMES: dict[str | None, tuple[str, str]] = {
    "if": ("taken", "not taken"),
    "break": ("broke", "went on"),
    "continue": ("continued", "went on"),
    "while": ("looped", "ended"),
    "assert": ("held", "failed"),
    None: ("True", "False"),
}
"""A statement's words for the way a bool read went: (True, False)."""

_READ_WORDS = {"item": ".item()", "tolist": ".tolist()", "int": "int()", "float": "float()", "index": "index", "print": "printed"}


def short_source(src: Source) -> str:
    """``refiner.py:17``: the file's name without its folder, and the line."""
    return f"{src.file.replace(chr(92), '/').rsplit('/', 1)[-1]}:{src.line}"


def read_outcome(read: PythonRead) -> str:
    """Which way a read went: ``taken``, ``broke``, ``= 0.25``; empty where nothing is known."""
    if isinstance(read.value, bool) and read.how == "bool":
        return _OUTCOMES[read.statement if read.statement in _OUTCOMES else None][0 if read.value else 1]
    if read.value is not None:
        return f"= {read.value:.4g}" if isinstance(read.value, float) else f"= {read.value}"
    return ""


def read_mark(read: PythonRead, outcome: str | None = None) -> str:
    """The short text of a decision mark on a diagram: ``if: taken``, ``.item() = 4``."""
    what = _read_what(read, "bool")
    outcome = read_outcome(read) if outcome is None else outcome
    return f"{what}: {outcome}" if outcome and not outcome.startswith("=") else f"{what} {outcome}".strip()


def decisions(node: Node) -> list[PythonRead]:
    """The reads of ``node``'s value into Python that decided something (sizes left out)."""
    return [r for r in node.python_reads if r.decision] if "reads" in node.meta else []


def read_label(read: PythonRead, outcome: str | None = None) -> str:
    """``if @ refiner.py:17 (taken)``, ``.item() @ loss.py:9 (= 0.25)``,
    ``read into Python @ m.py:4 (True)`` where the line alone does not say which statement;
    ``outcome`` in place of the read's own (outcomes counted over a loop)."""
    where = f" @ {short_source(read.source)}" if read.source is not None else ""
    outcome = read_outcome(read) if outcome is None else outcome
    return f"{_read_what(read, 'read into Python')}{where}" + (f" ({outcome})" if outcome else "")


def _read_what(read: PythonRead, unknown: str) -> str:
    """``if``, ``break``; ``.item() in if`` for a scalar an ``if`` then compared; else the read."""
    if read.how == "bool":
        return read.statement or unknown
    what = _READ_WORDS.get(read.how, unknown)
    return f"{what} in {read.statement}" if read.statement else what


def counted_reads(reads: list[PythonRead]) -> list[tuple[PythonRead, str]]:
    """Reads of one place (the same line and statement) as one, with their outcomes counted:
    ``(first read, "went on ×3, broke")``, in the order the places first ran."""
    places: dict[str, tuple[PythonRead, list[str]]] = {}
    for read in reads:
        key = f"{_read_what(read, '')}@{short_source(read.source) if read.source is not None else ''}"
        places.setdefault(key, (read, []))[1].append(read_outcome(read))
    out = []
    for first, outcomes in places.values():
        counted = {o: outcomes.count(o) for o in dict.fromkeys(outcomes) if o}
        out.append((first, ", ".join(o if n == 1 else f"{o} ×{n}" for o, n in counted.items())))
    return out


def loop_iterations(ir: GraphIR) -> dict[str, list[Node]]:
    """A folded loop's first-iteration op -> the same op in its later iterations (repeat groups' ``body``)."""
    out: dict[str, list[Node]] = {}
    for entry in ir.meta.get("repeat_groups") or ():
        body = entry.get("body") if isinstance(entry, dict) else None
        for ops in (body or [])[1:]:
            for first, node_id in zip(body[0], ops):
                if ir.has_node(node_id):
                    out.setdefault(first, []).append(ir.node(node_id))
    return out


def decision_text(node: Node, repeats: list[Node] | None = None) -> str:
    """``⇢ if @ refiner.py:17 (taken)`` for each place the node's value decided something in
    Python, ``(size only @ m.py:5)`` for a value only its size was read of (there); empty otherwise. With
    ``repeats`` (the same op in a folded loop's other iterations), outcomes are counted:
    ``⇢ break @ refiner.py:16 (went on ×3, broke)``."""
    reads = decisions(node)
    if repeats:
        reads = reads + [r for other in repeats for r in decisions(other)]
        shown = [read_label(first, outcome) for first, outcome in counted_reads(reads)]
        if shown:
            return "  ⇢ " + ", ".join(shown)
    elif reads:
        shown = count_runs(read_label(r) for r in reads)
        return "  ⇢ " + ", ".join(shown)
    if not node.meta.get("size_only"):
        return ""
    sized = next((r for r in node.python_reads if r.how == "size" and r.source is not None), None)
    return f"  (size only @ {short_source(sized.source)})" if sized is not None else "  (size only)"


def run_label(ir: GraphIR, first: Scope, last: Scope, count: int) -> str:
    """A folded run's line: ``layers.0–79 (LlamaDecoderLayer) ×80``; a loop calling one module
    numbers its calls and says where it stopped: ``step#0–3 (Sequential) ×4 of range(10), broke
    at refiner.py:22``."""
    note = loop_note(ir, first)
    repeat = first.meta.get("repeat")
    group = repeat.get("group") if isinstance(repeat, dict) else None
    loop = any(isinstance(g, dict) and g.get("group") == group and g.get("body") for g in ir.meta.get("repeat_groups") or ())
    if loop and first.path == last.path:
        return visible(f"{first.path or '<root>'}#{first.call}–{last.call} ({first.class_name}) ×{count}{note}")
    return _fold_label(first.path, last.path, first.class_name, count) + note


def loop_note(ir: GraphIR, scope: Scope) -> str:
    """`` of range(10), broke at refiner.py:16`` for the first call of a folded loop that a
    ``break`` ended (the loop's iterable where its header line says it); empty otherwise."""
    repeat = scope.meta.get("repeat")
    group = repeat.get("group") if isinstance(repeat, dict) else None
    entry = next((g for g in ir.meta.get("repeat_groups") or () if isinstance(g, dict) and g.get("group") == group), None)
    stop = entry.get("exit") if entry is not None else None
    if not isinstance(stop, dict):
        return ""
    src, loop = stop.get("source"), stop.get("loop")
    code = loop.get("code", "") if isinstance(loop, dict) else ""
    header = _LOOP_HEADER.match(code) if len(code) <= MAX_READ_LINE else None
    of = f" of {header.group(1)}" if header and len(header.group(1)) <= 40 else ""
    at = f" at {short_source(Source(src['file'], src['line']))}" if isinstance(src, dict) else ""
    return visible(f"{of}, broke{at}", LINE_LIMIT)


_LOOP_HEADER = re.compile(r"for .+? in (.+):\s*(?:#.*)?$")
