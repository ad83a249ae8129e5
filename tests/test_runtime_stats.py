"""``trace(stats=True)`` measures only what holds numbers, never fails the model, and computes
on an accelerator the same numbers as on a CPU (the device path is run here on CPU tensors)."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import torchatlas
from torchatlas._capture import _stats


class Returns(nn.Module):
    """Returns what ``make`` builds from its input, through one recorded op."""

    def __init__(self, make) -> None:
        super().__init__()
        self.make = make

    def forward(self, x):
        return self.make(x * 1.0)


def _only_output_stats(graph):
    op = list(graph.ir.ops())[-1]
    return op.meta.get("stats"), op.meta.get("stats_skipped")


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda h: h.to_sparse(), "sparse_coo layout"),
        (lambda h: h.to_sparse_csr(), "sparse_csr layout"),
        (lambda h: torch.quantize_per_tensor(h, 0.1, 0, torch.quint8), "quantized"),
        (lambda h: h.to(torch.float8_e4m3fn), "float8_e4m3fn is not measured"),
        (lambda h: h.abs().to(torch.uint16), "uint16 is not measured"),
        (lambda h: h.to(torch.complex64), "complex64 is not measured"),
    ],
)
def test_outputs_without_numbers_are_skipped_with_the_reason(make, reason) -> None:
    graph = torchatlas.trace(Returns(make), torch.randn(2, 3), stats=True)
    stats, skipped = _only_output_stats(graph)
    assert (stats is None or stats[0] is None) and reason in skipped[0]
    assert "no statistics" in graph.ir.meta["stats_note"]
    assert next(graph.ir.ops()).meta["stats"][0]["max"] is not None  # x * 1.0 is measured


@pytest.mark.parametrize("layout", [torch.strided, torch.jagged])
def test_nested_outputs_are_skipped(layout) -> None:
    nested = torch.nested.nested_tensor([torch.randn(2, 3), torch.randn(4, 3)], layout=layout)
    graph = torchatlas.trace(Returns(lambda h: h), nested, stats=True)
    (op,) = graph.ir.ops()
    assert op.meta.get("stats", [None])[0] is None and "not measured" in op.meta["stats_skipped"][0]


def test_a_failing_measurement_is_never_the_models_failure(monkeypatch) -> None:
    def broken(x):
        raise RuntimeError("no kernel for this")

    monkeypatch.setattr(_stats, "_float_numbers_now", broken)
    graph = torchatlas.trace(nn.Linear(3, 3), torch.randn(2, 3), stats=True)
    (op,) = graph.ir.ops()
    assert op.meta["stats_skipped"] == ["could not be measured: RuntimeError: no kernel for this"]
    assert graph.error is None


def _device_row(x: torch.Tensor) -> list[float]:
    row = torch.zeros(_stats._COLUMNS, dtype=_stats._row_dtype(x.dtype))
    (_stats._float_numbers_into if x.dtype.is_floating_point else _stats._int_numbers_into)(x, row)
    return row.tolist()


@pytest.mark.parametrize("chunk", [500, None])  # several NaN/Inf slices, counts added up; one slice
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_the_device_path_computes_the_cpu_paths_numbers(dtype, chunk, monkeypatch) -> None:
    x = torch.randn(64, 33).to(dtype)
    x[3, 4], x[5, 6], x[7, 8], x[1, 1] = float("nan"), float("inf"), -float("inf"), 0.0
    if chunk:
        monkeypatch.setattr(_stats, "_CHUNK", chunk)
    for t in (x, x.t(), x[:, ::2]):
        now = _stats._float_stats(_stats._float_numbers_now(t), t.numel())
        on_device = _stats._float_stats(_device_row(t), t.numel())
        assert on_device.keys() == now.keys()
        for key, value in now.items():
            assert on_device[key] == (pytest.approx(value, rel=1e-5) if value is not None else None), key
        assert (on_device["nan"], on_device["inf"]) == (1, 2)


def test_the_device_path_for_integers_and_bool() -> None:
    ints = torch.tensor([[3, -7], [2, 9]])
    assert _stats._int_stats(_device_row(ints)) == {"min": -7, "max": 9}
    assert _stats._int_stats(_device_row(ints.to(torch.int8))) == {"min": -7, "max": 9}
    assert _stats._int_stats(_device_row(torch.tensor([True, False]))) == {"min": 0, "max": 1}
    assert _stats._int_stats(_stats._int_numbers_now(torch.tensor([True, True]))) == {"min": 1, "max": 1}


def test_a_sample_measures_a_strided_view_of_big_outputs_and_says_so() -> None:
    x = torch.arange(1 << 18, dtype=torch.float32).reshape(512, 512)
    sample = _stats.sample_of(x, _stats.SAMPLE)
    assert sample.numel() == _stats.SAMPLE and sample.data_ptr() == x.data_ptr()  # a view, not a copy
    assert _stats.sample_of(x.t(), _stats.SAMPLE).numel() <= 2 * _stats.SAMPLE
    graph = torchatlas.trace(Returns(lambda h: h), x, stats="sample")
    (stats,) = next(graph.ir.ops()).meta["stats"]
    assert stats["sampled"] == _stats.SAMPLE and stats["min"] == 0.0
    assert "strided sample" in graph.ir.meta["stats_note"]
    class Wrapped(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = Returns(lambda h: h)

        def forward(self, h):
            return self.inner(h)

    text = torchatlas.trace(Wrapped(), x, stats="sample").summary(format="text", wide=True)
    assert "≈[0, " in next(line for line in text.splitlines() if "inner" in line)  # the range is a sample's
    from torchatlas._render._html import viewer_document

    page = viewer_document(graph.ir)
    assert any(st and st.get("sampled") == _stats.SAMPLE for n in page["nodes"] for st in n.get("st") or [])
    small = torchatlas.trace(Returns(lambda h: h), torch.randn(4, 4), stats="sample")
    assert "sampled" not in next(small.ir.ops()).meta["stats"][0]
    with pytest.raises(ValueError, match="stats must be"):
        torchatlas.trace(nn.Linear(2, 2), torch.randn(1, 2), stats="all")


# -- save= ---------------------------------------------------------------------------------------


class Broadcasts(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bias = nn.Identity()

    def forward(self, x):
        return self.bias(x.expand(1 << 20, 1 << 20, 4))  # 4 numbers shown 2**40 times


def test_an_expanded_view_is_kept_as_its_few_numbers() -> None:
    x = torch.randn(1, 1, 4)
    kept = torchatlas.trace(Broadcasts(), x, save="bias").activation("bias")
    assert kept.shape == (1 << 20, 1 << 20, 4) and kept.untyped_storage().nbytes() == 16
    assert torch.equal(kept[123, 456], x[0, 0])
    moved = torchatlas.trace(Broadcasts(), x, save="bias", save_device="cpu").activation("bias")
    assert moved.untyped_storage().nbytes() == 16


def test_module_names_with_a_colon_are_kept() -> None:
    model = nn.ModuleDict({"expert:0": nn.Linear(2, 2), "expert:1": nn.Linear(2, 2)})
    wrapper = Returns(lambda h: model["expert:1"](model["expert:0"](h)))
    wrapper.experts = model
    graph = torchatlas.trace(wrapper, torch.randn(1, 2), save="experts.*")
    assert sorted(graph.activations()) == ["experts.expert:0", "experts.expert:1"]
    assert sorted(torchatlas.trace(wrapper, torch.randn(1, 2), save="*").activations()) == [
        "experts.expert:0", "experts.expert:1"]  # the ModuleDict itself is never called
    ops = torchatlas.trace(wrapper, torch.randn(1, 2), save="experts.expert:0:linear").activations()
    assert len(ops) == 1 and next(iter(ops)).startswith("n")


class FailsLate(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.big = nn.Linear(8, 1 << 14)

    def forward(self, x):
        self.big(x)
        raise KeyError("late")


def test_a_failed_forward_keeps_no_saved_copy_alive(monkeypatch) -> None:
    import gc
    import weakref

    from torchatlas._capture import _runtime

    copies: list[weakref.ref] = []
    real = _runtime.Keeper._copy_tensor

    def watched(self, value):
        kept = real(self, value)
        if isinstance(kept, torch.Tensor):
            copies.append(weakref.ref(kept))
        return kept

    monkeypatch.setattr(_runtime.Keeper, "_copy_tensor", watched)
    with pytest.raises(KeyError) as caught:
        torchatlas.trace(FailsLate(), torch.randn(64, 8), save="*")
    gc.collect()
    assert copies and all(ref() is None for ref in copies)
    assert caught.value is not None  # the exception and its traceback are still alive here


def test_the_cli_samples_with_stats_sample(capsys) -> None:
    from torchatlas._cli import main

    assert main(["--stats-sample", "--input", "1,3,256,256", "-f", "summary", "--wide"]) == 0
    out = capsys.readouterr().out
    assert "Output range" in out.splitlines()[0] and "≈[" in out  # CoolCNN's big outputs are sampled
    assert main(["--stats", "-f", "summary", "--wide"]) == 0
    assert "≈[" not in capsys.readouterr().out


class ManyOps(nn.Module):
    def forward(self, x):
        for k in range(300):  # more outputs than a buffer's first 256 rows
            x = x * 1.01 + (k % 3)
        return (x > 0).sum(), torch.nan_to_num(x / 0.0, posinf=1.0)


def test_the_buffered_device_path_end_to_end_equals_the_cpus(monkeypatch) -> None:
    x = torch.randn(4, 8)
    x[0, 0] = 0.0
    read_now = torchatlas.trace(ManyOps(), x, stats=True)
    monkeypatch.setattr(_stats, "_READ_AT_ONCE", frozenset())  # the accelerator's path, on CPU tensors
    buffered = torchatlas.trace(ManyOps(), x, stats=True)
    pairs = list(zip(read_now.ir.ops(), buffered.ir.ops()))
    assert len(pairs) > 600
    for a, b in pairs:
        for sa, sb in zip(a.meta["stats"], b.meta["stats"]):
            assert sa.keys() == sb.keys(), a.target
            for key, value in sa.items():
                # small outputs are staged and summed in another order: the std, from the sum
                # of squares (about n * (mean² + std²), rounded to float32 on the CPU's side),
                # cancels where the mean dwarfs the spread (here up to 300 against 1), so each
                # side's rounding shows in it as a few float32 ulps of (mean² + std²) / std
                spread = 8 * 2**-23 * (sa["mean"] ** 2 + value**2) / value if key == "std" and value else 0.0
                want = pytest.approx(value, rel=1e-5, abs=1e-6 + spread) if value is not None else None
                assert sb[key] == want, (a.target, key)
