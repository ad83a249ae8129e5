"""Terminal-safe text: names from user code must not smuggle control sequences."""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_ASCII = str.maketrans({"→": "->", "←": "<-", "×": "x", "┬": "+", "✗": "X", "…": "..."})


def safe_text(text: str) -> str:
    """Control characters (ANSI escapes, newlines, bidi overrides) shown as ``\\xNN`` escapes."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape", "backslashreplace").decode("ascii"), text)


def to_ascii(text: str) -> str:
    """The ASCII fallback of a rendered text: arrows and marks spelled out, anything else escaped."""
    return text.translate(_ASCII).encode("ascii", "backslashreplace").decode("ascii")
