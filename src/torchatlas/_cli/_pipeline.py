"""``--pp N`` (with ``--ranks``): a Llama-like decoder (or causal LM) cut into N pipeline stages, run by
``torch.distributed.pipelining``'s GPipe schedule, each stage on the ``pp`` dimension of the
mesh (the outer one) and, with ``--tp``, tensor-parallel over ``tp`` within it.

Stage ``s`` of N holds decoder layers ``[L·s/N, L·(s+1)/N)`` (paths keep their numbers:
``stage1.layers.25``), the embedding on the first stage and the final norm and head on the
last (and the head, where the model has one). Each stage is given its input and output shapes (``input_args``/``output_args``), so
no shapes are exchanged (on ``meta`` they could not be), and the batch's rows are the
microbatches.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ._spec import SpecError


class DecoderStage(nn.Module):
    """Decoder layers ``[first, last)`` of a Llama-like causal LM, with its embedding on the
    first stage and its final norm and head on the last."""

    def __init__(self, model: nn.Module, stage: int, stages: int) -> None:
        super().__init__()
        inner = _decoder(model)
        count = len(inner.layers)
        first, last = count * stage // stages, count * (stage + 1) // stages
        self.config = model.config  # the head counts --tp checks
        self.embed_tokens = inner.embed_tokens if stage == 0 else None
        self.layers = nn.ModuleDict({str(i): inner.layers[i] for i in range(first, last)})
        self.rotary_emb = inner.rotary_emb
        self.norm = inner.norm if stage == stages - 1 else None
        self.lm_head = getattr(model, "lm_head", None) if stage == stages - 1 else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.embed_tokens(x) if self.embed_tokens is not None else x
        positions = torch.arange(hidden.shape[1], device=hidden.device).unsqueeze(0)
        position_embeddings = self.rotary_emb(hidden, position_ids=positions)
        for layer in self.layers.values():  # no mask: SDPA attends causally without one
            hidden = layer(hidden, position_ids=positions, position_embeddings=position_embeddings)
        if self.norm is not None:
            hidden = self.norm(hidden)
        return self.lm_head(hidden) if self.lm_head is not None else hidden


def _decoder(model: nn.Module) -> Any:
    """The decoder of a Llama-like model: the model itself (``--task base``) or its ``model``."""
    return model if hasattr(model, "layers") else getattr(model, "model", None)


def check_cuttable(model: Any, stages: int, spec: str) -> None:
    inner = _decoder(model)
    if not all(hasattr(inner, name) for name in ("layers", "embed_tokens", "norm", "rotary_emb")):
        raise SpecError(f"--pp cuts Llama-like decoders (layers, embed_tokens, norm, rotary_emb); {spec} is not one")
    if stages > len(inner.layers):
        raise SpecError(f"--pp {stages}: {spec} has {len(inner.layers)} decoder layers, fewer than the stages")


def stage_of(model: nn.Module, mesh: Any, stages: int, spec: str) -> DecoderStage:
    """This rank's stage of ``model`` (its index: this rank's place on the ``pp`` dimension)."""
    check_cuttable(model, stages, spec)
    return DecoderStage(model, mesh.get_local_rank("pp"), stages)


def schedule(stage: DecoderStage, mesh: Any, tokens: torch.Tensor) -> Any:
    """The GPipe schedule of ``stage`` for a batch of ``tokens`` (one microbatch per row)."""
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

    index, stages = mesh.get_local_rank("pp"), mesh["pp"].size()
    rows, length = 1, tokens.shape[1]
    config, device = stage.config, tokens.device
    dtype = next(stage.parameters()).dtype
    hidden = torch.empty(rows, length, config.hidden_size, dtype=dtype, device=device)
    given = {
        "input_args": tokens[:rows] if index == 0 else hidden,
        "output_args": hidden if index < stages - 1 or stage.lm_head is None else torch.empty(
            rows, length, config.vocab_size, dtype=dtype, device=device
        ),
    }
    made = PipelineStage(stage, index, stages, device, group=mesh.get_group("pp"), **given)
    return ScheduleGPipe(made, n_microbatches=int(tokens.shape[0]))
