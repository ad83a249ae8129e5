"""On a CUDA device: the capture is the CPU's, it adds no host-device sync, and the run-time
options (stats, save, profile, backward, compile_report) work there. The CUDA tests are marked
``gpu``: collected everywhere, skipped where torch sees no CUDA device (``./dev test-gpu``).
Those whose body holds for any device also run on the CPU (``device`` is ``"cpu"``), with the
statistics taking the accelerator's path (a buffer read once at the end), so that what the
GPU session runs is exercised on every machine."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn as nn
from _capture_helpers import load_coolcnn, wiring

import torchatlas
from torchatlas import _capture
from torchatlas._capture import _stats

CUDA = "cuda"


@pytest.fixture(params=[pytest.param(CUDA, marks=pytest.mark.gpu), "cpu"])
def device(request, monkeypatch) -> str:
    if request.param == "cpu":
        monkeypatch.setattr(_stats, "_READ_AT_ONCE", frozenset())  # the accelerator's buffered path
    return request.param


class Mlp(nn.Module):
    """Syncs nowhere: no .item(), no data-dependent shape, no host copy."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(64)
        self.up = nn.Linear(64, 256)
        self.down = nn.Linear(256, 64)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


class DividesByZero(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        h = torch.relu(self.fc(x))
        return h / (h.sum(-1, keepdim=True) * 0.0)


def _structure(graph):
    ir = graph.ir
    return wiring(ir), [(s.path, s.cls, s.parent) for s in ir.scopes], [
        [tuple(o.shape) for o in n.outputs] for n in ir.ops()
    ]


@pytest.mark.gpu
def test_a_cuda_trace_has_the_cpu_traces_structure() -> None:
    example = load_coolcnn()
    model, x = example.CoolCNN().eval(), example.example_input()
    on_cpu = torchatlas.trace(model, x)
    on_gpu = torchatlas.trace(model.to(CUDA), x.to(CUDA))
    assert _structure(on_gpu) == _structure(on_cpu)
    assert all(o.device.startswith("cuda") for n in on_gpu.ir.ops() for o in n.outputs)


@pytest.mark.gpu
def test_the_output_is_the_models_own_and_nothing_is_kept() -> None:
    model, x = Mlp().to(CUDA), torch.randn(8, 64, device=CUDA)
    with torch.no_grad():
        expected = model(x)
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        got = _capture.capture(model, (x,), {}).output
    assert torch.equal(got, expected)
    del got
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() == before


@pytest.mark.gpu
def test_a_trace_adds_no_host_device_sync() -> None:
    model, x = Mlp().to(CUDA), torch.randn(8, 64, device=CUDA)
    torchatlas.trace(model, x)  # warm: lazy initialisation may sync once
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        graph = torchatlas.trace(model, x)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert len(list(graph.ir.ops())) >= 5


def test_stats_on_the_device_equal_the_cpus_and_find_the_first_nan(device, monkeypatch) -> None:
    model, x = Mlp(), torch.randn(8, 64)
    with monkeypatch.context() as read_now:
        read_now.setattr(_stats, "_READ_AT_ONCE", frozenset({"cpu"}))
        on_cpu = torchatlas.trace(model, x, stats=True)
    on_gpu = torchatlas.trace(model.to(device), x.to(device), stats=True)
    for a, b in zip(on_cpu.ir.ops(), on_gpu.ir.ops()):
        for sa, sb in zip(a.meta["stats"], b.meta["stats"]):
            for key in ("min", "max", "mean", "std", "nan", "inf", "zeros"):
                assert sb[key] == pytest.approx(sa[key], rel=1e-3, abs=1e-4), (a.target, key)
    bad = torchatlas.trace(DividesByZero().to(device), torch.randn(2, 4, device=device), stats=True).first_nonfinite()
    assert bad is not None and "truediv" in bad.target and sum(bad.meta["nonfinite"].values()) == 8
    with torch.inference_mode():  # the numbers buffer is made in here and still written
        inferred = torchatlas.trace(model, x.to(device), stats=True)
    assert all(n.meta.get("stats_skipped") is None for n in inferred.ir.ops())


@pytest.mark.gpu
def test_stats_read_the_device_once_at_the_end() -> None:
    model, x = Mlp().to(CUDA), torch.randn(8, 64, device=CUDA)
    torchatlas.trace(model, x, stats=True)  # warm
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torchatlas.trace(model, x, stats=True)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    syncs = [w for w in caught if "synchroniz" in str(w.message)]
    assert len(syncs) == 1, [str(w.message) for w in syncs]  # float32 only: one buffer, one read


class Wide(nn.Module):
    """Its widest output is also returned transposed: a non-contiguous output to measure."""

    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(1024, 8192)
        self.down = nn.Linear(8192, 1024)

    def forward(self, x):
        h = torch.nn.functional.gelu(self.up(x))
        return self.down(h), h.t()


@pytest.mark.gpu
def test_stats_in_bfloat16_add_little_memory() -> None:
    """Measuring allocates a bool mask and its float16 copy of at most 2**22 elements (12 MB),
    never a copy of the output (the widest here is 8 MB)."""
    model = Wide().to(CUDA, torch.bfloat16)
    x = torch.randn(512, 1024, device=CUDA, dtype=torch.bfloat16)

    def peak(run) -> int:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        with torch.no_grad():
            run()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base

    forward = peak(lambda: model(x))
    traced = peak(lambda: torchatlas.trace(model, x, stats=True))
    assert traced <= 1.25 * forward + (13 << 20), (forward, traced)


def test_save_places_copies_where_asked(device) -> None:
    model, x = Mlp().to(device), torch.randn(4, 64, device=device)
    assert torchatlas.trace(model, x, save="up").activation("up").device.type == device
    kept = torchatlas.trace(model, x, save="up", save_device="cpu").activation("up")
    assert kept.device.type == "cpu" and torch.allclose(kept, model.up(model.norm(x)).cpu())


@pytest.mark.gpu
def test_profile_puts_cuda_time_on_ops_and_module_calls() -> None:
    model, x = Mlp().to(CUDA), torch.randn(256, 64, device=CUDA)
    graph = torchatlas.profile(model, x, repeat=2)
    ops = list(graph.ir.ops())
    assert all(isinstance(n.meta.get("cuda_time_us"), (int, float)) for n in ops)
    assert any(n.meta["cuda_time_us"] > 0 for n in ops)
    # CPU times from the CPU-side ranges (their device-side twins have none)
    assert all(n.meta["time_us"] > 0 for n in ops), [(n.target, n.meta["time_us"]) for n in ops]
    root = graph.ir.scopes[0]
    assert root.meta["cuda_time_us"] >= max(s.meta["cuda_time_us"] for s in graph.ir.scopes[1:])
    header = graph.summary(format="text", wide=True).splitlines()[0]
    assert "CUDA time" in header and "% CUDA" in header


def test_backward_on_the_device(device) -> None:
    model, x = Mlp().to(device), torch.randn(4, 64, device=device)
    graph = torchatlas.trace(model, x, backward=True)
    phases = {n.meta.get("phase") for n in graph.ir.ops()}
    assert phases == {"forward", "backward"}


@pytest.mark.gpu
def test_compile_report_with_inductor() -> None:
    model, x = Mlp().to(CUDA), torch.randn(4, 64, device=CUDA)
    graph = torchatlas.compile_report(model, x, backend="inductor")
    assert graph.graph_breaks == []
    assert {n.meta["compile_region"] for n in graph.ir.ops()} == {0}


def test_stats_on_the_device_skip_what_holds_no_numbers_and_sample_big_outputs(device) -> None:
    class ToFloat8(nn.Module):
        def forward(self, x):
            return (x * 2).to(torch.float8_e4m3fn)

    graph = torchatlas.trace(ToFloat8(), torch.randn(4, 4, device=device), stats=True)
    *_, last = graph.ir.ops()
    assert "float8_e4m3fn is not measured" in last.meta["stats_skipped"][0]
    big = torch.randn(1 << 20, device=device)
    (stats,) = next(torchatlas.trace(ToFloat8(), big, stats="sample").ir.ops()).meta["stats"]
    assert 0 < stats["sampled"] <= 2 * (1 << 16) and stats["min"] >= 2 * big.min().item()


class Spiky(nn.Module):
    """Outputs over ``_stats_staging.STAGE_MOST`` elements (measured by the fused kernel on a
    GPU), one with NaN and Inf in it, one transposed (a dense block in another order)."""

    def forward(self, x):
        h = x * 2
        spiky = h / (h > 0).to(h.dtype)  # -inf where h < 0, NaN where h is 0
        return torch.relu(h).t(), spiky


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_big_outputs_are_measured_in_one_kernel_with_the_cpus_numbers(dtype, monkeypatch) -> None:
    from torchatlas._capture import _stats_fused

    if _stats_fused._kernel() is None:
        pytest.skip("Triton is not installed: the ATen reductions measure every output")
    x = torch.randn(1024, 600).to(dtype)
    x[0, :7] = 0
    launches = []
    measure = _stats_fused.measure_into
    monkeypatch.setattr(_stats_fused, "measure_into", lambda block, row: launches.append(block.shape) or measure(block, row))
    with monkeypatch.context() as read_now:
        read_now.setattr(_stats, "_READ_AT_ONCE", frozenset({"cpu"}))
        on_cpu = torchatlas.trace(Spiky(), x, stats=True)
    on_gpu = torchatlas.trace(Spiky(), x.to(CUDA), stats=True)
    assert len(launches) >= 3  # mul, relu, truediv: every big float output
    for a, b in zip(on_cpu.ir.ops(), on_gpu.ir.ops()):
        for sa, sb in zip(a.meta["stats"], b.meta["stats"]):
            if sa is None:
                continue
            for key in sa:  # a bool output (the comparison) has min and max only
                assert sb[key] == pytest.approx(sa[key], rel=1e-3, abs=1e-3), (a.target, key)
