"""Issue 28's exotic-tensor matrix: each tensor kind through each run-time option set either
traces correctly or is refused (or its numbers skipped) in one clear line; it never ends in a
crash blamed on the model."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import pytest
import torch
import torch.nn as nn

import torchatlas


def _nested(layout: torch.layout) -> torch.Tensor:
    return torch.nested.nested_tensor([torch.randn(2, 3), torch.randn(4, 3)], layout=layout)


def _two_tensor() -> torch.Tensor:
    from torch.testing._internal.two_tensor import TwoTensor

    return TwoTensor(torch.randn(2, 3), torch.randn(2, 3))


def _inference() -> torch.Tensor:
    with torch.inference_mode():
        return torch.randn(2, 3)


def _dense(dtype: torch.dtype) -> Callable[[], torch.Tensor]:
    return lambda: (torch.randn(2, 3) * 10).to(dtype)


KINDS: dict[str, Callable[[], torch.Tensor]] = {
    "float32": lambda: torch.randn(2, 3),
    "sparse_coo": lambda: torch.randn(3, 3).relu().to_sparse(),
    "sparse_csr": lambda: torch.randn(3, 3).relu().to_sparse_csr(),
    "sparse_csc": lambda: torch.randn(3, 3).relu().to_sparse_csc(),
    "sparse_bsr": lambda: torch.randn(4, 4).relu().to_sparse_bsr((2, 2)),
    "quantized_per_tensor": lambda: torch.quantize_per_tensor(torch.randn(2, 3), 0.1, 0, torch.quint8),
    "quantized_per_channel": lambda: torch.quantize_per_channel(
        torch.randn(2, 3), torch.tensor([0.1, 0.2]), torch.tensor([0, 0]), 0, torch.qint8
    ),
    "float8_e4m3fn": _dense(torch.float8_e4m3fn),
    "float8_e5m2": _dense(torch.float8_e5m2),
    "uint16": lambda: torch.randint(0, 100, (2, 3)).to(torch.uint16),
    "uint32": lambda: torch.randint(0, 100, (2, 3)).to(torch.uint32),
    "uint64": lambda: torch.randint(0, 100, (2, 3)).to(torch.uint64),
    "bool": lambda: torch.randn(2, 3) > 0,
    "complex64": lambda: torch.randn(2, 3, dtype=torch.complex64),
    "complex128": lambda: torch.randn(2, 3, dtype=torch.complex128),
    "bfloat16": _dense(torch.bfloat16),
    "float16": _dense(torch.float16),
    "int8": _dense(torch.int8),
    "mkldnn": lambda: torch.randn(2, 3).to_mkldnn(),
    "nested_strided": lambda: _nested(torch.strided),
    "nested_jagged": lambda: _nested(torch.jagged),
    "meta": lambda: torch.empty(2, 3, device="meta"),
    "zero_size": lambda: torch.randn(0, 3),
    "zero_dim": lambda: torch.tensor(1.5),
    "expanded": lambda: torch.randn(1, 3).expand(1 << 16, 3),
    "non_contiguous": lambda: torch.randn(3, 4).t(),
    "channels_last": lambda: torch.randn(1, 2, 3, 3).to(memory_format=torch.channels_last),
    "subclass": _two_tensor,
    "requires_grad_leaf": lambda: torch.randn(2, 3, requires_grad=True),
    "inference": _inference,
}

OPTIONS: dict[str, dict] = {
    "trace": {},
    "stats": {"stats": True},
    "save": {"save": ["*", "*:*"]},
    "profile": {"profile": True},
    "aten": {"level": "aten"},
    "backward": {"backward": True},
}


class Inner(nn.Module):
    def forward(self, x):
        return x.clone()


class Model(nn.Module):
    """One module call around one op that keeps the tensor's kind."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = Inner()

    def forward(self, x):
        return self.inner(x)


def _available(kind: str) -> torch.Tensor:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            x = KINDS[kind]()
            Model()(x)
    except (RuntimeError, NotImplementedError, ImportError) as exc:
        pytest.skip(f"{kind}: not available in this torch build ({type(exc).__name__})")
    return x


def test_the_matrix_names_27_kinds_and_6_option_sets() -> None:
    assert len(KINDS) >= 27 and len(OPTIONS) == 6


@pytest.mark.parametrize("option", list(OPTIONS))
@pytest.mark.parametrize("kind", list(KINDS))
def test_an_exotic_tensor_traces_or_is_refused_in_one_line(kind: str, option: str) -> None:
    x = _available(kind)
    if option == "backward" and (x.is_floating_point() or x.is_complex()) and x.is_leaf:
        try:
            x.requires_grad_(True)
        except RuntimeError:
            pass  # a kind that cannot require grad: backward=True says there is nothing to record
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            graph = torchatlas.trace(Model(), x, **OPTIONS[option])
    except Exception as exc:  # a refusal: one line of ours, never the model's failure
        message = str(exc)
        notes = " ".join(getattr(exc, "__notes__", []))
        assert message.startswith("torchatlas:") and "\n" not in message, (type(exc).__name__, message)
        assert "forward failed" not in notes, notes
        return
    ops = [n for n in graph.ir.ops() if n.meta.get("phase", "forward") == "forward"]
    assert ops and [s.path for s in graph.ir.scopes][:2] == ["", "inner"]
    if option == "stats":
        for n in ops:
            stats, skipped = n.meta.get("stats") or [None] * len(n.outputs), n.meta.get("stats_skipped") or []
            for slot in range(len(n.outputs)):
                measured = isinstance(stats[slot], dict)
                assert measured or slot < len(skipped) or n.outputs[slot].numel() == 0, (n.target, slot)
    if option == "save":
        kept = graph.activations()
        assert "inner" in kept or "save_note" in graph.ir.meta
    if option == "profile":
        assert "time_us" in graph.ir.scopes[0].meta or "time_measure" in graph.ir.meta
