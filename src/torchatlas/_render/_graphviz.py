"""Running Graphviz's ``dot`` on DOT text (through the ``graphviz`` package)."""

from __future__ import annotations

import graphviz

FORMATS: tuple[str, ...] = ("svg", "png", "pdf")
"""Formats :func:`run_dot` produces; ``"dot"`` text needs no binary."""

_INSTALL_HINT = (
    "Rendering images needs the Graphviz 'dot' program, which was not found on PATH. "
    "Install it with `apt-get install graphviz` (Debian/Ubuntu), `brew install graphviz` (macOS) "
    "or `conda install -c conda-forge graphviz`, or ask for format='dot' to get the DOT text instead."
)


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
