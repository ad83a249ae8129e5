"""What the HTML-viewer tests and ``bench/bench_html.py`` share: the Chromium they drive and how a page is opened.

Playwright is not imported here: callers pass in its objects, so that importing this
module never needs it (the tests skip without it).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import torch
from torch import nn

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
"""Debian's ``chromium``: no ``playwright install`` download is needed."""

LAUNCH_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
VIEWPORT = {"width": 1400, "height": 900}

HOSTILE = "</script><script>alert(1)</script>"


class Hostile(nn.Module):
    """A Linear whose module name would end the page's script if it were not escaped."""

    def __init__(self) -> None:
        super().__init__()
        self.add_module(HOSTILE, nn.Linear(4, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return getattr(self, HOSTILE)(x).relu()


def launch_chromium(playwright: Any) -> Any:
    """A headless system Chromium from a started ``sync_playwright()``."""
    return playwright.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)


def open_viewer(page: Any, path: Path, timeout_ms: int) -> None:
    """Load a saved torchatlas page and wait for its first layout; raise with the page's own error if it failed."""
    page.goto(path.as_uri())
    page.wait_for_function("window.__atlas && (window.__atlas.ready || window.__atlas.error)", timeout=timeout_ms)
    error = page.evaluate("window.__atlas.error")
    if error is not None:
        raise RuntimeError(f"the viewer failed to open {path.name}: {error}")
