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

import torchatlas
from torchatlas._capture import _timing


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


def test_the_profiled_root_is_close_to_a_plain_forward_and_a_no_op_is_nearly_free() -> None:
    model, x = _vit_tiny(), torch.randn(1, 3, 32, 32)
    _plain_forward_us(model, x, 3)
    seen = []
    for _ in range(3):  # a machine busy with other work slows one attempt, rarely three
        before = _plain_forward_us(model, x)
        graph = torchatlas.profile(model, x, repeat=5)
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


def test_a_timing_pass_that_takes_another_path_gives_no_times() -> None:
    graph = torchatlas.trace(Counter(), torch.randn(2, 4), profile=True)
    assert "different path" in graph.ir.meta["time_measure"]
    assert not any("time_us" in n.meta for n in graph.ir.ops())


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
    for scope in graph.ir.scopes:  # as a CUDA run gives them: each call's kernels' time
        scope.meta["cuda_time_us"] = device[scope.path]
    header = _cells(graph.summary(format="text", wide=True).splitlines()[0])
    assert header[-4:] == ["Time", "% Time", "CUDA time", "% CUDA"]
    folded = next(line for line in graph.summary(format="text", wide=True).splitlines() if "blocks" in line)
    assert _cells(folded)[-2:] == ["600 µs", "60.0%"]  # the three members' sum
    hot = graph.summary(format="text", sort="time").splitlines()
    rows = [line for line in hot[2:] if line and not line.startswith(("-", "Total"))]
    assert [r.split()[0] for r in rows] == ["<root>", "head", "blocks.0–2"]  # by device time, not CPU time
