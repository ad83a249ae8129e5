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
    """``⇄ all_reduce over tp:4, 128 B (P(sum) → R)``: a collective as the tree marks
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


def collectives_under(ir: GraphIR) -> dict[str, list[Node]]:
    """Module call id -> the collectives it runs, its callees' included, in order."""
    found: dict[str, list[Node]] = {}
    for n in ir.ops():
        if collective_kind(n.target) is None:
            continue
        scope: str | None = n.scope
        while scope is not None:
            found.setdefault(scope, []).append(n)
            scope = ir.scope(scope).parent
    return found


def held_collectives_text(nodes: list[Node]) -> str | None:
    """``⇄ all_reduce 2.00 KiB``: what a closed box says of the collectives inside it, so none
    is hidden (``⇄ all_reduce ×2 4.00 KiB, all_gather 512 B``); None for none. A folded run's
    box says it of one member, as its other numbers."""
    sizes: dict[str, list[int]] = {}
    for n in nodes:
        kind = collective_kind(n.target)
        if kind is None:
            continue
        facts = n.meta.get("collective")
        size = facts.get("bytes") if isinstance(facts, dict) else None
        sizes.setdefault(kind, []).append(size if isinstance(size, int) else 0)
    if not sizes:
        return None
    parts = [f"{kind}{f' ×{len(each)}' if len(each) > 1 else ''} {format_bytes(sum(each))}" for kind, each in sizes.items()]
    return "⇄ " + ", ".join(parts)


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
    """``layers.0–11`` for a run of numbered siblings; ``block#0–2`` for a run of one module's
    calls (a loop, or ``fc(fc(x))``): which calls, as its other calls are named (``fc``, ``fc#1``)."""
    first, last = members[0], members[-1]
    if first.path == last.path:
        return f"{first.path or '<root>'}#{first.call}–{last.call}"
    return _fold_name(first.path, last.path)


def fold_label(members: list[Scope]) -> str:
    """``layers.0–79 (LlamaDecoderLayer) ×80``."""
    return f"{fold_name(members)} ({members[0].class_name}) ×{len(members)}"


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
        return input_title(ir, producer)
    if producer.kind != "op":
        return producer.path or producer.kind
    scope = ir.scope(producer.scope)
    return scope_name(scope, model) if scope.parent is not None and ref in scope.outputs else op_display(producer)


def relative_name(name: str, within: str) -> str:
    """A name inside its enclosing module, without that module's path: ``layer1.0.conv1`` in ``layer1.0`` -> ``conv1``."""
    return name[len(within) + 1 :] if within and name.startswith(within + ".") else name


def input_title(ir: GraphIR, node: Node) -> str:
    """A model input's name, as every output writes it: the ``forward`` parameter it was passed
    as, recorded by capture on the model's own call (``sample``, ``timestep``, ``input_ids``),
    else its place in the call (``args[0]``)."""
    for root in (s for s in ir.scopes if s.parent is None):
        names = root.meta.get("input_names")
        if isinstance(names, list):
            for ref, name in zip(root.inputs, names):
                if ref.node == node.id and ref.slot == 0 and isinstance(name, str) and name:
                    return name
    return input_label(node.path)


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
    "and": ("True", "False"),
    "or": ("True", "False"),
    None: ("True", "False"),
}
"""A statement's words for the way a bool read went: (True, False)."""

_READ_WORDS = {
    "item": ".item()", "tolist": ".tolist()", "int": "int()", "float": "float()", "complex": "complex()",
    "index": "index", "print": "printed", "numpy": "to numpy", "count": "size",
}


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
    return size_only_text([node])


def size_only_text(made: list[Node]) -> str:
    """``(size only @ m.py:5)`` when only the size of the values ``made`` (an op's, or those a
    module call returned) was read, at the first line that read one; empty otherwise."""
    if not made or not all(n.meta.get("size_only") for n in made):
        return ""
    sized = next((r for n in made for r in n.python_reads if r.how == "size" and r.source is not None), None)
    return f"  (size only @ {short_source(sized.source)})" if sized is not None else "  (size only)"


def run_label(ir: GraphIR, first: Scope, last: Scope, count: int) -> str:
    """A folded run's line: ``layers.0–79 (LlamaDecoderLayer) ×80``; a run of one module's calls
    numbers them (:func:`fold_name`), and a loop says where it stopped: ``step#0–3 (Sequential)
    ×4 of range(10), broke at refiner.py:22``."""
    return visible(f"{fold_name([first, last])} ({first.class_name}) ×{count}{loop_note(ir, first)}")


def loop_body_note(ir: GraphIR, scope: Scope) -> str:
    """``then relu, add each time`` for the first call of a folded loop whose caller runs ops
    between the calls (its body: drawn inside the fold's box, so the box says so); empty otherwise."""
    repeat = scope.meta.get("repeat")
    group = repeat.get("group") if isinstance(repeat, dict) else None
    entry = next((g for g in ir.meta.get("repeat_groups") or () if isinstance(g, dict) and g.get("group") == group), None)
    body = entry.get("body") if entry is not None else None
    if not body or not body[0]:
        return ""
    names = count_runs(op_display(ir.node(node_id)) for node_id in body[0] if ir.has_node(node_id))
    return f"then {', '.join(names[:4])}{', …' if len(names) > 4 else ''} each time" if names else ""


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
