"""How fast the HTML viewer opens and reacts, measured in headless Chromium.

Two graphs:

* ``llama70b``: a Llama-3-70B-shaped model (80 decoder layers, hidden 8192) built
  on the ``meta`` device, so no weights exist, captured with a 16-token input.
  Measured: first paint; expanding one decoder layer (a click on the ``×80``
  box the moment the page is drawn opens its first layer in place); unfolding
  to 80 boxes; expanding a layer among the 80, then another (whose inside has
  the same shape, so only the model around it is laid out again); Expand all.
* ``synthetic100k``: a hand-built graph of 100,000 ops (no torch involved) in
  40 blocks × 25 sub-blocks × 100 ops, which the repeats pass folds to ``×40``.
  Measured: first paint, opening and unfolding the fold, expanding one block
  and opening its ``×25`` sub-blocks, a search, and the frame time of zoom/pan.

Times come from marks the page sets (``window.__atlas``): ``firstPaintMs`` is
``performance.now()`` (milliseconds since navigation start) once the first
layout is drawn; ``lastLayoutMs`` spans one re-layout from the click to the
frame after drawing. Run ``python bench/bench_html.py`` (add ``--json out.json``
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


def relayout(page: Page, selector: str) -> dict[str, Any]:
    """Click a box and time the re-layout it causes."""
    before = page.evaluate("__atlas.layoutCount")
    page.locator(selector).first.dispatch_event("click")  # boxes may lie outside the window
    page.wait_for_function(f"() => __atlas.layoutCount > {before}", timeout=120_000)
    state = page.evaluate("({ms: __atlas.lastLayoutMs, elk: __atlas.lastElkMs, boxes: __atlas.visibleBoxes})")
    page.wait_for_timeout(400)
    return {"layout_ms": round(state["ms"]), "elk_ms": round(state["elk"]), "boxes": state["boxes"]}


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
