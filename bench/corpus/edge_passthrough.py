"""Edge cases of module calls that return a tensor they did not make, in the shapes real
models call them (each found on a transformers model that disagreed with the oracle)."""

from __future__ import annotations

import functools

import torch
from torch import nn

from .edge import Built, _x, case


class AttentionTakingKeywords(nn.Module):
    """A transformers attention: keyword arguments, ``**kwargs`` passed on, a tuple returned."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, hidden_states, scale=None, **kwargs):
        return self.proj(hidden_states) * scale, None


class NormInlineIntoUnpackedCall(nn.Module):
    """ModernBERT's first layer: ``self.attn(self.attn_norm(h), scale=s, **kwargs)`` with an
    Identity norm. The call's arguments are packed into a tuple and a dict (``f(*a, **kw)``),
    which is no container the result escapes in: the residual add reads ``h``, not the norm."""

    def __init__(self) -> None:
        super().__init__()
        self.attn_norm, self.attn = nn.Identity(), AttentionTakingKeywords()

    def forward(self, hidden_states, **kwargs):
        attn_output, _ = self.attn(self.attn_norm(hidden_states), scale=0.5, **kwargs)
        return hidden_states + attn_output


class NormStoredThenRebound(nn.Module):
    """ModernBERT-decoder's first layer: ``residual = h; h = norm(h); h = attn(h)[0];
    h = residual + h``. The add loads ``h``, which held the norm's result and now holds the
    attention's: only ``residual`` holds the tensor, so the add reads what the norm was given."""

    def __init__(self) -> None:
        super().__init__()
        self.attn_norm, self.attn = nn.Identity(), AttentionTakingKeywords()

    def forward(self, hidden_states):
        residual = hidden_states
        hidden_states = self.attn_norm(hidden_states)
        hidden_states = self.attn(hidden_states, scale=0.5)[0]
        hidden_states = residual + hidden_states
        return hidden_states


class Embeddings(nn.Module):
    """A projection whose last call passes its result through (an eval Dropout): embeddings, or
    a layer that ends so."""

    def __init__(self) -> None:
        super().__init__()
        self.proj, self.drop = nn.Linear(4, 4), nn.Dropout(0.1)

    def forward(self, x):
        return self.drop(self.proj(x))


class Embedded(nn.Module):
    """Embeddings that end in a Dropout, then ``layer``, then a head."""

    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        self.embeddings, self.layer, self.out = Embeddings(), layer, nn.Linear(4, 4)

    def forward(self, x):
        return self.out(self.layer(self.embeddings(x)))


@case
def passthrough_inline_into_unpacked_call() -> Built:
    return Embedded(NormInlineIntoUnpackedCall()).eval(), _x(2, 4), {}


@case
def passthrough_stored_then_rebound() -> Built:
    return Embedded(NormStoredThenRebound()).eval(), _x(2, 4), {}


class LearnedPosition(nn.Module):
    """A module whose forward returns its own parameter (a learned position embedding)."""

    def __init__(self) -> None:
        super().__init__()
        self.position = nn.Parameter(torch.randn(4))

    def forward(self):
        return self.position


@case
def module_returns_its_parameter() -> Built:
    """The call ran no op and returned a value made before it, not given to it: it is a node on
    the path from the parameter to its reader, not a call the graph leaves out."""

    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.position, self.a = LearnedPosition(), nn.Linear(4, 4)

        def forward(self, x):
            return self.a(x + self.position())

    return M(), _x(2, 4), {}


class CachedCode(nn.Module):
    """MaskFormer's position embedder: its forward is an ``lru_cache``d function of the shape,
    kept across forwards, so a call on a shape seen before runs no op and returns the tensor
    an earlier call made (in this forward or an earlier one)."""

    @staticmethod
    @functools.lru_cache(maxsize=1)
    def embedding(shape: torch.Size) -> torch.Tensor:
        return torch.arange(shape[-1], dtype=torch.float32).expand(shape) * 0.5

    def forward(self, shape: torch.Size) -> torch.Tensor:
        return self.embedding(shape)


@case
def cached_call_returns_an_earlier_result() -> Built:
    """Every call returns what an earlier call made, in this forward or before it, and runs no
    op: each is a node on the path, none a call the graph lost."""

    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.code, self.a, self.b = CachedCode(), nn.Linear(4, 4), nn.Linear(4, 4)

        def forward(self, x):
            h = self.a(x + self.code(x.shape))
            return self.b(h + self.code(h.shape))

    return M(), _x(2, 4), {}


class NormFirst(nn.Module):
    """A layer whose first call passes its input through (ModernBERT's Identity ``attn_norm``)."""

    def __init__(self) -> None:
        super().__init__()
        self.norm, self.proj = nn.Identity(), nn.Linear(4, 4)

    def forward(self, hidden_states):
        return self.proj(self.norm(hidden_states))


class Collected(nn.Module):
    """transformers 5's ``output_hidden_states``: a forward hook on each layer keeps the first
    layer's argument and every layer's result in a list, returned beside the last result and
    read by a head (so that the oracle, which compares the module calls' reads, sees them)."""

    def __init__(self, first: nn.Module, second: nn.Module) -> None:
        super().__init__()
        self.embed, self.layers, self.head = nn.Linear(4, 4), nn.ModuleList([first, second]), nn.Linear(4, 4)
        self.collected: list[torch.Tensor] = []
        for layer in self.layers:
            layer.register_forward_hook(self._keep)

    def _keep(self, module: nn.Module, args: tuple, output: torch.Tensor) -> None:
        if not self.collected:
            self.collected.append(args[0])
        self.collected.append(output)

    def forward(self, x):
        self.collected = []
        h = self.embed(x)
        for layer in self.layers:
            h = layer(h)
        return h, self.head(torch.stack(self.collected).sum(0))


@case
def hook_keeps_what_a_call_was_given() -> Built:
    """The first layer's hook keeps its argument, which the Identity inside it then passed on:
    the kept tensor reads what the layer was given (the embedding), not the Identity."""
    return Collected(NormFirst(), NormFirst()).eval(), _x(2, 4), {}


@case
def hook_keeps_what_a_call_returned() -> Built:
    """Each layer's hook keeps its result, a Dropout's: the kept tensors read the Dropouts."""
    return Collected(Embeddings(), Embeddings()).eval(), _x(2, 4), {}
