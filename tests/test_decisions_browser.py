"""The page draws a decision mark, not a faded box, on an op Python read to decide; a loop's
iterations fold into one box with its body inside."""

from __future__ import annotations

from pathlib import Path

import torch
from _decision_models import EarlyExit, line_of
from _viewer import Viewer

import torchatlas

_UNITS = (
    "[...document.querySelectorAll('.unit')].map((u) => [u.dataset.id, u.querySelector('text.title').textContent,"
    " u.querySelector('text.subtitle')?.textContent ?? '', !!u.querySelector('.decision-mark'),"
    " u.querySelector('title').textContent, getComputedStyle(u).opacity])"
)


def test_a_decision_is_a_diamond_mark_and_the_loop_one_box(browser, tmp_path: Path) -> None:
    torch.manual_seed(0)
    model, x = EarlyExit(), torch.randn(2, 8)
    v = Viewer(browser, torchatlas.trace(model, (x,)).ir, tmp_path, "decisions")
    assert v.count(".unit.dead") == 0
    units = v.page.evaluate(_UNITS)
    titles = [u[1] for u in units]
    folds = [u for u in units if u[0].startswith("g")]
    assert len(folds) == 1 and folds[0][1] == "step#0–3"  # the four iterations: one box, body inside
    assert not {"sub (-)", "abs", "mean", "lt (<)"} & set(titles)
    marks = [u for u in units if u[3]]
    assert [(u[1], u[2]) for u in marks] == [("gt (>)", "◆ if: not taken")] and float(marks[0][5]) == 1
    line = line_of(EarlyExit, "if h.norm()")
    assert f"◆ if @ _decision_models.py:{line} (not taken)" in marks[0][4]
    v.screenshot("decisions")
    v.click_and_relayout(f'.unit[data-id="{folds[0][0]}"]')  # opened: the first iteration, its break test
    opened = v.page.evaluate(_UNITS)
    tests = [u for u in opened if u[1] == "lt (<)"]
    assert len(tests) == 1 and tests[0][3] and tests[0][2] == "◆ break: went on ×3, broke"  # every iteration counted
    assert line_of(EarlyExit, "if delta.abs()") and not v.errors
    v.screenshot("decisions-open")
    v.close()
