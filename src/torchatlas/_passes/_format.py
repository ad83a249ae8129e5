"""Text forms of analysis results, shared by the diff and the summary table."""

from __future__ import annotations

from typing import Any

_MD_SPECIAL = str.maketrans({c: "\\" + c for c in "\\`*_[]<>|~"})


def safe_text(text: str) -> str:
    """User-controlled names without control characters, so they cannot drive a terminal."""
    return "".join(ch if ch.isprintable() else f"\\x{ord(ch):02x}" for ch in text)


def markdown_text(text: str) -> str:
    """User-controlled names as literal markdown (no emphasis, links, HTML or table breaks)."""
    return safe_text(text).translate(_MD_SPECIAL)


def format_shapes(shapes: list[list[Any]], limit: int = 3) -> str:
    """``[[2, 3], [4]]`` -> ``2×3, 4``; ``-`` when there are none; long lists end ``+N``."""
    if not shapes:
        return "-"
    shown = [("×".join(str(d) for d in shape) if shape else "scalar") for shape in shapes[:limit]]
    more = f" +{len(shapes) - limit}" if len(shapes) > limit else ""
    return ", ".join(shown) + more


def format_count(value: Any) -> str:
    """``1234567`` -> ``1,234,567``; ``?`` when unknown."""
    return f"{value:,}" if isinstance(value, int) else "?"


def format_si(value: Any) -> str:
    """``1234567`` -> ``1.23M``; ``?`` when unknown."""
    if not isinstance(value, (int, float)):
        return "?"
    for scale, suffix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "K")):
        if abs(value) >= scale:
            return f"{value / scale:.2f}{suffix}"
    return str(int(value))


def format_bytes(value: Any) -> str:
    """``1536`` -> ``1.50 KiB``; ``?`` when unknown."""
    if not isinstance(value, (int, float)):
        return "?"
    for scale, suffix in ((1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if abs(value) >= scale:
            return f"{value / scale:.2f} {suffix}"
    return f"{int(value)} B"
