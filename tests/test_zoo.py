"""The vision and diffusion zoo (issue 31): one timm model per architecture family and the
diffusers models trace with eager's outputs, leave nothing installed, and their trees tell
the story (a numbered listing in under 3% of them). ``python bench/zoo.py`` reports the same."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from corpus.zoo import DIFFUSERS, TIMM, check_zoo_model, corpus  # noqa: E402

pytestmark = pytest.mark.slow


def test_the_zoo_is_large_enough() -> None:
    assert len(TIMM) >= 40 and set(DIFFUSERS) >= {
        "UNet2D", "UNet2DCondition", "AutoencoderKL", "VQ", "DiT", "SD3", "Flux", "ControlNet", "UNet1D",
    }


def test_every_zoo_model_traces_truly_and_trees_rarely_list() -> None:
    pytest.importorskip("timm")
    pytest.importorskip("diffusers")
    results = [check_zoo_model(name, build) for name, build in corpus().items()]
    failures = [f"{r.name}: {r.error}" for r in results if r.error]
    assert not failures, "\n".join(failures)
    listed = [r.name for r in results if r.listing]
    assert len(listed) / len(results) < 0.03, listed
