"""The page draws a decision mark, not a faded box, on an op Python read to decide."""

from __future__ import annotations

from pathlib import Path

import torch
from _decision_models import EarlyExit, line_of
from _viewer import Viewer

import torchatlas


def test_a_decision_is_a_diamond_mark_not_a_faded_box(browser, tmp_path: Path) -> None:
    torch.manual_seed(0)
    model, x = EarlyExit(), torch.randn(2, 8)
    v = Viewer(browser, torchatlas.trace(model, (x,)).ir, tmp_path, "decisions")
    assert v.count(".unit.dead") == 0
    marks = v.page.evaluate(
        "[...document.querySelectorAll('.unit.decision')].map((u) => [u.querySelector('text.title').textContent,"
        " u.querySelector('text.subtitle').textContent, !!u.querySelector('.decision-mark'),"
        " u.querySelector('title').textContent, getComputedStyle(u).opacity])"
    )
    assert marks, "no decision drawn"
    titles = {m[0] for m in marks}
    assert titles <= {"lt", "gt", "<", ">"} and all(m[2] for m in marks) and all(float(m[4]) == 1 for m in marks)
    subtitles = [m[1] for m in marks]
    assert "◆ break: broke" in subtitles and any(s.startswith("◆ if: ") for s in subtitles)
    line = line_of(EarlyExit, "if delta.abs()")
    assert any(f"◆ break @ _decision_models.py:{line} (broke)" in m[3] for m in marks)
    assert not v.errors
    v.screenshot("decisions")
    v.close()
