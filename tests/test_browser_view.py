"""The viewer's first view and its picture, measured in real headless Chromium.

On the first view and after Fit, for CoolCNN, a UNet, T5 and a 2-layer Llama: the
top level is in the window, no panel covers a box, and no two labels overlap.
Screenshots land in ``test-artifacts/``.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import torch
from _capture_helpers import load_coolcnn
from _viewer import ARTIFACTS, CHROMIUM, LAUNCH_ARGS, UNet, Viewer, transformer
from torch import nn

import torchatlas
from torchatlas._render import _html

pytestmark = pytest.mark.browser

NOTEBOOK = {"width": 900, "height": 640}


def _trace(name: str):
    torch.manual_seed(0)
    if name == "coolcnn":
        coolcnn = load_coolcnn()
        return torchatlas.trace(coolcnn.CoolCNN(), coolcnn.example_input()).ir
    if name == "unet":
        return torchatlas.trace(UNet(), torch.randn(1, 3, 32, 32)).ir
    model, kwargs = transformer(name)
    return torchatlas.trace(model, (), kwargs=kwargs).ir


@pytest.fixture(scope="module", params=["coolcnn", "unet", "t5", "llama"])
def model_ir(request):
    return request.param, _trace(request.param)


# Screen rectangles of what is on the page: the graph's area, the top-level boxes, every
# box and frame, the panels, and every text label the browser draws (hidden ones have no box).
MEASURE = """() => {
  const a = window.__atlas.app;
  const rect = (e) => { const r = e.getBoundingClientRect(); return { x: r.x, y: r.y, w: r.width, h: r.height }; };
  const shape = (id) => document.querySelector(`[data-id="${id}"] > .box, [data-id="${id}"] > .frame`);
  const visible = (e) => e && e.getClientRects().length > 0 && getComputedStyle(e).visibility !== "hidden";
  const labels = [...document.querySelectorAll("svg.graph text")].filter(visible).map((t) => ({ text: t.textContent, ...rect(t) }));
  return {
    stage: rect(document.querySelector("svg.graph")),
    top: a.graph.containers.get(0).children.map((id) => ({ id, ...rect(shape(id)) })),
    boxes: [...document.querySelectorAll("svg.graph .unit > .box, svg.graph .cluster > .frame")].map((e) => ({ id: e.parentNode.dataset.id, ...rect(e) })),
    panels: [".legend", ".status", ".minimap-box", ".details", ".notice", ".search-results"]
      .flatMap((s) => [...document.querySelectorAll(s)]).filter(visible).map((e) => ({ panel: e.className, ...rect(e) })),
    labels,
  };
}"""


def _clip(r: dict, to: dict) -> dict | None:
    x0, y0 = max(r["x"], to["x"]), max(r["y"], to["y"])
    x1, y1 = min(r["x"] + r["w"], to["x"] + to["w"]), min(r["y"] + r["h"], to["y"] + to["h"])
    return {**r, "x": x0, "y": y0, "w": x1 - x0, "h": y1 - y0} if x1 > x0 and y1 > y0 else None


def _overlap(a: dict, b: dict, slack: float = 0.5) -> bool:
    return min(a["x"] + a["w"], b["x"] + b["w"]) - max(a["x"], b["x"]) > slack and min(a["y"] + a["h"], b["y"] + b["h"]) - max(a["y"], b["y"]) > slack


def _check_view(m: dict, where: str) -> None:
    stage = m["stage"]
    inside = [b for b in m["top"] if _clip(b, stage) == {**b}]
    assert len(inside) >= 0.9 * len(m["top"]), f"{where}: only {len(inside)} of {len(m['top'])} top-level boxes in the window"
    shown = [c for b in m["boxes"] if (c := _clip(b, stage))]
    for panel in m["panels"]:
        covered = [b["id"] for b in shown if _overlap(panel, b)]
        assert not covered, f"{where}: {panel['panel']} covers {covered}"
    labels = [c for t in m["labels"] if (c := _clip(t, stage))]
    for i, a in enumerate(labels):
        for b in labels[i + 1:]:
            assert not _overlap(a, b), f"{where}: labels {a['text']!r} and {b['text']!r} overlap"


@pytest.mark.parametrize("frame", [None, NOTEBOOK], ids=["window", "notebook"])
def test_first_view_and_fit_show_the_top_level_uncovered_and_legible(browser, model_ir, frame, tmp_path: Path) -> None:
    name, ir = model_ir
    tag = f"view-{name}-{'notebook' if frame else 'window'}"
    v = Viewer(browser, ir, tmp_path, tag, viewport=frame)
    v.page.wait_for_timeout(400)
    if frame:  # a notebook-width frame keeps the details panel closed until something is clicked
        assert v.count(".details.closed") == 1
    _check_view(v.page.evaluate(MEASURE), f"{tag} first view")
    v.screenshot(tag)
    v.page.mouse.move(300, 300)
    for _ in range(3):  # zoom in, then Fit again
        v.page.mouse.wheel(0, -400)
    v.page.click("button.fit")
    v.page.wait_for_timeout(700)
    _check_view(v.page.evaluate(MEASURE), f"{tag} after Fit")
    if frame:  # a click on an op opens the panel
        v.page.locator(".unit.op").first.click()
        assert v.count(".details.closed") == 0 and v.count(".details dl") > 0
    v.close()


def test_leaf_modules_take_their_ops_colour(browser, tmp_path: Path) -> None:
    v = Viewer(browser, _trace("coolcnn"), tmp_path, "colours")
    category = v.page.locator('.unit.module', has=v.page.locator("text.title", has_text="initial_conv")).get_attribute("data-category")
    pool = v.page.locator('.unit.module', has=v.page.locator("text.title", has_text="max_pool#1")).get_attribute("data-category")
    assert (category, pool) == ("compute", "reduction")
    fill = v.page.evaluate("getComputedStyle(document.querySelector('.unit.module[data-category=compute] .box')).fill")
    op_fill = v.page.evaluate("getComputedStyle(document.querySelector('.unit.op[data-category=elementwise] .box')).fill")
    assert fill != op_fill and fill not in ("rgb(255, 255, 255)", "none")
    v.close()


def test_headless_screenshot_paints_without_a_worker(tmp_path: Path) -> None:
    """`chromium --headless --screenshot` runs on virtual time, where the layout worker never answers."""
    if not Path(CHROMIUM).exists() or not (_html.BUNDLE_DIR / "viewer.js").is_file():
        pytest.skip("needs Chromium and the viewer bundle")
    page = tmp_path / "page.html"
    page.write_text(_html.to_html(_trace("coolcnn")), encoding="utf-8")
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "view-headless-screenshot.png"
    common = [CHROMIUM, "--headless", *LAUNCH_ARGS, "--window-size=1200,900", "--virtual-time-budget=15000"]
    subprocess.run([*common, f"--screenshot={shot}", page.as_uri()], check=True, capture_output=True, timeout=120)
    assert shot.stat().st_size > 20_000
    dom = subprocess.run([*common, "--dump-dom", page.as_uri()], check=True, capture_output=True, text=True, timeout=120).stdout
    assert dom.count('class="unit ') >= 15 and 'class="edge"' in dom


class _Named(nn.Module):
    """A Linear under a module name chosen by the test."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.add_module(name, nn.Linear(4, 4))
        self.name = name

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return getattr(self, self.name)(x).relu()


def test_page_works_under_its_content_security_policy(browser, tmp_path: Path) -> None:
    """The page's own policy allows only its hashed script and style: no violation, layouts in a worker."""
    watch = "window.__csp = []; document.addEventListener('securitypolicyviolation', (e) => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));"
    v = Viewer(browser, _trace("llama"), tmp_path, "csp", init_script=watch)
    policy = v.page.get_attribute('meta[http-equiv="Content-Security-Policy"]', "content")
    assert "script-src 'sha256-" in policy and "unsafe" not in policy and "default-src 'none'" in policy
    assert v.page.evaluate("window.__atlas.engine") == "worker"
    v.click_and_relayout(".unit.module[data-id^=g]")
    v.page.click("button.theme")
    with v.page.expect_download() as download:
        v.page.click("button.export-png")
    assert Path(download.value.path()).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert v.count(".unit") > 20
    assert v.page.evaluate("window.__csp") == []
    v.screenshot("view-csp")
    v.close()  # and no console error (a refused script or style would log one)


def test_bidi_overrides_show_escaped_and_huge_names_stay_small(browser, tmp_path: Path) -> None:
    for name, shown in [("evil\u202egnp_exe", "evil\\u202egnp_exe"), ("m" * 1_000_000, "m" * 47 + "…")]:
        v = Viewer(browser, torchatlas.trace(_Named(name), torch.randn(1, 4)).ir, tmp_path, "names")
        box = v.page.locator(".unit.module").first
        assert box.locator(".title").text_content() == shown
        assert v.page.evaluate("[...document.querySelectorAll('svg text')].every((t) => !/[\\u202a-\\u202e\\u2066-\\u2069]/.test(t.textContent))")
        widths = v.page.evaluate("[...window.__atlas.app.result.boxes.values()].map((b) => b.width)")
        assert max(widths) < 1000  # (48 wide letters at most)
        v.close()


def test_opening_is_not_selecting_escape_clears_and_search_rows_are_distinct(browser, tmp_path: Path) -> None:
    v = Viewer(browser, _trace("coolcnn"), tmp_path, "select")
    has_selection = "() => document.querySelector('svg.graph').classList.contains('has-selection')"
    v.click_and_relayout('.unit.module[data-id="s1"]')  # open initial_conv: the panel describes it, nothing is lit
    assert not v.page.evaluate(has_selection) and v.details()["class"].endswith("Conv2d")

    # Selecting the add lights its upstream (the input, both branches) and downstream (the output) cone.
    v.page.locator(".unit.op", has=v.page.locator("text.title", has_text="add")).first.click()
    assert v.page.evaluate(has_selection)
    lit = v.page.evaluate("() => [...document.querySelectorAll('.unit.lit .title')].map((t) => t.textContent)")
    assert {"x", "parallel_conv", "max_pool#1", "output"} <= set(lit)
    v.screenshot("view-path-highlight")
    v.page.keyboard.press("Escape")
    assert not v.page.evaluate(has_selection) and v.count(".unit.selected") == 0

    v.page.fill(".search input", "relu")
    rows = v.page.locator(".search-results li.hit").all_text_contents()
    assert len(rows) == len(set(rows)) and any("×" in r for r in rows)
    count = v.page.locator(".search-results li.search-count").text_content()
    assert count == "4 matches in 1 row" and rows[0].startswith("torch.relu×4")
    v.screenshot("view-search")
    v.close()


def test_params_toggle_redraws_box_text_tooltips_and_f_fits(browser, tmp_path: Path) -> None:
    v = Viewer(browser, _trace("coolcnn"), tmp_path, "params")
    param_legend = v.page.locator('.legend-item[data-category="param"]')
    assert not param_legend.is_visible()  # the legend names only what is drawn
    v.click_and_relayout('.unit.module[data-id="s1"]')  # initial_conv open: its conv2d lists the weights it reads
    conv = v.page.locator(".unit.op", has=v.page.locator("text.title", has_text="conv2d")).first
    assert conv.locator(".subtitle").text_content().startswith("W 16×3×3×3")
    assert "torch.conv2d" in conv.locator("title").text_content() and "1×16×32×32" in conv.locator("title").text_content()
    v.click_and_relayout(".check.params input")  # params as boxes: the op's box no longer lists them
    conv = v.page.locator(".unit.op", has=v.page.locator("text.title", has_text="conv2d")).first
    assert conv.locator(".subtitle").count() == 0 and v.count(".unit[data-category=param]") >= 2
    assert param_legend.is_visible()
    v.page.locator(".unit.op").first.click()  # the panel names inputs without internal ids
    assert not any(re.search(r"\(n\d+\)", t) for t in v.page.locator(".details .tensor-name").all_text_contents())
    v.page.mouse.move(300, 300)
    v.page.mouse.wheel(0, -600)
    v.page.wait_for_timeout(300)
    v.page.keyboard.press("f")
    v.page.wait_for_timeout(600)
    _check_view(v.page.evaluate(MEASURE), "after f")
    v.close()


def test_the_first_view_follows_the_view_options(browser, tmp_path: Path) -> None:
    """``to_html(depth=, fold_repeats=, direction=)`` set the page's first view,
    as they set the diagram's: the page keeps no defaults of its own for them."""
    options = _html.HtmlOptions(depth=1, fold_repeats=False, direction="LR")
    v = Viewer(browser, _trace("llama"), tmp_path, "view-options", options=options)
    state = v.page.evaluate(
        "() => { const a = window.__atlas.app, m = a.model; return {direction: a.direction, folded: m.folded.size,"
        " open: [...m.expanded].map((s) => m.scopes[s].depth)}; }"
    )
    assert state["direction"] == "RIGHT" and state["folded"] == 0 and set(state["open"]) == {0}
    assert v.page.locator("button.direction").text_content() == "⇢"
    v.close()
    v = Viewer(browser, _trace("llama"), tmp_path, "view-defaults")
    assert v.page.evaluate("() => window.__atlas.app.direction") == "DOWN" and v.page.evaluate("() => window.__atlas.app.model.folded.size") > 0
    v.close()


def test_opening_a_module_scrolls_what_it_opened_into_view(browser, tmp_path: Path) -> None:
    v = Viewer(browser, _trace("llama"), tmp_path, "open-scroll", viewport=NOTEBOOK)
    frame_id = "c" + v.page.locator(".unit.module[data-id^=g]").get_attribute("data-id")[1:]
    v.click_and_relayout(".unit.module[data-id^=g]")
    stage = v.page.evaluate("() => { const r = document.querySelector('svg.graph').getBoundingClientRect(); return {x: r.x, y: r.y, w: r.width, h: r.height}; }")
    frame = v.page.locator(f'.cluster[data-id="{frame_id}"] > .frame').bounding_box()
    assert stage["y"] <= frame["y"] and frame["x"] >= stage["x"]  # its title bar is on screen...
    assert frame["y"] + min(frame["height"], stage["h"] - 48) <= stage["y"] + stage["h"]  # ...and as much of it as fits
    v.screenshot("view-open-scroll")
    v.close()


def test_shift_click_lights_the_paths_between_two_boxes(browser, tmp_path: Path) -> None:
    v = Viewer(browser, _trace("coolcnn"), tmp_path, "paths")
    box = lambda title: v.page.locator(".unit", has=v.page.locator("text.title", has_text=re.compile(f"^{re.escape(title)}$"))).first  # noqa: E731
    box("x").click()
    box("add (+)").click(modifiers=["Shift"])
    lit = set(v.page.evaluate("() => [...document.querySelectorAll('.unit.lit .title')].map((t) => t.textContent)"))
    assert {"x", "initial_conv", "parallel_conv", "max_pool", "max_pool#1", "add (+)"} <= lit
    assert not lit & {"truediv (/)", "secondary_conv", "output"}
    assert v.count(".unit.selected") == 2 and v.count(".edge.lit") == 8 and v.count(".edge-label.lit") >= 4
    v.screenshot("view-two-node-paths")
    v.close()


def test_depth_menu_follows_the_frames_on_screen(browser, tmp_path: Path) -> None:
    v = Viewer(browser, _trace("llama"), tmp_path, "depth", viewport=NOTEBOOK)
    depth = lambda: int(v.page.input_value("select"))  # noqa: E731
    deepest = lambda: v.page.evaluate("() => Math.max(...[...window.__atlas.app.graph.containers.keys()].map((c) => window.__atlas.app.model.scopes[c].depth)) + 1")  # noqa: E731
    assert depth() == deepest()
    start = depth()
    frame_id = "c" + v.page.locator(".unit.module[data-id^=g]").get_attribute("data-id")[1:]
    v.click_and_relayout(".unit.module[data-id^=g]")
    inner = v.page.evaluate(f"() => [...window.__atlas.app.graph.leaves.values()].find((l) => l.container === {frame_id[1:]} && l.id[0] === 's').id")
    v.bring_into_view(inner)
    v.click_and_relayout(f'.unit.module[data-id="{inner}"]')  # a module inside the layer
    assert depth() == deepest() > start
    v.bring_into_view(frame_id)
    v.click_and_relayout(f'.cluster[data-id="{frame_id}"] > .header')  # close the layer: what it held is off screen
    assert depth() == deepest() == start
    v.close()


def test_keyboard_moves_along_edges_opens_with_enter_and_shows_help(browser, tmp_path: Path) -> None:
    v = Viewer(browser, _trace("coolcnn"), tmp_path, "keys")
    v.page.locator(".unit", has=v.page.locator("text.title", has_text=re.compile("^x$"))).first.click()
    v.page.keyboard.press("ArrowDown")  # to the first reader of the input: initial_conv
    assert v.page.locator(".details h3").first.text_content() == "initial_conv"
    before = v.page.evaluate("window.__atlas.layoutCount")
    v.page.keyboard.press("Enter")  # opens it
    v.page.wait_for_function(f"() => window.__atlas.layoutCount > {before}")
    assert v.count('.cluster[data-id="c1"]') == 1
    v.page.keyboard.press("ArrowUp")
    assert v.page.locator(".details h3").first.text_content() == "x"
    v.page.keyboard.press("?")
    assert v.page.locator(".help").is_visible() and "Enter" in v.page.locator(".help").text_content()
    v.screenshot("view-keyboard-help")
    v.page.keyboard.press("Escape")
    assert not v.page.locator(".help").is_visible() and v.count(".unit.selected") == 0
    v.close()


def test_details_copy_path_source_and_shapes(browser, tmp_path: Path) -> None:
    v = Viewer(browser, _trace("coolcnn"), tmp_path, "copy")
    v.context.grant_permissions(["clipboard-read", "clipboard-write"])
    v.search("conv2d")  # the first conv2d, inside initial_conv
    copied = {}
    buttons = v.page.locator(".details .actions.copy button")
    assert buttons.all_text_contents() == ["Copy path", "Copy source", "Copy shapes"]
    for i, what in enumerate(("path", "source", "shapes")):
        buttons.nth(i).click()
        v.page.wait_for_function("(i) => document.querySelectorAll('.details .actions.copy button')[i].textContent === 'Copied ✓'", arg=i)
        copied[what] = v.page.evaluate("() => navigator.clipboard.readText()")
        if what == "path":
            v.screenshot("view-copy")  # the path copied, the other buttons saying what they copy
    assert copied["path"] == "initial_conv"
    assert re.search(r"_example\.py:\d+\n.*self\.initial_conv\(x\)", copied["source"])
    assert "inputs" in copied["shapes"] and "1×3×32×32  float32  cpu" in copied["shapes"] and "outputs" in copied["shapes"]
    v.close()


def test_search_by_regex_and_by_shape(browser, tmp_path: Path) -> None:
    v = Viewer(browser, _trace("coolcnn"), tmp_path, "search-more")
    rows = lambda: [" ".join(r.split()) for r in v.page.locator(".search-results li.hit").all_text_contents()]  # noqa: E731
    v.page.fill(".search input", "/^(initial|parallel)_conv$/")
    assert sorted(r.split("Conv2d")[0] for r in rows()) == ["initial_conv", "parallel_conv"]
    v.page.fill(".search input", "/[/")  # half-typed: no rows, no error
    assert rows() == []
    v.page.fill(".search input", "1x32x8x8")  # the output of the last pooling
    assert any("max_pool2d" in r for r in rows())
    v.close()


def test_overlay_colours_boxes_by_flops_with_a_scale(browser, tmp_path: Path) -> None:
    v = Viewer(browser, _trace("coolcnn"), tmp_path, "overlay")
    fill = lambda title: v.page.evaluate(  # noqa: E731
        "(t) => getComputedStyle([...document.querySelectorAll('.unit')].find((g) => g.querySelector('.title').textContent === t).querySelector('.box')).fill", title
    )
    before = fill("initial_conv")
    v.page.select_option("select[aria-label='Colour boxes by']", "f")
    assert v.page.locator(".scale").is_visible() and not v.page.locator(".legend").is_visible()
    assert "FLOPs" in v.page.locator(".scale").text_content()
    conv, relu, source = fill("initial_conv"), fill("truediv (/)"), fill("x")
    assert conv != before and conv != relu  # the convolutions cost more than a division
    assert source == v.page.evaluate("getComputedStyle(document.body).backgroundColor")  # no FLOPs: blank
    text = lambda title, part: v.page.evaluate(  # noqa: E731
        "([t, part]) => getComputedStyle([...document.querySelectorAll('.unit')].find((g) => g.querySelector('.title').textContent === t).querySelector(part)).fill",
        [title, part],
    )
    # On the darkest fills a class name is drawn in the title's colour, not the grey that vanishes there.
    assert text("initial_conv", ".subtitle") == text("initial_conv", ".title")
    assert text("max_pool", ".subtitle") != text("max_pool", ".title")  # a light fill keeps the grey
    _check_view(v.page.evaluate(MEASURE), "overlay")
    v.screenshot("view-overlay-flops")
    v.page.select_option("select[aria-label='Colour boxes by']", "")
    assert fill("initial_conv") == before and v.page.locator(".legend").is_visible()
    v.close()


def test_size_overlay_scales_boxes_by_flops(browser, tmp_path: Path) -> None:
    v = Viewer(browser, _trace("coolcnn"), tmp_path, "size")
    # Each box (by title): its laid-out width and height over what its text needs, and how far
    # (on screen) its title sits from its middle.
    measure = """() => Object.fromEntries([...document.querySelectorAll('.unit')].map((g) => {
      const a = window.__atlas.app, box = a.result.boxes.get(g.dataset.id), base = a.renderer.sizeOf(g.dataset.id);
      const b = g.querySelector('.box').getBoundingClientRect(), t = g.querySelector('.title').getBoundingClientRect();
      return [t.width ? g.querySelector('.title').textContent : g.dataset.id,
              [box.width / base.width, box.height / base.height, Math.abs(t.x + t.width / 2 - (b.x + b.width / 2))]];
    }))"""
    size = v.page.locator(".check.size input")
    assert size.is_disabled()  # nothing to size by while the fill is the category
    before = v.page.evaluate(measure)
    assert all(w == h == 1 for w, h, _ in before.values())
    v.page.select_option("select[aria-label='Colour boxes by']", "f")
    assert v.page.evaluate(measure) == before  # colour alone moves nothing
    v.click_and_relayout(".check.size input")
    grown = v.page.evaluate(measure)
    # The convolutions do the most FLOPs: about twice to 2.5 times as wide and as tall; the relu barely grows.
    assert max(w for w, _, _ in grown.values()) == pytest.approx(2.5, abs=0.02)
    for conv in ("initial_conv", "parallel_conv", "secondary_conv"):
        assert grown[conv][0] > 1.8 and grown[conv][1] > 1.8, grown
    assert grown["relu"][0] < 1.1 and grown["x"][0] == 1, grown  # the input has no FLOPs: not sized
    assert all(off < 2 for _, _, off in grown.values())  # titles still in the middle of their boxes
    assert "size: √FLOPs, 1× to 2.5×" in v.page.locator(".scale").text_content()
    _check_view(v.page.evaluate(MEASURE), "sized by FLOPs")
    v.screenshot("view-size-flops")
    v.click_and_relayout(".check.size input")  # off: the boxes fit their text again
    assert v.page.evaluate(measure) == before and "size:" not in v.page.locator(".scale").text_content()
    v.close()


def test_a_fitted_view_stays_fitted_when_the_frame_resizes(browser, tmp_path: Path) -> None:
    v = Viewer(browser, _trace("unet"), tmp_path, "resize")
    v.page.set_viewport_size(NOTEBOOK)
    v.page.wait_for_timeout(400)
    _check_view(v.page.evaluate(MEASURE), "resized to a notebook frame")
    v.page.mouse.move(300, 300)
    v.page.mouse.wheel(0, -600)  # the user zoomed: a resize leaves the view alone
    v.page.wait_for_timeout(300)
    k = v.page.evaluate("window.__atlas.app.viewport.k")
    v.page.set_viewport_size({"width": 1200, "height": 800})
    v.page.wait_for_timeout(400)
    assert v.page.evaluate("window.__atlas.app.viewport.k") == k
    v.close()


class _DividesByZero(nn.Module):
    """``b`` receives the Inf that ``x / 0`` makes and turns it into NaN."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.a(x).view(-1, 2, 2)
        return self.b((y / 0).view(-1, 4))


def test_run_time_overlays_mark_nan_and_show_arguments_and_stats(browser, tmp_path: Path) -> None:
    ir = torchatlas.trace(_DividesByZero(), torch.randn(2, 4), stats=True, profile=True).ir
    v = Viewer(browser, ir, tmp_path, "runtime")
    options = v.page.eval_on_selector_all("select[aria-label='Colour boxes by'] option", "os => os.map((o) => o.textContent)")
    assert options == ["fill: category", "fill: FLOPs", "fill: params", "fill: activation bytes", "fill: time", "fill: NaN/Inf ops"]
    stroke = lambda title: v.page.evaluate(  # noqa: E731
        "(t) => getComputedStyle([...document.querySelectorAll('.unit')].find((g) => g.querySelector('.title').textContent === t).querySelector('.box')).stroke", title
    )
    red, plain = "rgb(217, 48, 37)", stroke("a")
    assert stroke("truediv (/)") == red and stroke("b") == red and plain != red  # as the diagram marks them
    v.screenshot("view-nonfinite")

    v.page.select_option("select[aria-label='Colour boxes by']", "tu")
    scale = v.page.locator(".scale")
    assert scale.is_visible() and re.search(r"time:\s*[\d.]+ (µs|ms|s)\s*[\d.]+ (µs|ms|s)", scale.text_content())
    v.page.select_option("select[aria-label='Colour boxes by']", "nf")
    assert v.page.locator(".scale-min").text_content() == "0" and v.page.locator(".scale-max").text_content() == "1"
    v.screenshot("view-overlay-nonfinite")
    with v.page.expect_download() as download:  # the export keeps the overlay's fills
        v.page.click("button.export-svg")
    exported = Path(download.value.path()).read_text(encoding="utf-8")
    assert 'class="graph overlay' in exported and len(re.findall(r"--unit-overlay:\s*var\(--overlay-\d\)", exported)) >= 4

    v.page.locator(".unit", has=v.page.locator(".title", has_text="truediv")).first.click()
    rows = v.details()
    assert rows["call"] == "truediv (/) (%0, 0)" and rows["nonfinite"] == "⚠ Inf×8" and "time" in rows
    assert "Inf 8" in rows["out"] and "min" not in rows["out"]  # min and max are not numbers here
    v.screenshot("view-details-arguments-stats")
    v.page.keyboard.press("Escape")
    v.click_and_relayout('.unit.module[data-id="s2"]')  # open b: with nothing selected, the panel describes the call
    rows = v.details()
    assert rows["NaN/Inf ops"] == "1" and any(re.match(r"NaN [1-9]", value) for value in rows.values())
    v.close()

    plain_ir = _trace("coolcnn")  # no profile, no stats: only the numbers it has are offered
    v = Viewer(browser, plain_ir, tmp_path, "runtime-plain")
    options = v.page.eval_on_selector_all("select[aria-label='Colour boxes by'] option", "os => os.map((o) => o.value)")
    assert "tu" not in options and "nf" not in options and "f" in options
    assert v.count(".unit.nonfinite") == 0
    v.close()


class ComputesAMaskItNeverUses(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        mask = torch.arange(4) > 1  # noqa: F841 - a causal-mask helper whose result nothing reads
        return self.fc(x).relu()


def test_unused_ops_are_drawn_faded_and_dashed(browser, tmp_path: Path) -> None:
    v = Viewer(browser, torchatlas.trace(ComputesAMaskItNeverUses(), torch.randn(2, 4)).ir, tmp_path, "dead")
    dead = v.page.evaluate("[...document.querySelectorAll('.unit.dead text.title')].map((t) => t.textContent)")
    live = v.page.evaluate("[...document.querySelectorAll('.unit.op:not(.dead) text.title')].map((t) => t.textContent)")
    assert sorted(dead) == ["arange", "gt (>)"] and "relu" in live
    style = v.page.evaluate("(() => { const u = document.querySelector('.unit.dead'); return [getComputedStyle(u).opacity, getComputedStyle(u.querySelector('.box')).strokeDasharray]; })()")
    assert float(style[0]) < 1 and style[1] not in ("none", "")
    v.close()



def test_the_first_view_keeps_torch_nn_layers_closed_as_the_diagram_boxes_them(browser, tmp_path: Path) -> None:
    from _tree_models import LSTMHead

    graph = torchatlas.trace(LSTMHead(), torch.randn(2, 10, 32))
    v = Viewer(browser, graph.ir, tmp_path, "lstm-closed")
    closed = v.page.evaluate("[...document.querySelectorAll('.unit.module text.title')].map((t) => t.textContent)")
    ops = v.page.evaluate("[...document.querySelectorAll('.unit.op text.title')].map((t) => t.textContent)")
    assert any(t.startswith("lstm") for t in closed) and not any(t.startswith("lstm") for t in ops) and not v.errors
    v.close()


def test_an_in_place_op_says_so_on_its_box_as_in_the_diagram(browser, tmp_path: Path) -> None:
    class WritesInPlace(nn.Module):
        def forward(self, x):
            y = x * 2
            y.relu_()
            return y + 1

    graph = torchatlas.trace(WritesInPlace(), torch.randn(2, 4))
    assert "in-place" in graph.to_dot()
    v = Viewer(browser, graph.ir, tmp_path, "inplace")
    faces = v.page.evaluate(
        "[...document.querySelectorAll('.unit.op')].map((u) => [u.querySelector('text.title').textContent,"
        " (u.querySelector('text.subtitle') || {}).textContent || ''])"
    )
    marked = [title for title, sub in faces if sub == "in-place"]
    assert len(marked) == 1 and marked[0].startswith("relu") and not v.errors
    v.close()


def test_each_edge_out_of_a_multi_output_op_is_labelled_with_its_own_tensor(browser, tmp_path: Path) -> None:
    from _tree_models import LSTMHead

    # out, h and c leave the LSTM: the diagram labels each edge with its own tensor, and a label
    # the page shows is that edge's own (never the first output's shape on h's edge)
    graph = torchatlas.trace(LSTMHead(), torch.randn(2, 10, 32))
    drawn = {m.group(1): m.group(2) for m in re.finditer(r'"s1" -> "([^"]+)" \[label=" ([^"]+)"', graph.to_dot())}
    assert sorted(drawn.values()) == ["2×10×96", "4×2×48", "4×2×48"]
    v = Viewer(browser, graph.ir, tmp_path, "lstm-edges")
    lstm = [n.id for n in graph.ir.nodes if n.target == "torch.lstm"]
    shown = dict(
        v.page.evaluate(
            "(ids) => [...document.querySelectorAll('.edge-label')].map((l) => l.dataset.id.split('>'))"
            ".filter(([a]) => ids.includes(a)).map(([, b]) => [b, document.querySelector(`.edge-label[data-id$='>${b}']`).textContent])",
            [*lstm, "s1"],
        )
    )
    assert shown and all(drawn[target] == label for target, label in shown.items()) and not v.errors
    v.close()


def test_the_backward_part_is_drawn_apart_and_dashed(browser, tmp_path: Path) -> None:
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))  # docs/levels.md's, as its diagram
    graph = torchatlas.trace(mlp, torch.randn(3, 4), backward=True)
    v = Viewer(browser, graph.ir, tmp_path, "backward")
    v.click_and_relayout(".unit.module.backward")  # opened: one dashed call per forward call it differentiates
    part = v.page.locator(".backward")
    assert part.count() >= 1  # the backward call, drawn as the diagram draws it
    dashes = v.page.evaluate(
        "[...document.querySelectorAll('.unit.backward .box, .cluster.backward .frame')].map((e) => getComputedStyle(e).strokeDasharray)"
    )
    assert dashes and all(d not in ("none", "") for d in dashes) and not v.errors  # dashed, as in the diagram
    v.page.click("button.fit")
    v.screenshot("viewer-backward")  # docs/img/viewer-backward.png (docs/pictures.py)
    v.close()
