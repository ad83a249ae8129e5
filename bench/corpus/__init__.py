"""The fidelity corpus: real architectures and hand-written edge cases, each checked
against torch.export (see ``_oracle``). ``python bench/fidelity.py`` prints the score.

``CASES`` is the sample the test suite holds to it (the hand-tuned transformers
architectures, a few of them also with every hidden state and attention map returned, and
the edge cases); :func:`corpus_cases` is the whole corpus, every transformers model type
twice (``hf_all``), the edge cases and the vision and diffusion zoo (``zoo``: ``timm:``,
``diffusers:``), which ``bench/fidelity.py`` runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from . import edge_oracle, edge_passthrough  # noqa: F401 (their cases register themselves in EDGE_CASES)
from .edge import EDGE_CASES
from .hf import ARCHITECTURES
from .hf_all import OUTPUTS, all_hf_cases, hf_builder
from .zoo import corpus as zoo_corpus

Built = tuple[torch.nn.Module, tuple[Any, ...], dict[str, Any]]

# Returned hidden states carry pass-through results out of the model (BERT's embeddings'
# Dropout is hidden_states[0]): a few in the sample, the rest in the whole corpus.
SAMPLED_WITH_OUTPUTS = ("bert", "deberta-v2", "t5", "vit")  # GPT-2 in this transformers takes neither flag

CASES: dict[str, Callable[[], Built]] = {
    **{f"hf:{kind}": hf_builder(kind, outputs=False) for kind in ARCHITECTURES},
    **{f"hf:{kind}{OUTPUTS}": hf_builder(kind, outputs=True) for kind in SAMPLED_WITH_OUTPUTS},
    **{f"edge:{name}": build for name, build in EDGE_CASES.items()},
}


def corpus_cases() -> dict[str, Callable[[], Built]]:
    """Every case: each transformers model type twice (those of ``ARCHITECTURES`` that the
    list of base models lacks too), then the edge cases, then the zoo."""
    every = all_hf_cases()
    for kind in ARCHITECTURES:
        every.setdefault(f"hf:{kind}", hf_builder(kind, outputs=False))
        every.setdefault(f"hf:{kind}{OUTPUTS}", hf_builder(kind, outputs=True))
    return {**every, **{f"edge:{name}": build for name, build in EDGE_CASES.items()}, **zoo_corpus()}
