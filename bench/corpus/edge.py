"""Hand-written models, one per way a graph can lie: pass-through module calls in every
position, multi-output modules and ops, writes (``.data``, ``max_norm``, buffers in train
mode, keyword ``nn.init``, ``set_``), shared modules, closures, recursion, shape-only
reads, opaque calls (TorchScript, ``torch.compile``) and regions export wraps.

Each builder returns ``(model, args, kwargs)``. Leaf modules (no children) are where the
oracle looks: the interesting op of each case runs inside one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

Built = tuple[nn.Module, tuple[Any, ...], dict[str, Any]]
EDGE_CASES: dict[str, Callable[[], Built]] = {}


def case(fn: Callable[[], Built]) -> Callable[[], Built]:
    EDGE_CASES[fn.__name__] = fn
    return fn


class Scale(nn.Module):
    """A leaf that computes: ``x * 2``."""

    def forward(self, x):
        return x * 2


class PassThrough(nn.Module):
    """A leaf that returns its argument unchanged."""

    def forward(self, x):
        return x


class Chain(nn.Module):
    def __init__(self, *layers: nn.Module) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def _x(*shape: int) -> tuple[torch.Tensor]:
    return (torch.randn(*shape),)


@case
def issue_example() -> Built:  # a -> d -> i -> b
    return Chain(nn.Linear(4, 4), nn.Dropout(0.1), nn.Identity(), nn.Linear(4, 4)).eval(), _x(2, 4), {}


@case
def dropout_first() -> Built:
    return Chain(nn.Dropout(0.2), nn.Linear(4, 4)).eval(), _x(2, 4), {}


@case
def dropout_last() -> Built:
    return Chain(nn.Linear(4, 4), nn.Dropout(0.2)).eval(), _x(2, 4), {}


@case
def dropout_inplace_eval() -> Built:
    return Chain(nn.Linear(4, 4), nn.Dropout(0.2, inplace=True), nn.Linear(4, 4)).eval(), _x(2, 4), {}


@case
def dropout_p0_train() -> Built:
    return Chain(nn.Linear(4, 4), nn.Dropout(0.0), nn.ReLU()).train(), _x(2, 4), {}


@case
def identity_nested() -> Built:
    inner = nn.Sequential(nn.Identity(), nn.Sequential(nn.Identity(), nn.Linear(4, 4)), nn.Identity())
    return Chain(inner, PassThrough(), nn.Linear(4, 2)).eval(), _x(2, 4), {}


@case
def passthrough_user_module() -> Built:
    return Chain(Scale(), PassThrough(), PassThrough(), Scale()), _x(3), {}


class TupleOut(nn.Module):
    def forward(self, x):
        return x, x.sum(-1)


class TakesPair(nn.Module):
    def forward(self, pair):
        a, b = pair
        return a * b.unsqueeze(-1)


@case
def passthrough_in_tuple() -> Built:
    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.pre, self.pair, self.post = Scale(), TupleOut(), TakesPair()

        def forward(self, x):
            return self.post(self.pair(self.pre(x)))

    return M(), _x(2, 3), {}


class Halves(nn.Module):
    def forward(self, x):
        return {"low": x[:, :2] * 1, "high": x[:, 2:] + 1}


@case
def returns_dict() -> Built:
    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.split, self.a, self.b = Halves(), nn.Linear(2, 3), nn.Linear(3, 3)

        def forward(self, x):
            parts = self.split(x)
            return self.a(parts["low"]) + self.b(parts["high"])

    return M(), _x(2, 5), {}


@dataclasses.dataclass
class Pair:
    first: torch.Tensor
    second: torch.Tensor


@case
def returns_dataclass() -> Built:
    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

        def forward(self, x):
            return Pair(self.a(x), self.b(x))

    return M(), _x(2, 4), {}


class SecondPart(nn.Module):
    def forward(self, x):
        return torch.split(x, [2, 5], dim=-1)[1]


@case
def split_second_output() -> Built:
    return Chain(SecondPart(), nn.Linear(5, 2)), _x(1, 7), {}


class ArgMax(nn.Module):
    def forward(self, x):
        return x.max(-1).indices


@case
def max_indices() -> Built:
    return Chain(nn.Linear(4, 10), ArgMax(), nn.Embedding(10, 3)), _x(2, 4), {}


class Chunks(nn.Module):
    def forward(self, x):
        a, b = x.chunk(2, dim=-1)
        return a * torch.sigmoid(b)


@case
def multi_output_op() -> Built:
    return Chain(nn.Linear(4, 8), Chunks(), nn.Linear(4, 4)), _x(2, 4), {}


class WritesData(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("state", torch.zeros(4))

    def forward(self, x):
        self.state.data = x.mean(0).detach()
        return x


class ReadsState(nn.Module):
    def __init__(self, owner: WritesData) -> None:
        super().__init__()
        self.owner = [owner]  # not a child: this stays a leaf

    def forward(self, x):
        return x + self.owner[0].state


@case
def data_setter_write() -> Built:
    writer = WritesData()
    return Chain(nn.Linear(4, 4), writer, ReadsState(writer)), _x(2, 4), {}


@case
def weight_data_write() -> Built:
    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.src, self.dst = nn.Linear(4, 4), nn.Linear(4, 4)

        def forward(self, x):
            self.dst.weight.data = self.src.weight.data * 0.5
            return self.dst(self.src(x))

    return M(), _x(2, 4), {}


@case
def embedding_max_norm_twice() -> Built:
    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(10, 4, max_norm=1.0)

        def forward(self, ids):
            return self.emb(ids) + self.emb(ids.flip(-1))

    return M(), (torch.tensor([[1, 2, 3]]),), {}


@case
def batchnorm_train_buffers() -> Built:
    return Chain(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU()).train(), _x(2, 3, 8, 8), {}


class Counter(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("seen", torch.zeros(1))

    def forward(self, x):
        self.seen.copy_(x.sum().detach().reshape(1))  # written, not accumulated: each pass alike
        return x


class UsesCount(nn.Module):
    def __init__(self, counter: Counter) -> None:
        super().__init__()
        self.counter = [counter]

    def forward(self, x):
        return x * self.counter[0].seen


@case
def buffer_written_then_read() -> Built:
    counter = Counter()
    return Chain(nn.Linear(3, 3), counter, UsesCount(counter)), _x(2, 3), {}


@case
def shared_module_twice() -> Built:
    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.shared, self.mix = nn.Linear(4, 4), nn.Linear(8, 4)

        def forward(self, x):
            a = self.shared(x)
            b = self.shared(torch.relu(a))
            return self.mix(torch.cat([a, b], -1))

    return M(), _x(2, 4), {}


@case
def closure_calls_module() -> Built:
    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj, self.out = nn.Linear(4, 4), nn.Linear(4, 2)

        def forward(self, x):
            def step(v):
                return torch.tanh(self.proj(v))

            return self.out(step(step(x)))

    return M(), _x(2, 4), {}


class Recursive(nn.Module):
    def __init__(self, depth: int) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.inner = Recursive(depth - 1) if depth > 1 else None

    def forward(self, x):
        x = torch.relu(self.lin(x))
        return self.inner(x) + x if self.inner is not None else x


@case
def recursion() -> Built:
    return Recursive(4), _x(2, 4), {}


class ShapeOnly(nn.Module):
    def forward(self, x, like):
        return x.reshape_as(like) + torch.zeros_like(like) + like.new_zeros(like.shape)


@case
def shape_only_reads() -> Built:
    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b, self.reshape = nn.Linear(6, 6), nn.Linear(6, 6), ShapeOnly()

        def forward(self, x):
            return self.reshape(self.a(x), self.b(x).view(3, 4))

    return M(), _x(2, 6), {}


class InitByKeyword(nn.Module):
    def forward(self, x):
        out = x.clone()
        nn.init.constant_(tensor=out[:, :1], val=0.5)
        return out


@case
def init_by_keyword() -> Built:
    return Chain(nn.Linear(4, 4), InitByKeyword(), nn.Linear(4, 4)), _x(2, 4), {}


class Repoint(nn.Module):
    def forward(self, x):
        holder = torch.empty(0)
        holder.set_(x.clone())
        return holder * 3


@case
def set_repoints() -> Built:
    return Chain(nn.Linear(4, 4), Repoint(), nn.Linear(4, 4)), _x(2, 4), {}


class SetItem(nn.Module):
    def forward(self, x):
        y = x.clone()
        y[:, 0] = x[:, 1] * 2
        return y


@case
def setitem_write() -> Built:
    return Chain(nn.Linear(4, 4), SetItem(), nn.Linear(4, 4)), _x(2, 4), {}


@case
def inplace_activations() -> Built:
    return Chain(nn.Linear(4, 4), nn.ReLU(inplace=True), nn.Linear(4, 4), nn.Hardtanh(inplace=True)), _x(2, 4), {}


@case
def residual_and_cat_skips() -> Built:
    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.down, self.mid, self.up = nn.Conv2d(2, 4, 3, padding=1), nn.Conv2d(4, 4, 3, padding=1), nn.Conv2d(8, 2, 1)

        def forward(self, x):
            d = torch.relu(self.down(x))
            m = torch.relu(self.mid(d)) + d
            return self.up(torch.cat([m, d], 1)) + x

    return M(), _x(1, 2, 8, 8), {}


@case
def parallel_branches_coolcnn() -> Built:
    from torchatlas import _example

    return _example.CoolCNN().eval(), (_example.example_input(),), {}


@case
def module_in_a_loop() -> Built:
    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.cell, self.head = nn.Linear(4, 4), nn.Linear(4, 1)

        def forward(self, x):
            h = torch.zeros_like(x[:, 0])
            for t in range(x.shape[1]):
                h = torch.tanh(self.cell(x[:, t] + h))
            return self.head(h)

    return M(), _x(2, 5, 4), {}


@case
def gru_and_lstm() -> Built:
    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gru, self.lstm, self.head = nn.GRU(4, 6, batch_first=True), nn.LSTM(6, 5, batch_first=True), nn.Linear(5, 2)

        def forward(self, x):
            out, _ = self.gru(x)
            out, (h, _) = self.lstm(out)
            return self.head(out[:, -1]) + h[-1].sum()

    return M().eval(), _x(2, 7, 4), {}


@case
def lstm_packed_sequence() -> Built:
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm, self.head = nn.LSTM(4, 6, batch_first=True), nn.Linear(6, 2)

        def forward(self, x, lengths):
            packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
            out, _ = pad_packed_sequence(self.lstm(packed)[0], batch_first=True)
            return self.head(out)

    return M().eval(), (torch.randn(3, 5, 4), torch.tensor([5, 3, 2])), {}


class Scripted(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fn = torch.jit.script(_scaled_tanh)

    def forward(self, x):
        return self.fn(x)


def _scaled_tanh(x: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x) * 2


@case
def torchscript_function() -> Built:
    return Chain(nn.Linear(4, 4), Scripted(), nn.Linear(4, 4)), _x(2, 4), {}


@case
def compiled_submodule() -> Built:
    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.block, self.b = nn.Linear(4, 4), torch.compile(nn.Linear(4, 4), backend="eager"), nn.Linear(4, 4)

        def forward(self, x):
            return self.b(torch.relu(self.block(self.a(x))))

    return M(), _x(2, 4), {}


class NoGradPart(nn.Module):
    def forward(self, x):
        with torch.no_grad():
            y = x * 3
        return y + x


@case
def no_grad_region() -> Built:
    return Chain(nn.Linear(4, 4), NoGradPart(), nn.Linear(4, 4)), _x(2, 4), {}


class AutocastPart(nn.Module):
    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = x @ x.transpose(-1, -2)
        return y.float().sum(-1, keepdim=True) * x


@case
def autocast_region() -> Built:
    return Chain(nn.Linear(4, 4), AutocastPart(), nn.Linear(4, 4)), _x(2, 4), {}


@case
def attention_block() -> Built:
    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv, self.out, self.norm = nn.Linear(8, 24), nn.Linear(8, 8), nn.LayerNorm(8)

        def forward(self, x):
            q, k, v = self.qkv(self.norm(x)).chunk(3, -1)
            return x + self.out(F.scaled_dot_product_attention(q, k, v, is_causal=True))

    return M().eval(), _x(1, 5, 8), {}


@case
def transformer_encoder_layer() -> Built:
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, batch_first=True)
    return nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval(), _x(1, 5, 8), {}


@case
def type_as_own_dtype() -> Built:
    """Funnel's mask: ``type_as`` of its own dtype returns the mask itself; a later read of the
    mask through the name bound before it reads the mask, not the tensor whose dtype was asked."""

    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(4, 4), Scale()

        def forward(self, x, mask):
            h = self.a(x)
            typed = mask.type_as(h)
            return h * typed, self.b(mask)

    return M(), _x(2, 4), {"mask": torch.ones(2, 4)}


class Rotary(nn.Module):
    """Bailing-hybrid's rotary embedding in small: its result converted to the input's dtype."""

    def forward(self, x):
        return (x.cos() * 2).to(dtype=x.dtype)


@case
def unused_result_converted() -> Built:
    """A module called whose result no one reads (every layer of that kind ignores it): its
    ops reach no output, though export keeps the check its ``.to`` adds."""

    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rotary, self.a = Rotary(), nn.Linear(4, 4)

        def forward(self, x):
            self.rotary(x)
            return self.a(x)

    return M(), _x(2, 4), {}


@case
def functional_dropout_eval() -> Built:
    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

        def forward(self, x):
            return self.b(F.dropout(self.a(x), 0.5, self.training))

    return M().eval(), _x(2, 4), {}
