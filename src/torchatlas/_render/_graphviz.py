"""Graphviz plumbing: quoting user text for DOT, and running ``dot`` (through the ``graphviz`` package).

Module, class and op names come from user code, so every piece of text that
goes into DOT passes through :func:`quoted` or :func:`html_text`.
"""

from __future__ import annotations

import html
import re

import graphviz

from torchatlas._text import visible

FORMATS: tuple[str, ...] = ("svg", "png", "pdf")
"""Formats :func:`run_dot` produces; ``"dot"`` text needs no binary."""

_INSTALL_HINT = (
    "Rendering images needs the Graphviz 'dot' program, which was not found on PATH. "
    "Install it with `apt-get install graphviz` (Debian/Ubuntu), `brew install graphviz` (macOS) "
    "or `conda install -c conda-forge graphviz`, or ask for format='dot' to get the DOT text instead."
)


def html_text(text: str, limit: int | None = 60) -> str:
    """Text for inside an HTML-like label."""
    return html.escape(visible(text, limit), quote=True)


def quoted(text: str, limit: int | None = None) -> str:
    """A DOT double-quoted string whose escString escapes show literally.

    ``&`` becomes ``&amp;``: Graphviz reads ``&#1;`` in any string as a character
    reference, and would write it into the SVG as an invalid character.
    """
    shown = visible(text, limit).replace("&", "&amp;").replace("\\", "\\\\").replace('"', '\\"')
    return f'"{shown}"'


def tooltip(*lines: str) -> str:
    """A quoted multi-line tooltip; ``\\n`` between the escaped lines is DOT's own newline."""
    body = "\\n".join(quoted(line, 300)[1:-1] for line in lines if line)
    return f'"{body}"'


class GraphvizNotFoundError(RuntimeError):
    """The Graphviz ``dot`` executable is not installed."""


def run_dot(source: str, fmt: str) -> bytes:
    """Lay out and draw DOT ``source`` as ``fmt`` (one of :data:`FORMATS`)."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown image format {fmt!r}; expected one of {', '.join(FORMATS)} or 'dot'")
    try:
        return graphviz.pipe("dot", fmt, source.encode("utf-8"), quiet=True)
    except graphviz.ExecutableNotFound:
        raise GraphvizNotFoundError(_INSTALL_HINT) from None
    except graphviz.CalledProcessError as e:
        stderr = (e.stderr or b"").decode("utf-8", "replace").strip()
        raise RuntimeError(f"Graphviz 'dot' failed (exit {e.returncode}): {stderr}") from None


_SVG_SIZE = re.compile(r'<svg width="[^"]*" height="[^"]*"')


def responsive_svg(svg: str) -> str:
    """The SVG scaled to its container's width (its viewBox keeps the aspect), so notebook
    front ends such as VS Code show it whole instead of cropping it at its point size."""
    return _SVG_SIZE.sub('<svg width="100%" style="max-width:100%;height:auto"', svg, count=1)
