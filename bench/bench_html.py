"""How fast the HTML viewer opens and reacts, measured in headless Chromium.

Two graphs:

* ``llama70b``: a Llama-3-70B-shaped model (80 decoder layers, hidden 8192) built
  on the ``meta`` device, so no weights exist, captured with a 16-token input.
  Measured: first paint; expanding one decoder layer (a click on the ``×80``
  box the moment the page is drawn opens its first layer in place); unfolding
  to 80 boxes; expanding a layer among the 80, then another (whose inside has
  the same shape, so only the model around it is laid out again); Expand all;
  then, on the fully expanded view, the frame time of a drag-pan at 100 % and
  40 % zoom and the time each entry of the **fill:** menu takes to show.
* ``synthetic100k``: a hand-built graph of 100,000 ops (no torch involved) in
  40 blocks × 25 sub-blocks × 100 ops, which the repeats pass folds to ``×40``.
  Measured: first paint, opening and unfolding the fold, expanding one block
  and opening its ``×25`` sub-blocks, a search, and the frame time of zoom/pan.

Times come from marks the page sets (``window.__atlas``): ``firstPaintMs`` is
``performance.now()`` (milliseconds since navigation start) once the first
layout is drawn; ``lastLayoutMs`` spans one re-layout from the click to the
frame after drawing. Every click also reports ``settle_ms``: from the click until
the new layout is drawn and no box, frame or view moves any more (CSS transitions
and the view's glide finished), what a user waits for. Run ``python bench/bench_html.py`` (add ``--json out.json``
to keep the numbers). Needs /usr/bin/chromium, playwright and a built viewer.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from playwright.sync_api import Page, sync_playwright

from torchatlas._ir import GraphIR, Node, Ref, Scope, Source, TensorMeta
from torchatlas._passes import analyze
from torchatlas._render._html import to_html

# The Chromium setup is the browser tests' own, so the numbers come from the browser they check.
sys.path.append(str(Path(__file__).resolve().parent.parent / "tests"))
from _viewer import VIEWPORT, launch_chromium, open_viewer


def llama70b_ir() -> GraphIR:
    import torch
    import transformers

    import torchatlas

    cfg = transformers.AutoConfig.for_model(
        "llama", num_hidden_layers=80, hidden_size=8192, intermediate_size=28672,
        num_attention_heads=64, num_key_value_heads=8, vocab_size=128256,
    )
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
        ids = torch.zeros(1, 16, dtype=torch.long)
    return torchatlas.trace(model, (), kwargs={"input_ids": ids}).ir


def synthetic_ir(blocks: int = 40, subs: int = 25, ops: int = 100) -> GraphIR:
    """A chain of ``blocks × subs × ops`` elementwise ops, each sub-block a module call."""
    meta = [TensorMeta((1, 256), "float32", "cpu")]
    scopes = [Scope("s0", None, "", "bench.Synthetic", 0)]
    nodes = [Node("n0", "input", "s0", path="args[0]", outputs=meta)]
    src = Source("synthetic.py", 1, "x = f(x)")
    prev = "n0"
    targets = ("torch.relu", "torch.Tensor.__add__", "torch.nn.functional.linear", "torch.Tensor.view")
    for b in range(blocks):
        block = f"s{len(scopes)}"
        scopes.append(Scope(block, "s0", f"blocks.{b}", "bench.Block", 0))
        for s in range(subs):
            sub = f"s{len(scopes)}"
            scopes.append(Scope(sub, block, f"blocks.{b}.subs.{s}", "bench.Sub", 0))
            for k in range(ops):
                nid = f"n{len(nodes)}"
                nodes.append(Node(nid, "op", sub, [Ref(prev)], target=targets[k % 4], outputs=meta, source=src))
                prev = nid
            scopes[-1].outputs = [Ref(prev)]
    nodes.append(Node(f"n{len(nodes)}", "output", "s0", [Ref(prev)], path="output", outputs=meta))
    return analyze(GraphIR(scopes, nodes, {"model": "bench.Synthetic"}))


def open_page(page: Page, path: Path) -> dict[str, Any]:
    start = time.perf_counter()
    open_viewer(page, path, timeout_ms=120_000)
    wall = (time.perf_counter() - start) * 1000
    state = page.evaluate("({fp: __atlas.firstPaintMs, boxes: __atlas.visibleBoxes})")
    return {"first_paint_ms": round(state["fp"]), "open_wall_ms": round(wall), "boxes": state["boxes"]}


# Click the element (boxes may lie outside the window, so no real pointer), then wait, frame by
# frame, until the re-layout is drawn and nothing moves: no CSS transition or fade running (finished
# fades that hold their last frame still count as animations) and the view still.
_CLICK_TO_SETTLE = """async (selector) => {
  const before = __atlas.layoutCount, v = __atlas.app.viewport;
  const t0 = performance.now();
  document.querySelector(selector).dispatchEvent(new MouseEvent("click", {bubbles: true, cancelable: true}));
  let view = "", still = null, frames = 0;
  for (;;) {
    await new Promise(requestAnimationFrame);
    const now = performance.now(), key = `${v.x},${v.y},${v.k}`;
    const moving = __atlas.layoutCount === before || document.getAnimations().some((a) => a.playState === "running") || key !== view;
    view = key;
    if (moving) { still = null; frames = 0; } else if (still === null) still = now;
    if (still !== null && ++frames >= 3) return still - t0;
    if (now - t0 > 120000) throw new Error(`no settled picture 120 s after clicking ${selector}`);
  }
}"""


def relayout(page: Page, selector: str) -> dict[str, Any]:
    """Click a box; time the re-layout it causes and the wait until the picture settles."""
    settle = page.evaluate(_CLICK_TO_SETTLE, selector)
    state = page.evaluate("({ms: __atlas.lastLayoutMs, elk: __atlas.lastElkMs, boxes: __atlas.visibleBoxes})")
    return {"layout_ms": round(state["ms"]), "elk_ms": round(state["elk"]), "settle_ms": round(settle), "boxes": state["boxes"]}


def repeat_box(page: Page, k: int) -> str:
    """A selector for the box of the k-th member of an unfolded repeat (layers.k)."""
    sid = page.evaluate(f"(() => {{ const s = __atlas.app.model.scopes.find(s => s.rep && s.rep[1] === {k}); return 's' + s.idx; }})()")
    return f'.unit.module[data-id="{sid}"]'


def frame_times(page: Page, steps: int = 30) -> dict[str, float]:
    """Zoom and pan with wheel events; report per-event frame times."""
    script = """async (steps) => {
      const svg = document.querySelector('svg.graph');
      const r = svg.getBoundingClientRect();
      const times = [];
      for (let i = 0; i < steps; i++) {
        const t0 = performance.now();
        svg.dispatchEvent(new WheelEvent('wheel', {deltaY: i % 2 ? 120 : -120, clientX: r.left + r.width / 2,
          clientY: r.top + r.height / 2, shiftKey: i % 3 === 0, bubbles: true, cancelable: true}));
        await new Promise(requestAnimationFrame);
        times.push(performance.now() - t0);
      }
      return times;
    }"""
    times = page.evaluate(script, steps)
    return {"frame_median_ms": round(statistics.median(times), 1), "frame_max_ms": round(max(times), 1)}


def pan_frames(page: Page, scale: float, moves: int = 60) -> dict[str, float]:
    """Drag-pan the view at ``scale`` (1 = 100 %), one pointer move per frame; report the
    interval between frames (16.7 ms: 60 fps) and the script time each move costs."""
    script = """async ([scale, moves]) => {
      const app = __atlas.app, v = app.viewport, svg = document.querySelector('svg.graph');
      const r = svg.getBoundingClientRect(), cx = r.left + r.width / 2, cy = r.top + r.height / 2;
      v.moveTo(v.x, v.y, scale, false);
      await new Promise(requestAnimationFrame);
      svg.dispatchEvent(new PointerEvent('pointerdown', {button: 0, clientX: cx, clientY: cy, bubbles: true}));
      const intervals = [], handlers = [];
      let last = await new Promise(requestAnimationFrame);
      for (let i = 1; i <= moves; i++) {
        const dx = 200 * Math.sin(i / 8), dy = 120 * Math.cos(i / 11);
        const t0 = performance.now();
        window.dispatchEvent(new PointerEvent('pointermove', {clientX: cx + dx, clientY: cy + dy, bubbles: true}));
        handlers.push(performance.now() - t0);
        const t = await new Promise(requestAnimationFrame);
        intervals.push(t - last);
        last = t;
      }
      window.dispatchEvent(new PointerEvent('pointerup', {bubbles: true}));
      app.viewport.fit(false);
      return {intervals, handlers};
    }"""
    got = page.evaluate(script, [scale, moves])
    intervals = sorted(got["intervals"])
    median = statistics.median(intervals)
    return {
        "scale": scale, "frame_median_ms": round(median, 1), "frame_p90_ms": round(intervals[int(0.9 * (len(intervals) - 1))], 1),
        "fps": round(1000 / median, 1), "move_handler_median_ms": round(statistics.median(got["handlers"]), 2),
    }


def overlay_switches(page: Page) -> dict[str, float]:
    """Time from choosing each entry of the fill: menu (and back to category) to the frame that shows it."""
    script = """async (value) => {
      const select = document.querySelector("select[aria-label='Colour boxes by']");
      const t0 = performance.now();
      select.value = value;
      select.dispatchEvent(new Event('change'));
      await new Promise(requestAnimationFrame);
      await new Promise(requestAnimationFrame);
      return performance.now() - t0;
    }"""
    metrics = page.evaluate("__atlas.app.model.doc.metrics.map((m) => m[0])")
    return {f"{value or 'category'}_ms": round(page.evaluate(script, value), 1) for value in [*metrics, ""]}


def bench_llama(page: Page, folder: Path) -> dict[str, Any]:
    t0 = time.perf_counter()
    ir = llama70b_ir()
    capture_s = time.perf_counter() - t0
    path = folder / "llama70b.html"
    t0 = time.perf_counter()
    path.write_text(to_html(ir), encoding="utf-8")
    out: dict[str, Any] = {"ops": sum(1 for _ in ir.ops()), "capture_s": round(capture_s, 1)}
    out["to_html_s"] = round(time.perf_counter() - t0, 2)
    out["page_mb"] = round(path.stat().st_size / 1e6, 1)
    out["open"] = open_page(page, path)
    out["expand_one_layer"] = relayout(page, ".unit.module[data-id^=g]")  # opens layers.0 inside the ×80
    out["unfold_x80"] = relayout(page, ".cluster .fold-badge")
    out["expand_layer_when_unfolded"] = relayout(page, repeat_box(page, 1))
    # A layer of a shape laid out before: only the modules around it are laid out again.
    out["expand_another_layer"] = relayout(page, repeat_box(page, 40))
    out["expand_all"] = relayout(page, "button.expand-all")
    out["pan_expanded_100"] = pan_frames(page, 1.0)
    out["pan_expanded_40"] = pan_frames(page, 0.4)
    out["overlay_switch"] = overlay_switches(page)
    return out


def bench_synthetic(page: Page, folder: Path) -> dict[str, Any]:
    ir = synthetic_ir()
    path = folder / "synthetic100k.html"
    t0 = time.perf_counter()
    path.write_text(to_html(ir), encoding="utf-8")
    out: dict[str, Any] = {"ops": sum(1 for _ in ir.ops()), "to_html_s": round(time.perf_counter() - t0, 2)}
    out["page_mb"] = round(path.stat().st_size / 1e6, 1)
    out["open"] = open_page(page, path)
    out["pan_zoom"] = frame_times(page)
    out["open_x40"] = relayout(page, ".unit.module[data-id^=g]")
    out["unfold_x40"] = relayout(page, ".cluster .fold-badge")
    target = page.evaluate("(() => { const g = [...document.querySelectorAll('.unit.module')][3]; return g.dataset.id; })()")
    out["expand_one_block"] = relayout(page, f'.unit.module[data-id="{target}"]')
    out["open_x25_inside"] = relayout(page, ".unit.module[data-id^=g]")
    t0 = time.perf_counter()
    page.fill(".search input", "blocks.39.subs.24")
    page.locator(".search-results li.hit").first.wait_for()
    out["search_ms"] = round((time.perf_counter() - t0) * 1000)
    out["pan_zoom_expanded"] = frame_times(page)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--only", choices=["llama70b", "synthetic100k"], help="run one of the two")
    args = parser.parse_args(argv)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        browser = launch_chromium(p)
        for name, fn in (("llama70b", bench_llama), ("synthetic100k", bench_synthetic)):
            if args.only and args.only != name:
                continue
            page = browser.new_page(viewport=VIEWPORT)
            results[name] = fn(page, Path(tmp))
            page.close()
            print(name, json.dumps(results[name], indent=2), flush=True)
        browser.close()
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
