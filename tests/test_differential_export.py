"""Differential: leaf-module data flow equals torch.export's on transformers models.

The reduction and the comparison live in ``bench/corpus/_oracle.py``, shared with the
fidelity corpus (``tests/test_fidelity_corpus.py``, ``python bench/fidelity.py``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from corpus._oracle import check, leaf_flow  # noqa: E402

transformers = pytest.importorskip("transformers")


def tiny(model_type: str, **overrides: Any) -> nn.Module:
    config = transformers.AutoConfig.for_model(model_type, **overrides)
    torch.manual_seed(0)
    return transformers.AutoModel.from_config(config).eval()


def llama() -> tuple[nn.Module, tuple, dict]:
    model = tiny(
        "llama", num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=1000,
    )
    return model, (torch.randint(0, 1000, (1, 8)),), {"use_cache": False}


def bert() -> tuple[nn.Module, tuple, dict]:
    model = tiny(
        "bert", num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4, vocab_size=1000,
    )
    ids = torch.randint(0, 1000, (1, 8))
    return model, (ids,), {"attention_mask": torch.ones_like(ids)}


def t5() -> tuple[nn.Module, tuple, dict]:
    model = tiny("t5", num_layers=2, num_decoder_layers=2, d_model=64, d_ff=128, d_kv=16, num_heads=4, vocab_size=1000)
    ids = torch.randint(0, 1000, (1, 8))
    return model, (ids,), {"decoder_input_ids": ids[:, :5], "use_cache": False}


def vit() -> tuple[nn.Module, tuple, dict]:
    model = tiny(
        "vit", num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4, image_size=32,
        patch_size=8,
    )
    return model, (torch.randn(1, 3, 32, 32),), {}


@pytest.mark.filterwarnings("ignore::FutureWarning")  # raised inside torch.export
@pytest.mark.parametrize(
    "make",
    [pytest.param(llama, marks=pytest.mark.slow), bert, pytest.param(t5, marks=pytest.mark.slow), vit],
    ids=lambda f: f.__name__,
)
def test_leaf_module_flow_equals_torch_export(make) -> None:
    model, args, kwargs = make()
    verdict = check(make.__name__, model, args, kwargs)
    assert (verdict.status, verdict.detail) == ("agrees", "")


def test_leaf_flow_passes_through_ops_outside_leaf_modules() -> None:
    """The comparison itself: a value that goes a -> (op) -> (op) -> b makes a feed b."""
    edges = {"a1": [], "a2": ["a1"], "x": ["a2"], "y": ["x", "in"], "b1": ["y"], "c1": ["a1", "b1"]}
    leaf = {"a1": ("a", 0), "a2": ("a", 0), "b1": ("b", 0), "c1": ("c", 0)}
    graph = (list(edges), leaf.get, edges.__getitem__)
    assert leaf_flow(graph) == {("a", 0): set(), ("b", 0): {("a", 0)}, ("c", 0): {("a", 0), ("b", 0)}}
    assert leaf_flow(graph, transparent=frozenset({("b", 0)})) == {("a", 0): set(), ("c", 0): {("a", 0)}}
