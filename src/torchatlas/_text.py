"""Text that comes from user code, made safe to show, and numbers made readable.

Module, class, op and variable names come from the user's code (or a loaded file),
so every renderer shows them through :func:`visible`: one escape convention
everywhere (a tab is ``\\t``, ESC ``\\x1b``, U+202E ``\\u202e``), so no name can drive
a terminal, reorder a line, or break a file format. Imports the standard library only.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from typing import Any

# C0/C1 controls, DEL, line and paragraph separators, bidi embedding/override/isolate
# marks, surrogates and the two noncharacters XML refuses.
_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff\ufffe\uffff]"
)
_ASCII = str.maketrans({"→": "->", "←": "<-", "×": "x", "┬": "+", "✗": "X", "…": "...", "–": "-", "✂": "%", "◀": "<", "⚠": "!", "⇢": "=>", "◆": "<>", "—": "--", "µ": "u"})
# ``&`` too: markdown decodes character references (``&#x202e;``) even in table cells.
_MD_SPECIAL = str.maketrans({c: "\\" + c for c in "\\`*_[]<>|~&"})


def _escape(match: re.Match[str]) -> str:
    return ascii(match.group())[1:-1]


def visible(text: str, limit: int | None = None) -> str:
    """``text`` with unsafe characters as escapes (``\\n``, ``\\x1b``, ``\\u202e``), cut to ``limit``
    characters (the last one ``…``). Cut before escaping, so a huge name costs only ``limit``."""
    if limit is not None and len(text) > limit:
        shown = _UNSAFE.sub(_escape, text[:limit])
        return shown[: limit - 1] + "…"
    shown = _UNSAFE.sub(_escape, text)
    if limit is not None and len(shown) > limit:
        return shown[: limit - 1] + "…"
    return shown


def error_text(exc: BaseException) -> str:
    """``TypeError: ...``, its message's first line (and the next ones while a line ends in
    ``:``, which puts the reason below it); never raises, even for an exception whose
    ``__str__`` does."""
    try:
        message = str(exc).strip()
    except Exception:
        return f"{type(exc).__name__} (its message could not be read)"
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    first = lines[0] if lines else ""
    for line in lines[1:]:
        if not first.endswith(":"):
            break
        first += " " + line
    first = first[:300]
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def to_ascii(text: str) -> str:
    """The ASCII fallback of rendered text: arrows and marks spelled out, anything else escaped."""
    return text.translate(_ASCII).encode("ascii", "backslashreplace").decode("ascii")


def markdown_text(text: str) -> str:
    """User text as literal markdown (no emphasis, links, HTML or table breaks)."""
    return visible(text).translate(_MD_SPECIAL)


def fold_name(first_path: str, last_path: str) -> str:
    """``layers.0–11`` for a run of numbered siblings (``encoder_layer_0–11`` where they share a
    stem); the path alone for a loop calling one module."""
    if first_path == last_path:
        return first_path
    a, b = first_path.split("."), last_path.split(".")
    if len(a) == len(b) and a[:-1] == b[:-1]:
        stem = a[-1].rstrip("0123456789")
        last = b[-1][len(stem):] if stem and b[-1].startswith(stem) and b[-1][len(stem):].isdigit() and a[-1] != stem else b[-1]
        return ".".join([*a[:-1], f"{a[-1]}–{last}"])
    return f"{first_path} … {last_path}"


def fold_label(first_path: str, last_path: str, class_name: str, count: int) -> str:
    """``layers.0–79 (LlamaDecoderLayer) ×80``."""
    return f"{fold_name(first_path, last_path) or '<root>'} ({class_name}) ×{count}"


def format_shape(shape: list[Any] | tuple[Any, ...]) -> str:
    """``(2, 3)`` -> ``2×3``; a 0-d tensor is ``scalar``; an empty vector ``0 (empty)``, never
    a bare ``0`` that reads as a value (an empty KV cache's ``tensor([])``)."""
    if tuple(shape) == (0,):
        return "0 (empty)"
    # a symbolic size is text from a document or a .pt2: it may hold any character
    return "×".join(visible(d) if isinstance(d, str) else str(d) for d in shape) if shape else "scalar"


def count_runs(texts: Iterable[str]) -> list[str]:
    """Three or more equal texts in a row as one, ``1×2×8×16 ×4``; one or two stay as they are
    (``3, 3`` reads better than ``3 ×2``)."""
    out: list[str] = []
    for text, same in itertools.groupby(texts):
        count = len(list(same))
        out += [f"{text} ×{count}"] if count > 2 else [text] * count
    return out


def format_shapes(shapes: list[Any], limit: int = 3) -> str:
    """``[[2, 3], [4]]`` -> ``2×3, 4``; ``-`` when there are none; equal shapes in a row
    counted once (:func:`count_runs`); long lists end ``+N``."""
    if not shapes:
        return "-"
    texts = count_runs(format_shape(shape) for shape in shapes)
    more = f" +{len(texts) - limit}" if len(texts) > limit else ""
    return ", ".join(texts[:limit]) + more


def format_count(value: Any) -> str:
    """``1234567`` -> ``1,234,567``; ``?`` when unknown."""
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else "?"


def _scaled(value: float, units: tuple[tuple[float, str], ...], digits: int, roll: float = 1000) -> str | None:
    """``value`` in the largest unit (``(scale, suffix)``, largest first) it reaches, at ``digits``
    decimals; one that would read ``roll`` or more once rounded (``1000.00 MiB``) goes up a unit
    (``0.98 GiB``). None below the smallest unit."""
    for i, (scale, suffix) in enumerate(units):
        if abs(value) >= scale:
            if i > 0 and abs(round(value / scale, digits)) >= roll:
                scale, suffix = units[i - 1]
            return f"{value / scale:.{digits}f}{suffix}"
    if units and abs(round(value)) >= roll:  # 999.6 -> 1.00K, not 1000
        scale, suffix = units[-1]
        return f"{value / scale:.{digits}f}{suffix}"
    return None


def format_si(value: Any) -> str:
    """``1234567`` -> ``1.23M`` (FLOPs, MACs); ``?`` when unknown."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return "?"
    units = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "K"))
    return _scaled(value, units, 2) or str(int(value))


def format_compact(value: int) -> str:
    """``1234567`` -> ``1.2M``: one decimal, for labels that must stay short (``7.1B params``).
    The one spelling of a parameter count in every output, the page included."""
    return _scaled(value, ((10**12, "T"), (10**9, "B"), (10**6, "M"), (10**3, "K")), 1) or str(value)


def format_duration(microseconds: Any) -> str:
    """``812.4`` -> ``812 µs``, ``3400`` -> ``3.40 ms``, ``1.2e6`` -> ``1.20 s``; ``-`` when unknown."""
    if not isinstance(microseconds, (int, float)) or isinstance(microseconds, bool):
        return "-"
    return _scaled(microseconds, ((1e6, " s"), (1e3, " ms")), 2) or f"{microseconds:.0f} µs"


def format_bytes(value: Any) -> str:
    """``1536`` -> ``1.50 KiB``; ``?`` when unknown."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return "?"
    units = ((1 << 40, " TiB"), (1 << 30, " GiB"), (1 << 20, " MiB"), (1 << 10, " KiB"))
    return _scaled(value, units, 2) or f"{int(value)} B"


DIFF_COUNTS = ("parameters", "FLOPs")
"""A diff's fields that hold a count (an int, None when unknown)."""
DIFF_SHAPES = ("input shapes", "output shapes")
"""A diff's fields that hold a list of shapes."""


def format_diff_value(field: str, value: Any) -> str:
    """One side of a diff's change as every output writes it: a count ``24.6K`` (``?`` unknown),
    shapes ``2×4, 2×8``, anything else (a name, an op's text) as it is."""
    if field in DIFF_COUNTS and not isinstance(value, str):
        return format_compact(value) if isinstance(value, int) and not isinstance(value, bool) else "?"
    if field in DIFF_SHAPES and isinstance(value, (list, tuple)):
        return format_shapes(list(value))
    return str(value)


SHORT_FIELDS = {"parameters": "params"}
"""A field's name where a change is written (``params 20 → 40``)."""


def change_words(field: str, before: Any, after: Any) -> str:
    """``params 20 → 40``: the one place a diff's change becomes words."""
    return f"{SHORT_FIELDS.get(field, field)} {format_diff_value(field, before)} → {format_diff_value(field, after)}"


def fact_words(field: str, value: Any) -> str:
    """``params 24.6K``: one fact of an added or removed call."""
    return f"{SHORT_FIELDS.get(field, field)} {format_diff_value(field, value)}"
