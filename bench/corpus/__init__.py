"""The fidelity corpus: real architectures and hand-written edge cases, each checked
against torch.export (see ``_oracle``). ``python bench/fidelity.py`` prints the score."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .edge import EDGE_CASES
from .hf import ARCHITECTURES, shrink

Built = tuple[torch.nn.Module, tuple[Any, ...], dict[str, Any]]


def hf_builder(kind: str) -> Callable[[], Built]:
    def build() -> Built:
        import transformers

        inputs, overrides = ARCHITECTURES[kind]
        config = transformers.AutoConfig.for_model(kind)
        for part in ("text_config", "vision_config"):
            if hasattr(config, part):
                shrink(getattr(config, part))
        shrink(config, **overrides)
        torch.manual_seed(0)
        model = transformers.AutoModel.from_config(config).eval()
        args, kwargs = inputs(config)
        return model, args, kwargs

    return build


CASES: dict[str, Callable[[], Built]] = {
    **{f"hf:{kind}": hf_builder(kind) for kind in ARCHITECTURES},
    **{f"edge:{name}": build for name, build in EDGE_CASES.items()},
}
