"""The HTML viewer in real headless Chromium, driven by Playwright.

Needs Debian's ``chromium`` (/usr/bin/chromium), ``pip install playwright`` (no
``playwright install``: the system browser is used) and the built viewer bundle.
Screenshots land in ``test-artifacts/``.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch
import transformers
from _capture_helpers import load_coolcnn
from _viewer import HOSTILE, Hostile, Viewer

import torchatlas
from torchatlas._render import _html

pytestmark = pytest.mark.browser

@pytest.fixture(scope="module")
def coolcnn_ir():
    coolcnn = load_coolcnn()
    torch.manual_seed(0)
    return torchatlas.trace(coolcnn.CoolCNN(), coolcnn.example_input()).ir


@pytest.fixture(scope="module")
def llama_ir():
    cfg = transformers.AutoConfig.for_model(
        "llama", num_hidden_layers=2, hidden_size=64, intermediate_size=128,
        num_attention_heads=4, num_key_value_heads=4, vocab_size=1000,
    )
    torch.manual_seed(0)
    model = transformers.AutoModel.from_config(cfg).eval()
    return torchatlas.trace(model, (), kwargs={"input_ids": torch.randint(0, 1000, (1, 8))}).ir


def test_coolcnn_expand_collapse_search_and_details(browser, coolcnn_ir, tmp_path: Path) -> None:
    v = Viewer(browser, coolcnn_ir, tmp_path, "coolcnn")
    # Opens with the top level laid out; single-op modules stay closed boxes.
    assert v.count(".cluster") == 0
    modules = v.count(".unit.module")
    ops = v.count(".unit.op")
    assert modules == 8 and v.page.locator(".unit.module .title", has_text="initial_conv").count() == 1
    # Both branches reach the add: two edges end at it.
    add_id = v.page.locator(".unit.op", has=v.page.locator("text.title", has_text=re.compile(r"^add \(\+\)$"))).get_attribute("data-id")
    assert v.count(f'.edge[data-id$=">{add_id}"]') == 2

    v.click_and_relayout('.unit.module[data-id="s1"]')  # open initial_conv
    assert v.count(".cluster") == 1 and v.count(".unit.module") == modules - 1 and v.count(".unit.op") == ops + 1
    assert v.page.locator(".cluster .title").first.text_content().startswith("initial_conv")
    v.click_and_relayout(".cluster .header")  # and close it again
    assert v.count(".cluster") == 0 and v.count(".unit.module") == modules and v.count(".unit.op") == ops

    v.search("parallel_conv")
    rows = v.details()
    assert rows["class"] == "torch.nn.modules.conv.Conv2d" and rows["parameters"] == "448 params"

    v.search("conv2d")  # the first conv2d op: inside initial_conv, which the jump opens
    rows = v.details()
    assert rows["target"] == "torch.conv2d" and rows["module"] == "initial_conv"
    tensors = [" ".join(t.split()) for t in v.page.locator(".details .tensor-list li").all_text_contents()]
    assert any(t.startswith("args[0]") and "1×3×32×32 float32 cpu" in t for t in tensors)
    assert any(t.startswith("initial_conv.weight") and "16×3×3×3" in t for t in tensors)
    assert any("1×16×32×32 float32 cpu" in t for t in tensors[-1:])
    assert re.search(r"\.py:\d+$", v.page.locator(".details .source-loc").text_content())
    assert "self.initial_conv(x)" in v.page.locator(".details .source-code").text_content()
    # Selecting highlights the path through the node and dims the rest.
    assert v.count(".unit.selected") == 1 and v.count(".unit.lit") > 5
    assert v.page.evaluate("document.querySelector('svg.graph').classList.contains('has-selection')")
    v.screenshot("viewer-coolcnn")

    with v.page.expect_download() as download:
        v.page.click("button.export-svg")
    svg = ET.parse(download.value.path()).getroot()
    assert svg.tag.endswith("svg") and "conv2d" in "".join(svg.itertext())
    with v.page.expect_download() as download:
        v.page.click("button.export-png")
    assert Path(download.value.path()).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    theme = v.page.evaluate("document.documentElement.dataset.theme")
    v.page.click("button.theme")
    assert v.page.evaluate("document.documentElement.dataset.theme") != theme
    v.screenshot("viewer-coolcnn-theme")
    v.close()


def test_transformer_folds_repeats_and_expands_layers(browser, llama_ir, tmp_path: Path) -> None:
    v = Viewer(browser, llama_ir, tmp_path, "llama")
    fold = v.page.locator(".unit.module[data-id^=g]")
    assert fold.count() == 1 and fold.locator(".badge-text").text_content() == "×2"
    assert "layers.0–1" in fold.locator(".title").text_content()
    boxes = v.page.evaluate("window.__atlas.visibleBoxes")
    v.click_and_relayout(".unit.module[data-id^=g]")  # opens layers.0 in place, still marked ×2
    frame = v.page.locator(".cluster", has=v.page.locator(".fold-badge"))
    assert frame.count() == 1 and "layers.0–1" in frame.locator(".title").first.text_content()
    frame_id = frame.get_attribute("data-id")
    inside_fold = v.page.evaluate("window.__atlas.visibleBoxes")
    assert inside_fold > boxes + 5
    v.click_and_relayout(".cluster .fold-badge")  # unfold: layers.1 gets its own box
    assert v.count(".fold-badge") == 0 and v.count(".unit.module[data-id^=g]") == 0
    assert v.page.evaluate("window.__atlas.visibleBoxes") == inside_fold + 1
    layer_id = v.page.locator(".unit.module", has=v.page.locator("text.title", has_text=re.compile(r"^layers\.1$"))).get_attribute("data-id")
    v.bring_into_view(frame_id)
    v.click_and_relayout(f'.cluster[data-id="{frame_id}"] .header')  # close layers.0 again
    v.page.click("button.fit")
    v.page.wait_for_timeout(500)
    v.click_and_relayout(f'.unit.module[data-id="{layer_id}"]')  # open layers.1
    opened = v.page.evaluate("window.__atlas.visibleBoxes")
    assert opened == inside_fold + 1
    assert v.page.locator(".cluster .title", has_text="layers.1").count() >= 1
    v.search("scaled_dot_product_attention")
    rows = v.details()
    assert rows["class"].endswith("LlamaAttention") and rows["target"].endswith("scaled_dot_product_attention")
    assert any("1×4×8×16" in t for t in v.page.locator(".details .tensor-list li").all_text_contents())
    v.screenshot("viewer-llama-search")  # the README's docs/img/viewer.png (docs/pictures.py)
    v.page.click("button.expand-all")
    v.page.wait_for_function(f"() => window.__atlas.visibleBoxes > {opened}", timeout=60_000)
    v.screenshot("viewer-llama")
    v.close()


GEOMETRY = """() => {
  const a = window.__atlas.app;
  const box = (id) => a.result.boxes.get(id);
  return {
    leaves: [...a.graph.leaves.values()].map((l) => ({ id: l.id, container: l.container, modules: a.model.ancestry(l.container), first: l.first, box: box(l.id) })),
    frames: [...a.graph.containers.values()].map((c) => ({ idx: c.idx, parent: c.parent, depth: a.model.scopes[c.idx].depth, path: a.model.scopes[c.idx].path, box: box("c" + c.idx) })),
    edges: a.graph.drawn.map((e) => ({ id: e.id, source: e.source, target: e.target, points: a.result.routes.get(e.id) })),
  };
}"""


def _inside(inner: dict, outer: dict, slack: float = 0.5) -> bool:
    return (
        inner["x"] >= outer["x"] - slack and inner["y"] >= outer["y"] - slack
        and inner["x"] + inner["width"] <= outer["x"] + outer["width"] + slack
        and inner["y"] + inner["height"] <= outer["y"] + outer["height"] + slack
    )


def _on_border(p: dict, b: dict, slack: float = 1.0) -> bool:
    inside = _inside({"x": p["x"], "y": p["y"], "width": 0, "height": 0}, b, slack)
    near = min(abs(p["x"] - b["x"]), abs(p["x"] - b["x"] - b["width"]), abs(p["y"] - b["y"]), abs(p["y"] - b["y"] - b["height"]))
    return inside and near <= slack


def _check_geometry(g: dict) -> None:
    """Every box inside its module's frame, boxes side by side apart, every edge one orthogonal line between borders."""
    frames = {f["idx"]: f for f in g["frames"]}
    boxes = {leaf["id"]: leaf["box"] for leaf in g["leaves"]} | {f"c{i}": f["box"] for i, f in frames.items()}
    members: dict[int, list[dict]] = {i: [] for i in frames}
    for leaf in g["leaves"]:
        assert _inside(leaf["box"], frames[leaf["container"]]["box"]), leaf["id"]
        members[leaf["container"]].append(leaf["box"])
    for f in g["frames"]:
        if f["parent"] >= 0:
            assert _inside(f["box"], frames[f["parent"]]["box"]), f["path"]
            members[f["parent"]].append(f["box"])
    for group in members.values():
        for i, a in enumerate(group):
            for b in group[i + 1:]:
                overlap_x = min(a["x"] + a["width"], b["x"] + b["width"]) - max(a["x"], b["x"])
                overlap_y = min(a["y"] + a["height"], b["y"] + b["height"]) - max(a["y"], b["y"])
                assert overlap_x <= 0.5 or overlap_y <= 0.5, (a, b)
    assert g["edges"]
    for e in g["edges"]:
        points = e["points"]
        assert len(points) >= 2, e["id"]
        assert _on_border(points[0], boxes[e["source"]]) and _on_border(points[-1], boxes[e["target"]]), e["id"]
        for p, q in zip(points, points[1:]):
            assert abs(p["x"] - q["x"]) < 0.5 or abs(p["y"] - q["y"]) < 0.5, (e["id"], p, q)


def test_the_views_a_click_most_likely_asks_for_are_laid_out_ahead(browser, llama_ir, tmp_path: Path) -> None:
    """While the page waits for a click, its worker lays out the views a click most likely
    asks for (a fold opened in place and unfolded, the biggest closed modules opened): such a
    click takes every module's layout from the cache. Expand all is no such guess."""
    v = Viewer(browser, llama_ir, tmp_path, "llama-guesses")
    idle = "() => window.__atlas.layoutsPending() === 0"
    fresh = "window.__atlas.lastFreshLevels"
    v.page.wait_for_function(idle, timeout=60_000)
    v.click_and_relayout(".unit.module[data-id^=g]")  # the ×2 fold, opened in place
    assert v.page.evaluate(fresh) == 0
    v.page.wait_for_function(idle, timeout=60_000)  # the guesses made from the new view
    v.click_and_relayout(".cluster .fold-badge")  # unfolded
    assert v.page.evaluate(fresh) == 0
    v.click_and_relayout("button.expand-all")
    assert v.page.evaluate(fresh) > 0
    v.close()


def test_nested_modules_are_laid_out_as_one_consistent_picture(browser, llama_ir, tmp_path: Path) -> None:
    """Each opened module is laid out on its own and the layouts are composed: check the composition."""
    v = Viewer(browser, llama_ir, tmp_path, "llama-geometry")
    v.click_and_relayout(".unit.module[data-id^=g]")  # layers.0 open inside the ×2 frame, which sends the layers' output
    g = v.page.evaluate(GEOMETRY)
    assert any(e["source"][0] == "c" for e in g["edges"])
    _check_geometry(g)

    v.page.click("button.expand-all")  # also unfolds ×2: both layers open, every module nested inside
    v.page.wait_for_function("() => window.__atlas.app.graph.containers.size > 8", timeout=60_000)
    v.page.wait_for_timeout(300)
    g = v.page.evaluate(GEOMETRY)
    assert max(f["depth"] for f in g["frames"]) >= 3  # frames three deep
    _check_geometry(g)

    # The two decoder layers have the same shape, so they share one layout: same frame, same places inside.
    def inside_layer(path: str) -> list[tuple[float, float, float, float]]:
        frame = next(f for f in g["frames"] if f["path"].endswith(path))
        under = [leaf for leaf in g["leaves"] if frame["idx"] in leaf["modules"]]
        fb = frame["box"]
        return [(fb["width"], fb["height"])] + [
            (round(leaf["box"]["x"] - fb["x"], 1), round(leaf["box"]["y"] - fb["y"], 1)) for leaf in sorted(under, key=lambda leaf: leaf["first"])
        ]

    assert inside_layer("layers.0") == inside_layer("layers.1")
    v.close()


def test_hostile_module_name_shows_literally_and_never_runs(browser, tmp_path: Path) -> None:
    ir = torchatlas.trace(Hostile(), torch.randn(1, 4)).ir
    v = Viewer(browser, ir, tmp_path, "hostile")
    titles = v.page.locator(".unit .title").all_text_contents()
    assert HOSTILE in titles
    v.search("alert")
    assert v.page.locator(".details h3").first.text_content() == HOSTILE
    assert v.page.evaluate("document.querySelectorAll('script').length") == 2
    v.close()  # asserts no dialog opened and no console error


def test_viewer_lays_out_without_web_workers(browser, llama_ir, tmp_path: Path) -> None:
    """Where a page may not start workers, ELK runs on the page's own thread instead."""
    v = Viewer(browser, llama_ir, tmp_path, "no-workers", init_script="window.Worker = function () { throw new Error('refused'); };")
    boxes = v.page.evaluate("window.__atlas.visibleBoxes")
    v.click_and_relayout(".unit.module[data-id^=g]")
    assert v.count(".cluster") >= 2 and v.page.evaluate("window.__atlas.visibleBoxes") > boxes
    v.close()


def test_notebook_iframe_runs_the_viewer(browser, coolcnn_ir, tmp_path: Path) -> None:
    host = tmp_path / "notebook.html"
    host.write_text(f"<!DOCTYPE html><html><body>{_html.notebook_html(coolcnn_ir)}</body></html>", encoding="utf-8")
    context = browser.new_context()
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(host.as_uri())
    frame = page.frame_locator("iframe")
    frame.locator(".unit.module").first.wait_for(timeout=60_000)
    assert frame.locator(".unit").count() > 10
    assert errors == []
    context.close()


def test_left_to_right_layout_keeps_the_picture_consistent(browser, llama_ir, tmp_path: Path) -> None:
    """The direction button lays every level out left to right: values flow along x, frames still compose."""
    v = Viewer(browser, llama_ir, tmp_path, "llama-left-to-right")
    v.click_and_relayout("button.direction")
    assert v.page.get_attribute("button.direction", "aria-pressed") == "true"
    flow = """() => { const a = window.__atlas.app; const b = (id) => a.result.boxes.get(id);
      return a.graph.drawn.filter((e) => a.graph.leaves.has(e.source) && a.graph.leaves.has(e.target))
        .map((e) => [b(e.source), b(e.target)]); }"""
    pairs = v.page.evaluate(flow)
    assert pairs and all(t["x"] >= s["x"] + s["width"] - 0.5 for s, t in pairs)  # every edge runs rightwards
    _check_geometry(v.page.evaluate(GEOMETRY))
    v.click_and_relayout("button.expand-all")
    g = v.page.evaluate(GEOMETRY)
    assert max(f["depth"] for f in g["frames"]) >= 3
    _check_geometry(g)
    v.screenshot("viewer-llama-left-to-right")
    v.click_and_relayout("button.direction")  # and back to top to bottom
    assert all(t["y"] >= s["y"] + s["height"] - 0.5 for s, t in v.page.evaluate(flow))
    v.close()
