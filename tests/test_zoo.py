"""The vision and diffusion zoo (issue 31): one timm model per architecture family and the
diffusers models trace with eager's outputs, leave nothing installed, and their trees tell
the story (a numbered listing in under 3% of them). ``python bench/zoo.py`` reports the same."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import torchatlas

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from corpus.zoo import DIFFUSERS, TIMM, check_zoo_model, corpus  # noqa: E402
from test_capture_passthrough import passthrough_flow  # noqa: E402

pytestmark = pytest.mark.slow


def test_the_zoo_is_large_enough() -> None:
    assert len(TIMM) >= 40 and set(DIFFUSERS) >= {
        "UNet2D", "UNet2DCondition", "AutoencoderKL", "VQ", "DiT", "SD3", "Flux", "ControlNet", "UNet1D",
    }


@pytest.fixture
def one_thread():
    """One intra-op thread: the zoo is many small models, for which more threads only wait."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_every_zoo_model_traces_truly_and_trees_rarely_list(one_thread) -> None:
    pytest.importorskip("timm")
    pytest.importorskip("diffusers")
    results = [check_zoo_model(name, build) for name, build in corpus().items()]
    failures = [f"{r.name}: {r.error}" for r in results if r.error]
    assert not failures, "\n".join(failures)
    listed = [r.name for r in results if r.listing]
    assert len(listed) / len(results) < 0.03, listed


def test_the_real_blocks_read_their_values_by_name(one_thread) -> None:
    """The real DiT block names its modulation values where they are read, ReXNet's partial
    residual names the shortcut and a DenseNet layer reads ``features[0..k]``: the hand-made
    goldens (test_tree_zoo_goldens.py) hold for them."""
    pytest.importorskip("timm")
    pytest.importorskip("diffusers")
    models = corpus()
    model, args, kwargs = models["diffusers:DiT"]()
    tree = torchatlas.trace(model, args, kwargs).tree()
    assert "← gate_msa" in tree and "← gate_mlp" in tree and "← shift_mlp" in tree
    model, args, kwargs = models["timm:rexnet_100"]()
    lines = torchatlas.trace(model, args, kwargs).tree().splitlines()
    block = lines[next(k for k, line in enumerate(lines) if line.endswith("── 2 (LinearBottleneck)") or " 2 (LinearBottleneck) " in line) :]
    assert any("add (+)" in line and "←" in line for line in block[:40])
    model, args, kwargs = models["timm:densenet121"]()
    tree = torchatlas.trace(model, args, kwargs).tree()
    assert "denselayer6 (DenseLayer)" in tree and "← features[0..4]" in tree


@pytest.mark.filterwarnings("ignore::FutureWarning")  # raised inside torch.export
@pytest.mark.parametrize("name", ["timm:dla34", "timm:xception41", "diffusers:UNet1D"])
def test_pass_through_calls_are_read_as_export_with_clones_says(name: str, one_thread) -> None:
    """Three of the families where a pass-through call took another path's reader (issue 31):
    their leaf-module flow equals torch.export's with each Dropout and Identity cloning."""
    pytest.importorskip("timm")
    pytest.importorskip("diffusers")
    model, args, _ = corpus()[name]()
    got, want = passthrough_flow(model, *args)
    assert got == want
