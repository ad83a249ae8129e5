"""The words every renderer puts on screen, defined once: shapes, op names, module names,
fold names and the model's title. The viewer receives these as data."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from torchatlas._ir import GraphIR, Node, PythonRead, Scope, Source, TensorMeta
from torchatlas._ops import op_name, operator_symbol
from torchatlas._text import count_runs, format_shape, visible
from torchatlas._text import fold_label as _fold_label
from torchatlas._text import fold_name as _fold_name

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
        text += f" {meta.dtype}"
    return text


def shape_list(metas: list[TensorMeta | None], dominant: str | None = None, most: int | None = None) -> list[str]:
    """Every tensor's shape, in order (``2×10×96, 4×2×48, 4×2×48``), three or more alike in a
    row counted once (``1×8×32 ×3``); past ``most`` entries, ``…``."""
    texts = count_runs(shape_text(meta, dominant) for meta in metas)
    return texts if most is None or len(texts) <= most else [*texts[:most], "…"]


def op_display(node: Node) -> str:
    """``conv2d``, ``view``, ``add (+)``, ``addmm`` (for ``aten.addmm.default``)."""
    target = node.target or node.kind
    symbol = operator_symbol(target)
    name = op_name(target)
    return f"{name} ({symbol})" if symbol else name


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


def read_mark(read: PythonRead) -> str:
    """The short text of a decision mark on a diagram: ``if: taken``, ``.item() = 4``."""
    what = read.statement or (_READ_WORDS.get(read.how) if read.how != "bool" else None) or "bool"
    outcome = read_outcome(read)
    return f"{what}: {outcome}" if outcome and not outcome.startswith("=") else f"{what} {outcome}".strip()


def decisions(node: Node) -> list[PythonRead]:
    """The reads of ``node``'s value into Python that decided something (sizes left out)."""
    return [r for r in node.python_reads if r.decision] if "reads" in node.meta else []


def read_label(read: PythonRead) -> str:
    """``if @ refiner.py:17 (taken)``, ``.item() @ loss.py:9 (= 0.25)``,
    ``read into Python @ m.py:4 (True)`` where the line alone does not say which statement."""
    where = f" @ {short_source(read.source)}" if read.source is not None else ""
    what = read.statement or (_READ_WORDS.get(read.how) if read.how != "bool" else None) or "read into Python"
    outcome = read_outcome(read)
    return f"{what}{where}" + (f" ({outcome})" if outcome else "")


def decision_text(node: Node) -> str:
    """``⇢ if @ refiner.py:17 (taken)`` for each place the node's value decided something in
    Python, ``(size only)`` for a value only its size was read of; empty otherwise."""
    reads = decisions(node)
    if reads:
        shown = count_runs(read_label(r) for r in reads)
        return "  ⇢ " + ", ".join(shown)
    return "  (size only)" if node.meta.get("size_only") else ""
