"""A compare result's page in Chromium: filled by error from the start, each box's overlays in its details."""

from __future__ import annotations

import copy

import pytest
import torch

import torchatlas
from torchatlas._render import HtmlOptions

pytestmark = pytest.mark.browser


def _model_nudged_at_its_third_layer() -> tuple[torch.nn.Module, torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 8), torch.nn.Linear(8, 2)).eval()
    nudged = copy.deepcopy(model)
    with torch.no_grad():
        nudged[2].weight += 0.05
    return model, nudged, torch.randn(3, 4)


def test_the_compare_page_starts_filled_by_error_and_details_name_the_divergence(browser, tmp_path) -> None:
    from _viewer import Viewer

    model, nudged, x = _model_nudged_at_its_third_layer()
    c = torchatlas.compare((model, (x,)), (nudged, (x,)))
    v = Viewer(browser, c.graph.ir, tmp_path, "compare", options=HtmlOptions(fill="error"))
    assert v.page.locator('select[aria-label="Colour boxes by"]').input_value() == "ov:error"
    assert "error" in v.page.locator(".scale").text_content()
    v.search("2")
    rows = v.details()
    assert rows["divergence"] == "✗ diverges here" and float(rows["error"]) > 0
    v.screenshot("compare-page")
    v.close()


def test_three_runs_outline_each_first_divergence_fade_what_inherits_and_table_every_run(browser, tmp_path) -> None:
    from _viewer import Viewer

    model, nudged, x = _model_nudged_at_its_third_layer()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        bf16 = torchatlas.trace(model, x, fingerprint=True)
    c = torchatlas.compare((model, (x,)), (nudged, (x,)), bf16, rtol=1e-2, atol=1e-4, labels=["fp32", "nudged", "bf16"])
    # bf16 parts at the first Linear, the nudged run at the third: both outlined, what follows them faded
    ir = c.graph.ir
    call = {s.path: f"s{i}" for i, s in enumerate(ir.scopes)}
    assert c.explain(ir.node(c.runs[1].first_divergence).id, 2).startswith("0 (linear)")
    v = Viewer(browser, ir, tmp_path, "compare-runs", options=HtmlOptions(fill="error: nudged"))
    classes = v.page.evaluate("() => Object.fromEntries([...document.querySelectorAll('.unit')].map(g => [g.dataset.id, g.getAttribute('class')]))")
    opacity = v.page.evaluate("() => Object.fromEntries([...document.querySelectorAll('.unit')].map(g => [g.dataset.id, getComputedStyle(g).opacity]))")
    assert "divergence-here" in classes[call["0"]] and "divergence-here" in classes[call["2"]]
    assert "divergence-inherits" in classes[call["3"]] and float(opacity[call["3"]]) < 0.6
    assert float(opacity[call["2"]]) == 1.0
    assert "faded: inherits" in v.page.locator(".scale").text_content()
    # the third Linear's details: a column per run, the cells that differ from fp32's highlighted
    v.search("2")
    table = v.page.eval_on_selector(".details section.runs table", "t => [...t.rows].map(r => [...r.cells].map(c => [c.textContent, c.classList.contains('differs')]))")
    assert [cell for cell, _ in table[0]] == ["", "fp32", "nudged", "bf16"]
    rows = {row[0][0]: row[1:] for row in table[1:]}
    assert [cell for cell, _ in rows["status"]] == ["first run", "diverges", "inherits"]
    assert [hot for _, hot in rows["status"]] == [False, True, True]
    assert rows["outputs"][0] == ["3×8 float32", False] and rows["outputs"][1] == ["3×8 float32", False]
    assert rows["outputs"][2] == ["3×8 bfloat16", True]
    assert all(hot for _, hot in rows["max abs"][1:]) and float(rows["max abs"][1][0]) > 0
    v.screenshot("compare-runs-page")
    v.close()
