"""``profile=True`` and ``torchatlas.profile`` time the model in untraced passes of their own:
the recorder's overhead never enters a time, a user's own profiler keeps running, and the
model's state is left as the trace left it."""

from __future__ import annotations

import statistics
import time
import warnings

import pytest
import torch
import torch.nn as nn
from torch.autograd import DeviceType
from torch.autograd.profiler_util import FunctionEvent

import torchatlas
from torchatlas._capture import _timing
from torchatlas._passes import analyze, strip_analyses


def _vit_tiny() -> nn.Module:
    transformers = pytest.importorskip("transformers")
    config = transformers.ViTConfig(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128, image_size=32, patch_size=8
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return transformers.ViTModel(config).eval()


def _plain_forward_us(model: nn.Module, x: torch.Tensor, rounds: int = 21) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        model(x)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6



def with_device_times(graph: torchatlas.Graph, times: dict[str, float], default: float | None = None) -> torchatlas.Graph:
    """``graph`` as a CUDA run gives it (each call's kernels' time), analysed again: the
    repeats pass totals a folded run's times, which every output reads."""
    for scope in graph.ir.scopes:
        scope.meta["cuda_time_us"] = times.get(scope.path, default) if default is not None else times[scope.path]
    return torchatlas.Graph(analyze(strip_analyses(graph.ir)))

def test_the_profiled_root_is_close_to_a_plain_forward_and_a_no_op_is_nearly_free() -> None:
    model, x = _vit_tiny(), torch.randn(1, 3, 32, 32)
    _plain_forward_us(model, x, 3)
    seen = []
    for _ in range(5):  # a machine busy with other work slows one attempt, rarely five
        before = _plain_forward_us(model, x)
        graph = torchatlas.profile(model, x, repeat=9)
        plain_us = max(before, _plain_forward_us(model, x))
        root = graph.ir.scopes[0].meta["time_us"]
        seen.append((root, plain_us))
        # Issue 32's target is 2x (+0.3 ms); asserted loosely so a busy machine cannot fail it.
        if root <= 3 * plain_us + 1000:
            break
    else:
        raise AssertionError(f"profiled root against plain forward (µs): {seen}")
    dropouts = [s.meta["time_us"] for s in graph.ir.scopes if s.cls.endswith(".Dropout")]
    assert dropouts and max(dropouts) < 0.05 * root
    layers = {s.path: s.meta["time_us"] for s in graph.ir.scopes}
    assert layers["layers.0"] <= root and layers["layers.0.attention"] <= layers["layers.0"]


class Counter(nn.Module):
    """Takes another path on every call."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        self.calls += 1
        for _ in range(self.calls):
            x = self.fc(x)
        return x


class FailsTheSecondTime(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls > 1:
            raise RuntimeError("only once")
        return x * 2


def test_a_timing_pass_that_takes_another_path_or_fails_gives_no_times() -> None:
    graph = torchatlas.trace(Counter(), torch.randn(2, 4), profile=True)
    assert "different path" in graph.ir.meta["time_measure"]
    assert not any("time_us" in n.meta for n in graph.ir.ops())
    graph = torchatlas.trace(FailsTheSecondTime(), torch.randn(2, 4), profile=True)
    assert graph.ir.meta["time_measure"] == "no times: a timing pass of the model failed: RuntimeError: only once"
    assert len(list(graph.ir.ops())) == 1


class Noisy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bn = nn.BatchNorm1d(4)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.bn(x))


def test_the_timing_passes_leave_buffers_and_random_state_as_one_forward_does() -> None:
    x = torch.randn(8, 4)
    model = Noisy().train()
    expected = Noisy().train()
    expected.load_state_dict(model.state_dict())
    torch.manual_seed(0)
    expected(x)
    after_forward = torch.random.get_rng_state()
    torch.manual_seed(0)
    torchatlas.trace(model, x, profile=True)
    assert torch.equal(torch.random.get_rng_state(), after_forward)
    assert torch.equal(model.bn.running_mean, expected.bn.running_mean)
    assert model.bn.num_batches_tracked.item() == 1


def test_profile_inside_the_users_profiler_leaves_it_running() -> None:
    model, x = nn.Linear(4, 4), torch.randn(2, 4)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as users:
        graph = torchatlas.trace(model, x, profile=True)
        with torch.autograd.profiler.record_function("after.ours"):
            torch.relu(x)
    assert any(e.name == "after.ours" for e in users.events())
    assert all(isinstance(n.meta.get("time_us"), float) for n in graph.ir.ops())


class NamesItsOwnRanges(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        with torch.autograd.profiler.record_function("torchatlas:x"), torch.autograd.profiler.record_function("torchatlas:c1"):
            return torch.relu(self.fc(x))


def test_a_users_range_named_like_ours_cannot_take_an_ops_place() -> None:
    model, x = NamesItsOwnRanges(), torch.randn(2, 4)
    graph = torchatlas.trace(model, x, profile=True)
    assert all(isinstance(n.meta.get("time_us"), float) for n in graph.ir.ops())
    # The profiler path (CUDA's) matched by a per-trace nonce, run here on the CPU alone.
    clock = _timing._OpClock()
    with clock:
        model(x)
    timer = _timing.Timer(None, lambda: model(x), model)
    timer.calls, timer._call_record = len(clock.times), {k: k - 1 for k in range(1, len(clock.times) + 1)}
    times = timer._time_ops_on_device(cuda=False)
    assert set(times) == set(timer._call_record) and all(cpu > 0 for cpu, _ in times.values())


class Repeats(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(8, 8) for _ in range(3)])
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().split("  ") if c.strip()]


def test_device_times_get_their_columns_sort_first_and_fold_as_sums() -> None:
    graph = torchatlas.trace(Repeats(), torch.randn(2, 8), profile=True)
    device = {"": 1000.0, "blocks.0": 100.0, "blocks.1": 200.0, "blocks.2": 300.0, "head": 700.0}
    graph = with_device_times(graph, device)
    header = _cells(graph.summary(format="text", wide=True).splitlines()[0])
    assert header[-4:] == ["Time", "% Time", "CUDA time", "% CUDA"]
    folded = next(line for line in graph.summary(format="text", wide=True).splitlines() if "blocks" in line)
    assert _cells(folded)[-2:] == ["600 µs", "60.0%"]  # the three members' sum
    hot = graph.summary(format="text", sort="time").splitlines()
    rows = [line for line in hot[2:] if line and not line.startswith(("-", "Total"))]
    assert [r.split()[0] for r in rows] == ["<root>", "head", "blocks.0–2"]  # by device time, not CPU time


def test_the_cuda_branch_writes_device_times_on_ops_and_inclusive_ones_on_calls(monkeypatch) -> None:
    """The CUDA path end to end with its device calls stood in for (this machine may have none)."""
    monkeypatch.setattr(_timing.Timer, "ran_on_cuda", lambda self: True)
    # every op's kernels take 10 µs on the device
    monkeypatch.setattr(_timing.Timer, "_time_ops_on_device", lambda self: {c: (1.0, 10.0) for c in self._call_record})
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: [])
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", lambda states: None)
    graph = torchatlas.profile(Repeats(), torch.randn(2, 8), repeat=2)
    assert all(isinstance(n.meta.get("cuda_time_us"), float) for n in graph.ir.ops())
    assert all(n.meta["cuda_time_us"] == 10.0 for n in graph.ir.ops())
    inside = {s.id: 0 for s in graph.ir.scopes}
    for n in graph.ir.ops():
        scope = graph.ir.scope(n.scope)
        while scope is not None:
            inside[scope.id] += 1
            scope = graph.ir.scope(scope.parent) if scope.parent is not None else None
    assert all(s.meta["cuda_time_us"] == 10.0 * inside[s.id] for s in graph.ir.scopes)  # inclusive: its ops'
    assert "device time from a torch.profiler range" in graph.ir.meta["time_measure"]
    assert _cells(graph.summary(format="text", wide=True).splitlines()[0])[-2:] == ["CUDA time", "% CUDA"]
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        busy = torchatlas.trace(Repeats(), torch.randn(2, 8), profile=True)
    assert "no device times" in busy.ir.meta["time_measure"] and "cuda_time_us" not in busy.ir.scopes[0].meta


def test_the_tree_shows_each_calls_time_and_a_folded_runs_sum() -> None:
    graph = torchatlas.trace(Repeats(), torch.randn(2, 8), profile=True)
    device = {"": 1000.0, "blocks.0": 100.0, "blocks.1": 200.0, "blocks.2": 300.0, "head": 700.0}
    graph = with_device_times(graph, device)
    lines = graph.tree(ascii=False).splitlines()
    blocks = next(line for line in lines if "blocks" in line)
    cpu = sum(s.meta["time_us"] for s in graph.ir.scopes if s.path.startswith("blocks."))
    assert blocks.endswith(f"time {torchatlas._text.format_duration(cpu)}, CUDA 600 µs")
    assert lines[0].endswith(", CUDA 1.00 ms")  # the root: its own inclusive time
    assert "CUDA 600 us" in graph.tree(ascii=True)
    assert " time " not in torchatlas.trace(Repeats(), torch.randn(2, 8)).tree()


def test_the_diagram_shows_time_on_module_boxes() -> None:
    graph = torchatlas.trace(Repeats(), torch.randn(2, 8), profile=True)
    graph = with_device_times(graph, {"blocks.0": 100.0, "blocks.1": 200.0, "blocks.2": 300.0}, default=50.0)
    assert "CUDA 100 µs" in graph.to_dot(depth=1, fold_repeats=False)
    folded = graph.to_dot(depth=1, fold_repeats=True)
    assert "CUDA 600 µs" in folded and "CUDA 50 µs" in folded  # the folded blocks: every member's
    assert "CUDA" not in torchatlas.trace(Repeats(), torch.randn(2, 8)).to_dot(depth=1)


def test_buffers_made_under_inference_mode_are_put_back_too() -> None:
    with torch.inference_mode():
        model = Noisy().train()
    x = torch.randn(8, 4)
    with torch.inference_mode():
        graph = torchatlas.trace(model, x, profile=True)
    assert model.bn.num_batches_tracked.item() == 1 and "time_us" in graph.ir.scopes[0].meta
    frozen = torch.nn.Sequential(torch.nn.Linear(4, 4))
    frozen.register_buffer("seen", torch.zeros(1))
    with torch.inference_mode():
        frozen.seen = torch.zeros(1)
    assert "time_us" in torchatlas.trace(frozen, x, profile=True).ir.scopes[0].meta


def test_compiled_parts_are_timed_as_the_eager_code_the_trace_recorded() -> None:
    model = Repeats()
    model.blocks[1] = torch.compile(model.blocks[1], backend="eager")
    model.head.compile(backend="eager")
    graph = torchatlas.trace(model, torch.randn(2, 8), profile=True)
    assert all(isinstance(n.meta.get("time_us"), float) for n in graph.ir.ops()), graph.ir.meta.get("time_measure")
    assert "time_us" in next(s for s in graph.ir.scopes if s.path == "head").meta


class Accumulates(nn.Module):
    def forward(self, x, cache):
        cache.add_(x)  # a KV cache's way: the input is written in place
        return cache * 2


def test_inputs_the_forward_writes_are_put_back_as_one_forward_leaves_them() -> None:
    x, cache = torch.ones(3), torch.zeros(3)
    torchatlas.trace(Accumulates(), (x, cache), profile=True)
    assert torch.equal(cache, torch.ones(3))  # one forward's worth, not three
    untouched = torch.zeros(3)
    torchatlas.profile(Accumulates(), (x, untouched), repeat=3, warmup=1)
    assert torch.equal(untouched, torch.ones(3))


def test_a_ranges_device_side_twin_takes_neither_its_cpu_time_nor_its_device_time() -> None:
    """On CUDA torch.profiler lists each range twice: the CPU-side range (its ops' kernels hang
    below it) and a device-side "gpu_user_annotation" of the same name, later in the list,
    with no CPU time and the span of its kernels. The times are the CPU-side range's."""
    prefix = "torchatlas.0123456789ab:c"
    cpu_range = FunctionEvent(id=1, name=f"{prefix}1", thread=1, start_us=0, end_us=30, use_device="cuda")
    matmul = FunctionEvent(id=2, name="aten::mm", thread=1, start_us=5, end_us=25, use_device="cuda")
    matmul.append_kernel("gemm", 0, 7.0)
    matmul.append_kernel("splitk_reduce", 0, 2.0)
    cpu_range.append_cpu_child(matmul)
    twin = FunctionEvent(
        id=3, name=f"{prefix}1", thread=1, start_us=40, end_us=95, use_device="cuda",
        device_type=DeviceType.CUDA, is_user_annotation=True,
    )
    kernel = FunctionEvent(id=4, name="gemm", thread=7, start_us=40, end_us=47, use_device="cuda", device_type=DeviceType.CUDA)
    theirs = FunctionEvent(id=5, name="torchatlas:c1", thread=1, start_us=0, end_us=99, use_device="cuda")
    times = _timing.range_times([cpu_range, matmul, theirs, twin, kernel], prefix)
    assert times == {1: (30.0, 9.0)}
