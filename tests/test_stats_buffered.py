"""The accelerator's ``stats=True`` path (numbers written on the device into one buffer, read
once at the end), run here on CPU tensors with the CPU's read-at-once switch turned off: its
numbers are torch's own, it reads nothing back while the forward runs, and a sample says so."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import torchatlas
from torchatlas._capture import _stats, _stats_staging

FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]


def _buffered_stats(x: torch.Tensor) -> dict:
    """``x``'s numbers as the device path computes them: into a buffer row, read afterwards."""
    row = torch.full((_stats._COLUMNS,), float("nan"), dtype=_stats._row_dtype(x.dtype))
    _stats._float_numbers_into(x, row)
    return _stats._float_stats(row.tolist(), x.numel())


def _torchs_own(x: torch.Tensor) -> dict:
    """The same numbers from torch's reductions in float64."""
    wide = x.double()
    finite = bool(torch.isfinite(wide).all())
    nan = bool(wide.isnan().any())

    def real(v: float) -> float | None:  # NaN and Inf are written as null
        return v if math.isfinite(v) else None

    return {
        "min": None if nan else real(wide.min().item()),
        "max": None if nan else real(wide.max().item()),
        "mean": wide.mean().item() if finite else None,
        "std": wide.std().item() if finite and x.numel() > 1 else None,
        "nan": int(torch.isnan(x).sum()),
        "inf": int(torch.isinf(x).sum()),
        "zeros": int((x == 0).sum()) / x.numel(),
    }


@st.composite
def tensors(draw) -> torch.Tensor:
    dtype = draw(st.sampled_from(FLOATS))
    shape = draw(st.lists(st.integers(1, 9), min_size=0, max_size=3))
    seed = draw(st.integers(0, 2**31 - 1))
    scale = draw(st.sampled_from([1e-3, 1.0, 50.0]))
    offset = draw(st.sampled_from([0.0, 0.5, -3.0]))
    x = (torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * scale + offset).to(dtype)
    if x.dim() >= 2 and draw(st.booleans()):
        x = x.transpose(0, -1)  # non-contiguous, dense
    if x.dim() >= 1 and x.shape[0] > 2 and draw(st.booleans()):
        x = x[::2]  # non-contiguous, with gaps
    flat = x.view(-1) if x.is_contiguous() else None
    for value in draw(st.lists(st.sampled_from([0.0, float("nan"), float("inf"), -float("inf")]), max_size=3)):
        if flat is not None:
            flat[draw(st.integers(0, flat.numel() - 1))] = value
    return x


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(x=tensors(), chunk=st.sampled_from([None, 3, 16]))
def test_the_buffered_numbers_are_torchs_own(x: torch.Tensor, chunk: int | None) -> None:
    saved = _stats._CHUNK
    _stats._CHUNK = chunk or saved  # several NaN/Inf slices of a few elements each, added up
    try:
        got = _buffered_stats(x)
    finally:
        _stats._CHUNK = saved
    _assert_torchs_own(got, x)


def _staged_stats(xs: list[torch.Tensor]) -> list[dict]:
    """Each output's numbers as a launch-bound device computes them: copied into a staging
    buffer of its dtype (flushed when full), measured many at a time, read afterwards."""
    rows: dict[torch.dtype, _stats._DeviceRows] = {}
    stagings: dict[torch.dtype, _stats_staging.Staging] = {}
    placed = []
    for x in xs:
        row_dtype = _stats._row_dtype(x.dtype)
        buffer = rows.setdefault(row_dtype, _stats._DeviceRows(x.device, row_dtype))
        staging = stagings.setdefault(x.dtype, _stats_staging.Staging(x.device, x.dtype, buffer))
        placed.append((buffer, staging.stage(x)))
    for staging in stagings.values():
        staging.flush()
    return [_stats._float_stats(buffer.buffer[row].tolist(), x.numel()) for (buffer, row), x in zip(placed, xs)]


def _assert_torchs_own(got: dict, x: torch.Tensor) -> None:
    want = _torchs_own(x)
    assert (got["nan"], got["inf"]) == (want["nan"], want["inf"])
    assert got["zeros"] == pytest.approx(want["zeros"], abs=1e-12)
    assert (got["min"], got["max"]) == (want["min"], want["max"])  # exact: the tensor's own elements
    if want["mean"] is None:
        assert got["mean"] is None and got["std"] is None
        return
    spread = float(x.double().abs().max())
    # float32 accumulation: mean to ~1e-6 of the largest magnitude; std from the sum of
    # squares, so to ~sqrt(eps32) of it where the mean dwarfs the spread
    assert got["mean"] == pytest.approx(want["mean"], abs=1e-5 * spread + 1e-12)
    if want["std"] is not None:
        assert got["std"] == pytest.approx(want["std"], rel=1e-3, abs=1e-3 * spread + 1e-12)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(xs=st.lists(tensors(), min_size=1, max_size=12), capacity=st.sampled_from([None, 40, 300]))
def test_staged_outputs_numbers_are_torchs_own(xs: list[torch.Tensor], capacity: int | None) -> None:
    """Many outputs of every float dtype, 0-d, non-contiguous, with NaN and Inf, in one segment
    each; a small capacity flushes in the middle (an output over it is flushed alone)."""
    saved = _stats_staging._STAGE_CAPACITY
    _stats_staging._STAGE_CAPACITY = capacity or saved
    try:
        got = _staged_stats(xs)
    finally:
        _stats_staging._STAGE_CAPACITY = saved
    for numbers, x in zip(got, xs):
        _assert_torchs_own(numbers, x)


def test_outputs_just_below_and_above_the_staging_size_are_torchs_own(monkeypatch) -> None:
    """Through a trace: outputs of STAGE_MOST elements or fewer are staged (a flush in the
    middle and one at the end), bigger ones measured alone; the numbers are the same."""
    monkeypatch.setattr(_stats, "_READ_AT_ONCE", frozenset())
    monkeypatch.setattr(_stats_staging, "STAGE_MOST", 64)
    monkeypatch.setattr(_stats_staging, "_STAGE_CAPACITY", 200)
    staged: list[int] = []
    stage = _stats_staging.Staging.stage
    monkeypatch.setattr(_stats_staging.Staging, "stage", lambda self, x: staged.append(x.numel()) or stage(self, x))

    class Sizes(nn.Module):
        def forward(self, h):
            outs = [h[: n // 8] * 1.5 for n in (56, 64, 72, 128, 8)]  # 8 columns: n elements
            return [o.to(torch.float16) - 1 for o in outs]

    x = torch.randn(16, 8)
    x[1, 2], x[9, 3] = float("nan"), float("inf")
    graph = torchatlas.trace(Sizes(), x, stats=True)
    assert sorted(set(staged)) == [8, 56, 64]
    expected = []  # each op's output, in the order the forward makes them
    products = []
    for n in (56, 64, 72, 128, 8):
        expected.append(x[: n // 8])
        products.append(expected[-1] * 1.5)
        expected.append(products[-1])
    for p in products:
        expected += [p.to(torch.float16), p.to(torch.float16) - 1]
    measured = [n.meta["stats"][0] for n in graph.ir.ops()]
    assert len(measured) == len(expected)
    for numbers, t in zip(measured, expected):
        _assert_torchs_own(numbers, t)


def test_a_flush_that_fails_skips_its_outputs_with_the_reason(monkeypatch) -> None:
    monkeypatch.setattr(_stats, "_READ_AT_ONCE", frozenset())

    def fails(*args):
        raise RuntimeError("segment_reduce: out of memory")

    monkeypatch.setattr(_stats_staging, "_segment_numbers", fails)
    graph = torchatlas.trace(IntsAndFloats(), torch.randn(8, 16), stats=True)
    by_target = {n.target.rsplit(".", 1)[-1]: n.meta for n in graph.ir.ops()}
    assert "out of memory" in by_target["relu"]["stats_skipped"][0]
    assert by_target["argmax"]["stats"][0]["max"] <= 15  # not staged: measured
    assert "could not be measured" in graph.ir.meta["stats_note"]


def test_a_staged_output_is_measured_as_it_was_when_staged() -> None:
    x = torch.arange(6, dtype=torch.float32)
    rows = _stats._DeviceRows(x.device, torch.float32)
    staging = _stats_staging.Staging(x.device, x.dtype, rows)
    row = staging.stage(x)
    x.add_(100.0)  # the op after it changes it in place
    staging.flush()
    assert _stats._float_stats(rows.buffer[row].tolist(), 6)["max"] == 5.0


@pytest.mark.parametrize("dtype", FLOATS)
def test_zero_dim_and_single_element_outputs(dtype) -> None:
    for x in (torch.tensor(2.5, dtype=dtype), torch.full((1, 1, 1), -4.0, dtype=dtype)):
        got = _buffered_stats(x)
        assert (got["min"], got["max"], got["mean"], got["std"]) == (float(x.min()), float(x.max()), float(x.min()), None)
        assert (got["nan"], got["inf"], got["zeros"]) == (0, 0, 0.0)


def test_a_big_output_counted_in_many_slices_keeps_exact_counts(monkeypatch) -> None:
    monkeypatch.setattr(_stats, "_CHUNK", 1 << 12)
    x = torch.randn(1 << 10, 1 << 10)
    x.view(-1)[:: 997] = float("nan")
    x[::3, 5] = float("inf")
    for t in (x, x.t(), x[:, 1::2]):
        got = _buffered_stats(t)
        assert (got["nan"], got["inf"]) == (int(t.isnan().sum()), int(t.isinf().sum()))


class IntsAndFloats(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x):
        h = torch.relu(self.fc(x))
        return h.argmax(-1), (h > 0).any(-1), h.to(torch.bfloat16) * 2


_READS = ("item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__", "__index__")


def test_the_buffered_path_reads_nothing_back_until_the_end(monkeypatch) -> None:
    """On a GPU a read is a host-device sync: none may happen per op (a flush of staged outputs
    included, made here at every other op), one per buffer at the end."""
    monkeypatch.setattr(_stats, "_READ_AT_ONCE", frozenset())
    monkeypatch.setattr(_stats_staging, "_STAGE_CAPACITY", 200)  # an output is 8 x 16 = 128 elements
    flushes = []
    flush = _stats_staging.Staging.flush
    monkeypatch.setattr(_stats_staging.Staging, "flush", lambda self: flushes.append(phase[0]) or flush(self))
    reads: list[tuple[str, str]] = []
    phase = ["outside"]
    for name in _READS:
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _name=name, _original=original, **kwargs):
            reads.append((phase[0], _name))
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)
    for method, label in ((_stats.OutputStats.op_recorded, "per op"), (_stats.OutputStats.finish, "finish")):

        def marked(self, *args, _method=method, _label=label):
            phase[0] = _label
            try:
                return _method(self, *args)
            finally:
                phase[0] = "outside"

        monkeypatch.setattr(_stats.OutputStats, method.__name__, marked)
    graph = torchatlas.trace(IntsAndFloats(), torch.randn(8, 16), stats=True)
    assert "per op" in flushes
    assert [r for r in reads if r[0] == "per op"] == []
    # one float32 buffer (float32 and bfloat16 outputs), one int64 buffer (argmax, bool)
    assert [r for r in reads if r[0] == "finish"] == [("finish", "tolist")] * 2
    by_target = {n.target.rsplit(".", 1)[-1]: n.meta["stats"][0] for n in graph.ir.ops()}
    assert 0 <= by_target["argmax"]["min"] <= by_target["argmax"]["max"] <= 15
    assert by_target["any"]["max"] in (0, 1) and by_target["__mul__"]["min"] >= 0.0


def test_a_sample_on_the_buffered_path_is_marked_as_one(monkeypatch) -> None:
    monkeypatch.setattr(_stats, "_READ_AT_ONCE", frozenset())
    x = torch.rand(512, 600)

    class Halves(nn.Module):
        def forward(self, h):
            return (h * 0.5).t(), h[:100, :100] + 1  # a big non-contiguous output, a small one

    graph = torchatlas.trace(Halves(), x, stats="sample")
    by_target = {n.target.rsplit(".", 1)[-1]: n for n in graph.ir.ops()}
    big, small = by_target["t"], by_target["__add__"]
    (big_stats,) = big.meta["stats"]
    assert 0 < big_stats["sampled"] <= 2 * _stats.SAMPLE
    assert 0.0 <= big_stats["min"] and big_stats["max"] <= 0.5 and big_stats["mean"] == pytest.approx(0.25, abs=0.01)
    assert "sampled" not in small.meta["stats"][0]
    assert "strided sample" in graph.ir.meta["stats_note"]
    text = graph.summary(format="text", wide=True)
    assert "≈" in text  # the summary says a sampled range is approximate


def _largest_allocation(measure, x: torch.Tensor) -> int:
    """Bytes of the largest single allocation any op made while ``measure(x)`` ran (a parent op
    counts its children's)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        measure(x)
    return max((e.cpu_memory_usage for e in prof.events() if e.cpu_memory_usage > 0), default=0)


@pytest.mark.parametrize("view", ["contiguous", "transposed", "strided"])
@pytest.mark.parametrize("path", ["now", "buffered"])
def test_measuring_allocates_less_than_a_copy_of_the_output(view, path) -> None:
    """float64, so that the CPU's own cast of a float16 mask to float32 inside ``sum`` (which a
    CUDA reduction does not make) stays under the output's size: what is checked is that no
    step copies the output itself (``aminmax`` over every element reads ``x.contiguous()``)."""
    x = torch.randn(1024, 512, dtype=torch.float64)
    x = {"contiguous": x, "transposed": x.t(), "strided": x[:, ::2]}[view]
    size = x.numel() * x.element_size()

    def measure(t):
        if path == "now":
            _stats._float_numbers_now(t)
        else:
            _stats._float_numbers_into(t, torch.empty(_stats._COLUMNS, dtype=torch.float64))

    assert _largest_allocation(measure, x) < size


class PartlyInferenceMode(nn.Module):
    def forward(self, x):
        with torch.inference_mode():
            h = x * 2  # the first output: the buffer is made in here
        for _ in range(300):  # past the first 256 rows: the buffer grows out here
            x = x + 1
        return x, h.clone()


@pytest.mark.parametrize("outer", [False, True])
def test_a_buffer_made_inside_inference_mode_is_written_outside_it(outer, monkeypatch) -> None:
    monkeypatch.setattr(_stats, "_READ_AT_ONCE", frozenset())
    with torch.inference_mode(outer):
        graph = torchatlas.trace(PartlyInferenceMode(), torch.ones(3), stats=True)
    ops = list(graph.ir.ops())
    assert all(n.meta.get("stats_skipped") is None for n in ops), ops[1].meta.get("stats_skipped")
    assert [n.meta["stats"][0]["max"] for n in ops[:3]] == [2.0, 2.0, 3.0]



@pytest.mark.parametrize(("dtype", "most"), [(torch.float32, 13), (torch.bfloat16, 16)])
def test_a_big_output_costs_a_fixed_few_torch_calls(dtype, most) -> None:
    """An output over ``STAGE_MOST`` elements is measured alone (each call is host time on a
    launch-bound GPU forward): 12 kernels (14 in half precision, whose min and max are stacked
    and cast) and one unbind of the buffer row."""
    x = torch.randn(64, 64).to(dtype)
    row = torch.empty(_stats._COLUMNS, dtype=_stats._row_dtype(dtype))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        _stats._float_numbers_into(x, row)
    calls = [e.name for e in prof.events() if e.cpu_parent is None]
    assert len(calls) <= most, calls


def _top_level_calls(run) -> list[str]:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        run()
    return [e.name for e in prof.events() if e.cpu_parent is None]


@pytest.mark.parametrize("dtype", FLOATS)
def test_a_staged_output_costs_one_copy_and_a_flush_a_constant(dtype) -> None:
    """A small output on a launch-bound GPU: one kernel (the copy into the staging buffer, through
    a view that launches none) now, and a flush whose calls do not grow with the outputs in it."""
    x = torch.randn(8, 64).to(dtype).t()  # non-contiguous: copied, never made contiguous first
    flush_calls = []
    for outputs in (1, 40):
        rows = _stats._DeviceRows(x.device, _stats._row_dtype(dtype))
        staging = _stats_staging.Staging(x.device, dtype, rows)
        staging.stage(x)  # the staging buffer is allocated by then
        per_output = _top_level_calls(lambda staging=staging: staging.stage(x))
        assert per_output == ["aten::as_strided", "aten::copy_"], per_output
        for _ in range(outputs - 2):
            staging.stage(x)
        flush_calls.append(len(_top_level_calls(staging.flush)))
    assert flush_calls[0] == flush_calls[1] <= 32, flush_calls


def test_an_empty_output_has_nothing_to_measure_and_nothing_missing(monkeypatch) -> None:
    monkeypatch.setattr(_stats, "_READ_AT_ONCE", frozenset())

    class Empties(nn.Module):
        def forward(self, h):
            return h[:0] * 2, (h[:, :0] > 0), h + 1

    graph = torchatlas.trace(Empties(), torch.randn(3, 4), stats=True)
    by_target = {n.target.rsplit(".", 1)[-1]: n for n in graph.ir.ops()}
    for name in ("__mul__", "__gt__"):
        assert by_target[name].meta.get("stats", [None])[0] is None
        assert by_target[name].meta.get("stats_skipped") is None
    assert by_target["__add__"].meta["stats"][0]["min"] is not None
