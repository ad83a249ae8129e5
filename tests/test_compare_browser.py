"""A compare result's page in Chromium: filled by error from the start, each box's overlays in its details."""

from __future__ import annotations

import copy

import pytest
import torch

import torchatlas
from torchatlas._render import HtmlOptions

pytestmark = pytest.mark.browser


def test_the_compare_page_starts_filled_by_error_and_details_name_the_divergence(browser, tmp_path) -> None:
    from _viewer import Viewer

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 8), torch.nn.Linear(8, 2)).eval()
    nudged = copy.deepcopy(model)
    with torch.no_grad():
        nudged[2].weight += 0.05
    x = torch.randn(3, 4)
    c = torchatlas.compare((model, (x,)), (nudged, (x,)))
    v = Viewer(browser, c.graph.ir, tmp_path, "compare", options=HtmlOptions(fill="error"))
    assert v.page.locator('select[aria-label="Colour boxes by"]').input_value() == "ov:error"
    assert "error" in v.page.locator(".scale").text_content()
    v.search("2")
    rows = v.details()
    assert rows["divergence"] == "✗ diverges here" and float(rows["error"]) > 0
    v.screenshot("compare-page")
    v.close()
