"""What the HTML-viewer tests and ``bench/bench_html.py`` share: the Chromium they drive and how a page is opened.

Playwright is imported only by :func:`chromium_browser`; the rest takes its objects
as arguments, so importing this module never needs it (the tests skip without it).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from torchatlas._render import _html

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


ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
"""Where the browser tests leave their screenshots."""


def chromium_browser() -> Iterator[Any]:
    """A started headless Chromium for a pytest fixture; skips without Playwright, Chromium or the bundle."""
    import pytest

    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    if not Path(CHROMIUM).exists():
        pytest.skip("no Chromium at /usr/bin/chromium (apt-get install chromium)")
    if not (_html.BUNDLE_DIR / "viewer.js").is_file():
        pytest.skip("viewer bundle not built: run `cd web && npm ci && npm run build`")
    with sync_api.sync_playwright() as p:
        b = launch_chromium(p)
        yield b
        b.close()


def launch_chromium(playwright: Any) -> Any:
    """A headless system Chromium from a started ``sync_playwright()``."""
    return playwright.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)


def open_viewer(page: Any, path: Path, timeout_ms: int) -> None:
    """Load a saved torchatlas page and wait for its first layout; raise with the page's own error if it failed."""
    page.goto(path.as_uri())
    page.wait_for_function("() => window.__atlas && (window.__atlas.ready || window.__atlas.error)", timeout=timeout_ms)
    error = page.evaluate("window.__atlas.error")
    if error is not None:
        raise RuntimeError(f"the viewer failed to open {path.name}: {error}")



class Viewer:
    """One opened page, with the console watched for errors and dialogs."""

    def __init__(
        self, browser, ir, tmp_path: Path, name: str, init_script: str | None = None, viewport: dict | None = None, options=None
    ) -> None:
        path = tmp_path / f"{name}.html"
        path.write_text(_html.to_html(ir, options), encoding="utf-8")
        self.context = browser.new_context(viewport=viewport or VIEWPORT, accept_downloads=True)
        if init_script:
            self.context.add_init_script(init_script)
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        open_viewer(self.page, path, timeout_ms=60_000)

    def count(self, selector: str) -> int:
        return self.page.locator(selector).count()

    def click_and_relayout(self, selector: str) -> None:
        before = self.page.evaluate("window.__atlas.layoutCount")
        self.page.locator(selector).first.click()
        self.page.wait_for_function(f"() => window.__atlas.layoutCount > {before}", timeout=60_000)
        self.page.wait_for_timeout(600)  # let the re-layout animation settle

    def bring_into_view(self, unit_id: str) -> None:
        """Center the view on a box or a module frame's title bar, as a user would pan to it before clicking."""
        self.page.evaluate(
            "id => { const a = window.__atlas.app; const b = a.result.boxes.get(id); a.viewport.centerOn({...b, height: 30}); }",
            unit_id,
        )
        self.page.wait_for_timeout(500)  # the view glides there

    def search(self, text: str) -> None:
        before = self.page.evaluate("window.__atlas.layoutCount")
        self.page.fill(".search input", text)
        self.page.locator(".search-results li.hit").first.click()
        self.page.wait_for_function(f"() => window.__atlas.layoutCount > {before}", timeout=60_000)

    def details(self) -> dict[str, str]:
        """The details panel's rows (label -> value) and its tensor lists."""
        rows = self.page.eval_on_selector_all(
            ".details dl", "els => els.flatMap(dl => [...dl.querySelectorAll('dt')].map(dt => [dt.textContent, dt.nextElementSibling.textContent]))"
        )
        return dict(rows)

    def screenshot(self, name: str) -> Path:
        ARTIFACTS.mkdir(exist_ok=True)
        out = ARTIFACTS / f"{name}.png"
        self.page.wait_for_timeout(700)  # boxes glide and edges fade in after a re-layout
        self.page.screenshot(path=str(out))
        return out

    def close(self) -> None:
        assert self.errors == [], self.errors
        assert self.dialogs == []
        self.context.close()


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
