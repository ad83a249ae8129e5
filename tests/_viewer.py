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


class _DoubleConv(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(), nn.Conv2d(cout, cout, 3, padding=1), nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


class _Up(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.up = nn.ConvTranspose2d(cin, cin // 2, 2, stride=2)
        self.block = _DoubleConv(cin, cout)

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        return self.block(torch.cat([skip, self.up(x)], dim=1))


class UNet(nn.Module):
    """A small two-level UNet: the encoder's outputs reach the decoder through ``cat`` skips."""

    def __init__(self) -> None:
        super().__init__()
        self.inc = _DoubleConv(3, 8)
        self.down1 = nn.Sequential(nn.MaxPool2d(2), _DoubleConv(8, 16))
        self.down2 = nn.Sequential(nn.MaxPool2d(2), _DoubleConv(16, 32))
        self.up1 = _Up(32, 16)
        self.up2 = _Up(16, 8)
        self.outc = nn.Conv2d(8, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x1 = self.inc(x)
        x2 = self.down1(x1)
        x3 = self.down2(x2)
        return self.outc(self.up2(self.up1(x3, x2), x1))


def transformer(kind: str) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """A 2-layer ``llama`` or ``t5`` from its transformers config, random weights, and its keyword inputs."""
    import transformers

    torch.manual_seed(0)
    ids = torch.randint(0, 1000, (1, 8))
    if kind == "llama":
        cfg = transformers.AutoConfig.for_model(
            "llama", num_hidden_layers=2, hidden_size=64, intermediate_size=128,
            num_attention_heads=4, num_key_value_heads=4, vocab_size=1000,
        )
        return transformers.AutoModel.from_config(cfg).eval(), {"input_ids": ids}
    cfg = transformers.AutoConfig.for_model(
        "t5", num_layers=2, num_decoder_layers=2, d_model=64, d_ff=128, num_heads=4, d_kv=16, vocab_size=1000,
    )
    return transformers.T5Model(cfg).eval(), {"input_ids": ids, "decoder_input_ids": ids[:, :4]}
