"""The viewer on a graph much larger than the window, in real headless Chromium.

Off-screen boxes, frames and edges are culled (not drawn) so that a pan repaints
only what is near the view (see web/src/cull.js). Checked here: after Expand all,
boxes far off screen are not displayed, everything that meets the view is, and
panning (real drags) and zooming (the wheel) bring the culled ones back.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from _viewer import Viewer
from torch import nn

import torchatlas

pytestmark = pytest.mark.browser


class _Tall(nn.Module):
    """40 residual blocks: unfolded and opened, a graph many windows tall."""

    def __init__(self, blocks: int = 40) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.LayerNorm(8)) for _ in range(blocks))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x) + x
        return x


# Every box, frame and edge with its place in graph coordinates (an edge: its route's bounding box),
# split into: meets the view and drawn, meets the view and NOT drawn, and not drawn (culled).
MEASURE = """() => {
  const a = __atlas.app, view = a.viewport.view();
  const meets = (r) => r.x < view.x + view.width && view.x < r.x + r.width && r.y < view.y + view.height && view.y < r.y + r.height;
  const drawn = (e) => getComputedStyle(e).display !== "none";
  const items = [];
  for (const [id, b] of a.result.boxes) if (id !== "c0") items.push([id, b, document.querySelector(`.unit[data-id="${id}"], .cluster[data-id="${id}"]`)]);
  for (const [id, [g]] of a.renderer.edgeEls) {
    const pts = a.result.routes.get(id), xs = pts.map((p) => p.x), ys = pts.map((p) => p.y);
    const x = Math.min(...xs), y = Math.min(...ys);
    items.push([id, { x, y, width: Math.max(...xs) - x, height: Math.max(...ys) - y }, g]);
  }
  const out = { shown: [], missing: [], culled: [], total: items.length };
  for (const [id, r, e] of items) {
    if (!drawn(e)) out.culled.push(id);
    if (meets(r)) (drawn(e) ? out.shown : out.missing).push(id);
  }
  return out;
}"""


def _measure(v: Viewer, where: str) -> dict:
    m = v.page.evaluate(MEASURE)
    assert m["missing"] == [], f"{where}: culled although in view: {m['missing'][:10]}"
    assert len(m["shown"]) >= 5, f"{where}: only {m['shown']} in view"
    return m


def _drag(v: Viewer, dx: float, dy: float) -> None:
    stage = v.page.locator("svg.graph").bounding_box()
    x, y = stage["x"] + stage["width"] / 2, stage["y"] + stage["height"] / 2
    v.page.mouse.move(x, y)
    v.page.mouse.down()
    v.page.mouse.move(x + dx, y + dy, steps=8)
    v.page.mouse.up()


def test_off_screen_boxes_are_culled_and_come_back_when_panned_or_zoomed_to(browser, tmp_path: Path) -> None:
    ir = torchatlas.trace(_Tall(), torch.randn(2, 8)).ir
    v = Viewer(browser, ir, tmp_path, "scale-cull")
    v.click_and_relayout("button.expand-all")
    boxes = v.page.evaluate("__atlas.visibleBoxes")
    assert boxes > 150
    v.page.evaluate("() => __atlas.app.viewport.moveTo(20, 20, 1, false)")  # 100 %, at the top of the graph
    m = _measure(v, "top at 100 %")
    # Most of the graph is far below the window and not drawn.
    assert len(m["culled"]) > 0.6 * m["total"], m

    # A relu four windows below: culled now; drag the view up until it is in the window.
    target = v.page.evaluate(
        """() => [...__atlas.app.result.boxes].filter(([id]) => document.querySelector(`.unit.op[data-id='${id}'] .title`)?.textContent === 'relu')
          .sort(([, a], [, b]) => a.y - b.y).find(([, b]) => b.y > 4 * innerHeight)[0]"""
    )
    assert target in m["culled"]
    on_screen = """(id) => {
      const g = document.querySelector(`.unit[data-id="${id}"]`), s = document.querySelector("svg.graph").getBoundingClientRect();
      const r = g.querySelector(".box").getBoundingClientRect();
      return getComputedStyle(g).display !== "none" && s.top < r.top && r.bottom < s.bottom && s.left < r.left && r.right < s.right;
    }"""
    assert not v.page.evaluate(on_screen, target)
    for step in range(40):
        if v.page.evaluate(on_screen, target):
            break
        _drag(v, 0, -600)
        _measure(v, f"after drag {step + 1}")
    else:
        pytest.fail(f"{target} never came into view")
    v.page.locator(f'.unit[data-id="{target}"]').click()  # drawn where it is, so a real click reaches it
    assert v.page.locator(".details h3").first.text_content() == "relu"
    v.screenshot("scale-panned")

    # Zoomed out with the wheel, the boxes around come back, op names go (level of detail).
    v.page.keyboard.press("Escape")
    stage = v.page.locator("svg.graph").bounding_box()
    v.page.mouse.move(stage["x"] + stage["width"] / 2, stage["y"] + stage["height"] / 2)
    for _ in range(4):
        v.page.mouse.wheel(0, 200)
    v.page.wait_for_timeout(200)
    assert v.page.evaluate("__atlas.app.viewport.k") < 0.45
    zoomed = _measure(v, "zoomed out")
    assert len(zoomed["shown"]) > len(m["shown"])
    assert v.page.evaluate("getComputedStyle(document.querySelector('.unit.op:not(.culled) .title')).display") == "none"

    # An export is the whole graph, culled boxes and dropped names included.
    with v.page.expect_download() as download:
        v.page.click("button.export-svg")
    exported = Path(download.value.path()).read_text(encoding="utf-8")
    assert not re.search(r'class="[^"]*\b(culled|lod-)', exported)
    assert len(re.findall(r'<g class="unit ', exported)) == boxes
    v.close()
