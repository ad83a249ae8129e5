"""How fast the HTML viewer and the diff page open and react, measured in headless Chromium.

Three pages:

* ``llama70b``: a Llama-3-70B-shaped model (80 decoder layers, hidden 8192) built
  on the ``meta`` device, so no weights exist, captured with a 16-token input.
  Measured: first paint; expanding one decoder layer (a click on the ``×80``
  box the moment the page is drawn opens its first layer in place); unfolding
  to 80 boxes; expanding a layer among the 80, then another (whose inside has
  the same shape, so only the model around it is laid out again; the page
  guesses the first layers, not the 40th); Expand all;
  then, on the fully expanded view, the frame time of a drag-pan at 100 % and
  40 % zoom, the time each entry of the **fill:** menu takes to show, the time
  from a click on an op to its lit cone drawn (path highlight, at 100 % and on
  the fitted view), and the re-layout when the **size** box is ticked.
* ``synthetic100k``: a hand-built graph of 100,000 ops (no torch involved) in
  40 blocks × 25 sub-blocks × 100 ops, which the repeats pass folds to ``×40``.
  Measured: first paint, opening and unfolding the fold, expanding one block
  and opening its ``×25`` sub-blocks, a search, and the frame time of zoom/pan.
* ``diff``: ``torchatlas.diff(a, b)`` of two 80-layer Llama-70B-shaped captures whose
  MLPs differ (intermediate size 28,672 and 24,576): the diff with its text (``tree()``
  and ``summary()``), the merged-graph page's first paint and opening its changed ``×80``
  fold, the list page's first paint and a click on a changed call until its facts are drawn.

Times come from marks the page sets (``window.__atlas``): ``firstPaintMs`` is
``performance.now()`` (milliseconds since navigation start) once the first
layout is drawn; ``lastLayoutMs`` spans one re-layout from the click to the
frame after drawing. Every click also reports ``settle_ms``: from the click until
the new layout is drawn and no box, frame or view moves any more (CSS transitions
and the view's glide finished), what a user waits for. Run ``python bench/bench_html.py`` (add ``--json out.json``
to keep the numbers); a run of all three also writes ``bench/results/html.md``.
Needs /usr/bin/chromium, playwright and a built viewer.
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

import _report
from playwright.sync_api import Page, sync_playwright

import torchatlas
from torchatlas._ir import GraphIR, Node, Ref, Scope, Source, TensorMeta
from torchatlas._passes import analyze
from torchatlas._render._html import to_html

# The Chromium setup is the browser tests' own, so the numbers come from the browser they check.
sys.path.append(str(Path(__file__).resolve().parent.parent / "tests"))
from _viewer import VIEWPORT, launch_chromium, open_viewer

RESULTS = Path(__file__).resolve().parent / "results" / "html.md"
MACHINE = "2-core shared machine, headless Chromium"


def llama70b_ir(layers: int = 80, intermediate: int = 28672) -> GraphIR:
    import torch
    import transformers

    cfg = transformers.AutoConfig.for_model(
        "llama", num_hidden_layers=layers, hidden_size=8192, intermediate_size=intermediate,
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
    state = page.evaluate("({ms: __atlas.lastLayoutMs, elk: __atlas.lastElkMs, fresh: __atlas.lastFreshLevels, boxes: __atlas.visibleBoxes})")
    return {"layout_ms": round(state["ms"]), "elk_ms": round(state["elk"]), "settle_ms": round(settle), "boxes": state["boxes"],
            "fresh_levels": state["fresh"]}


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
    metrics = page.evaluate("__atlas.app.model.doc.metrics.map((m) => [m[0], m[1]])")  # [key, label]
    return {f"{label}_ms": round(page.evaluate(script, key), 1) for key, label in [*metrics, ["", "category"]]}


# Wait for the frame after the one the change was drawn in: until then the user sees nothing.
_TWO_FRAMES = "await new Promise(requestAnimationFrame); await new Promise(requestAnimationFrame);"


def path_highlight(page: Page, fitted: bool) -> dict[str, Any]:
    """Click an op in the middle of the graph (in the middle of the window at 100 %, or on the fitted
    view) until its lit cone is drawn; then Escape until the picture is plain again."""
    script = """async (fitted) => {
      const app = __atlas.app, v = app.viewport, size = v.size();
      const mid = app.result.height / 2, op = (id) => document.querySelector(`.unit.op[data-id="${id}"]`);
      const [id, b] = [...app.result.boxes].filter(([id]) => op(id)).sort(([, a], [, b]) => Math.abs(a.y - mid) - Math.abs(b.y - mid))[0];
      if (fitted) v.fit(false);
      else v.moveTo(size.width / 2 - (b.x + b.width / 2), size.height / 2 - (b.y + b.height / 2), 1, false);
      %s  // the view drawn there (what it culled restyled) before the click
      let t0 = performance.now();
      op(id).dispatchEvent(new MouseEvent("click", {bubbles: true, cancelable: true}));
      const handler = performance.now() - t0;
      %s
      const select = performance.now() - t0, lit = document.querySelectorAll(".unit.lit").length;
      t0 = performance.now();
      document.dispatchEvent(new KeyboardEvent("keydown", {key: "Escape", bubbles: true}));
      %s
      return {select_ms: select, handler_ms: handler, clear_ms: performance.now() - t0, lit_boxes: lit, boxes: app.graph.leaves.size};
    }""" % (_TWO_FRAMES, _TWO_FRAMES, _TWO_FRAMES)
    got = page.evaluate(script, fitted)
    return {k: round(v, 1) if k.endswith("_ms") else v for k, v in got.items()}


def size_toggle(page: Page) -> dict[str, Any]:
    """Fill by FLOPs, then tick **size** (boxes scaled by FLOPs: a re-layout) and untick it."""
    page.select_option("select[aria-label='Colour boxes by']", "f")
    out = {"on": relayout(page, ".check.size input"), "off": relayout(page, ".check.size input")}
    page.select_option("select[aria-label='Colour boxes by']", "")
    return out


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
    out["path_highlight_100"] = path_highlight(page, fitted=False)
    out["path_highlight_fit"] = path_highlight(page, fitted=True)
    out["size_toggle"] = size_toggle(page)
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


def bench_diff(page: Page, folder: Path) -> dict[str, Any]:
    t0 = time.perf_counter()
    a, b = llama70b_ir(), llama70b_ir(intermediate=24576)
    out: dict[str, Any] = {"capture_s": round(time.perf_counter() - t0, 1)}
    t0 = time.perf_counter()
    d = torchatlas.diff(a, b)
    text = d.tree() + d.summary()
    out["diff_and_text_s"] = round(time.perf_counter() - t0, 2)
    out["text_lines"] = text.count("\n") + 1
    graph_path = Path(d.to_html(folder / "diff_graph.html", view="graph"))
    out["diff_and_page_s"] = round(time.perf_counter() - t0, 2)
    out["graph_page_mb"] = round(graph_path.stat().st_size / 1e6, 1)
    out["graph_open"] = open_page(page, graph_path)
    out["graph_open_changed_fold"] = relayout(page, ".unit.diff-changed.module")
    path = d.to_html(folder / "diff.html", view="list")
    out["calls"] = len(d.calls)
    out["changed"] = sum(1 for c in d.calls if c.status == "changed")
    out["page_mb"] = round(Path(path).stat().st_size / 1e6, 1)
    start = time.perf_counter()
    page.goto(Path(path).as_uri(), wait_until="load")
    # First contentful paint, from navigation start; and the first frame after the load event.
    paint = page.evaluate(
        f"""async () => {{ {_TWO_FRAMES}
          const fcp = performance.getEntriesByName("first-contentful-paint")[0];
          return {{fcp: fcp ? fcp.startTime : null, frame: performance.now()}}; }}"""
    )
    out["open_wall_ms"] = round((time.perf_counter() - start) * 1000)
    out["first_paint_ms"] = round(paint["fcp"] if paint["fcp"] is not None else paint["frame"])
    out["loaded_frame_ms"] = round(paint["frame"])
    click = f"""async () => {{
      const row = document.querySelectorAll(".row.changed")[Math.floor(document.querySelectorAll(".row.changed").length / 2)];
      const t0 = performance.now();
      row.dispatchEvent(new MouseEvent("click", {{bubbles: true}}));
      {_TWO_FRAMES}
      return {{ms: performance.now() - t0, rows: document.querySelectorAll("#panel tr.diff").length}};
    }}"""
    got = page.evaluate(click)
    out["click_changed_ms"] = round(got["ms"], 1)
    out["click_changed_rows"] = got["rows"]
    return out


def _ms(value: float) -> str:
    return f"{value:,.0f} ms" if value >= 100 or float(value).is_integer() else f"{value:.1f} ms"


def click_of(r: dict[str, Any]) -> str:
    """A re-layout's cell: to the frame after drawing (ELK; modules laid out anew), and until settled."""
    return f"{_ms(r['layout_ms'])} ({_ms(r['elk_ms'])}; {r['fresh_levels']} new); settled {_ms(r['settle_ms'])}"


def _target(value: float, limit: float, text: str) -> str:
    return f"{text}: {'met' if value <= limit else 'not met'}"


def markdown(results: dict[str, Any]) -> str:
    """bench/results/html.md: one row per measurement, the target where the issue set one."""
    rows: list[list[str]] = []
    if "llama70b" in results:
        r = results["llama70b"]
        name = f"Llama-70B config on meta (80 layers, {r['ops']:,} ops, {r['page_mb']} MB page)"
        rows += [
            [name, "first paint", _ms(r["open"]["first_paint_ms"]), _target(r["open"]["first_paint_ms"], 2000, "< 2 s")],
            ["", f"open one decoder layer, the moment the page is drawn ({r['expand_one_layer']['boxes']} boxes)", click_of(r["expand_one_layer"]),
             _target(r["expand_one_layer"]["layout_ms"], 100, "< 100 ms")],
            ["", f"unfold the ×80 ({r['unfold_x80']['boxes']} boxes)", click_of(r["unfold_x80"]),
             _target(r["unfold_x80"]["layout_ms"], 100, "< 100 ms")],
            ["", f"open a layer among the 80 ({r['expand_layer_when_unfolded']['boxes']} boxes)", click_of(r["expand_layer_when_unfolded"]),
             _target(r["expand_layer_when_unfolded"]["layout_ms"], 100, "< 100 ms")],
            ["", f"then open another one ({r['expand_another_layer']['boxes']} boxes)", click_of(r["expand_another_layer"]),
             _target(r["expand_another_layer"]["layout_ms"], 100, "< 100 ms")],
            ["", f"Expand all ({r['expand_all']['boxes']} boxes)", click_of(r["expand_all"]), ""],
        ]
        for key, zoom in (("pan_expanded_100", "100 %"), ("pan_expanded_40", "40 %")):
            p = r[key]
            rows.append(["", f"pan the expanded view at {zoom}: frame interval, median / 90th pct",
                         f"{p['frame_median_ms']} / {p['frame_p90_ms']} ms ({p['fps']} fps; move handler {p['move_handler_median_ms']} ms)",
                         _target(p["frame_median_ms"], 16.8, "≤ 16.7 ms (60 fps)")])
        switches = r["overlay_switch"]
        rows.append(["", "switch the fill: menu (each entry, to the second frame)", ", ".join(f"{k[:-3]} {_ms(v)}" for k, v in switches.items()),
                     _target(max(switches.values()), 100, "< 100 ms")])
        for key, where in (("path_highlight_100", "at 100 %"), ("path_highlight_fit", "on the fitted view")):
            h = r[key]
            rows.append(["", f"path highlight {where}: click an op until its cone ({h['lit_boxes']} of {h['boxes']} boxes) is drawn; Escape",
                         f"{_ms(h['select_ms'])} (handler {_ms(h['handler_ms'])}); clear {_ms(h['clear_ms'])}",
                         _target(h["select_ms"], 100, "< 100 ms")])
        for key in ("on", "off"):
            rows.append(["", f"size box {key} (fill: FLOPs), re-layout", click_of(r["size_toggle"][key]), ""])
    if "synthetic100k" in results:
        r = results["synthetic100k"]
        rows += [
            [f"synthetic, {r['ops']:,} ops ({r['page_mb']} MB page)", "first paint", _ms(r["open"]["first_paint_ms"]), "opens collapsed"],
            ["", "pan/zoom frame, median (max)", f"{r['pan_zoom']['frame_median_ms']} ms ({r['pan_zoom']['frame_max_ms']} ms)", "responsive"],
            ["", "unfold ×40 / open one block / open its ×25",
             " / ".join(_ms(r[k]["layout_ms"]) for k in ("unfold_x40", "expand_one_block", "open_x25_inside")), ""],
            ["", "search", _ms(r["search_ms"]), ""],
        ]
    if "diff" in results:
        r = results["diff"]
        rows += [
            [f"diff of two 80-layer Llama-70B captures ({r['calls']:,} calls, {r['changed']} changed, {r['page_mb']} MB page)",
             "diff, its tree and summary (text)", f"{r['diff_and_text_s']} s", _target(r["diff_and_text_s"], 2, "< 2 s")],
            ["", "diff and the merged-graph page written", f"{r['diff_and_page_s']} s", ""],
            ["", f"merged-graph page ({r['graph_page_mb']} MB): first paint", _ms(r["graph_open"]["first_paint_ms"]),
             _target(r["graph_open"]["first_paint_ms"], 2000, "< 2 s")],
            ["", f"open the changed ×80 fold ({r['graph_open_changed_fold']['boxes']} boxes)",
             click_of(r["graph_open_changed_fold"]), ""],
            ["", "list page: first paint", _ms(r["first_paint_ms"]), _target(r["first_paint_ms"], 2000, "< 2 s")],
            ["", "click a changed call until its facts are drawn", _ms(r["click_changed_ms"]), ""],
        ]
    return "\n".join([
        "# The HTML viewer and the diff page in headless Chromium",
        "",
        f"{_report.generated_by('bench_html.py')} {MACHINE}: timings move with the machine's load.",
        "Each line is one run. A re-layout is timed from the click to the frame after the new picture is drawn "
        "(in brackets: of which waiting for ELK, and how many modules ELK had to lay out anew, neither guessed "
        "ahead nor cached), and until nothing moves any more (settled). The page guesses at the next click "
        "while it waits for one (docs/viewer.md, How it works): a guessed click takes its modules from the cache.",
        "",
        _report.table(["graph", "what", "time", "target"], rows),
        "",
    ])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--only", choices=["llama70b", "synthetic100k", "diff"], help="run one of the three (and write no html.md)")
    args = parser.parse_args(argv)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        browser = launch_chromium(p)
        for name, fn in (("llama70b", bench_llama), ("synthetic100k", bench_synthetic), ("diff", bench_diff)):
            if args.only and args.only != name:
                continue
            page = browser.new_page(viewport=VIEWPORT)
            results[name] = fn(page, Path(tmp))
            page.close()
            print(name, json.dumps(results[name], indent=2), flush=True)
        browser.close()
    if not args.only:
        _report.write_report(RESULTS, markdown(results))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
