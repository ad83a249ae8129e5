"""What the model did at run time, on the graph: statistics of every output, the first NaN,
kept activations and profiler time, checked against values computed by hand and by PyTorch."""

from __future__ import annotations

import gc
import math
import time
import weakref

import pytest
import torch
import torch.nn as nn

import torchatlas

HERE = __file__


class Known(nn.Module):
    def forward(self, x):
        return x * 1.0


def test_stats_of_a_known_tensor() -> None:
    x = torch.tensor([[0.0, -3.0, 1.0, 2.0]])
    graph = torchatlas.trace(Known(), x, stats=True)
    (op,) = graph.ir.ops()
    (stats,) = op.meta["stats"]
    assert stats["min"] == -3.0 and stats["max"] == 2.0 and stats["absmax"] == 3.0
    assert stats["mean"] == pytest.approx(0.0) and stats["std"] == pytest.approx(math.sqrt(14 / 3))
    assert stats["std"] == pytest.approx(x.std().item())  # torch.std's, Bessel-corrected
    assert (stats["nan"], stats["inf"], stats["zeros"]) == (0, 0, 0.25)


def test_integer_outputs_get_min_and_max() -> None:
    class Argmax(nn.Module):
        def forward(self, x):
            return x.argmax(-1)

    graph = torchatlas.trace(Argmax(), torch.tensor([[1.0, 5.0, 2.0], [7.0, 0.0, 1.0]]), stats=True)
    assert next(graph.ir.ops()).meta["stats"] == [{"min": 0, "max": 1}]


class DividesByZero(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.norm = Normalise()

    def forward(self, x):
        return self.norm(torch.relu(self.fc(x)))


class Normalise(nn.Module):
    def forward(self, h):
        total = h.sum(-1, keepdim=True) * 0.0
        return h / total  # the line that makes the first NaN/Inf


def test_first_nonfinite_names_the_op_its_module_and_its_line() -> None:
    graph = torchatlas.trace(DividesByZero(), torch.randn(2, 4), stats=True)
    node = graph.first_nonfinite()
    assert node is not None and node.target == "torch.Tensor.__truediv__"
    assert graph.ir.scope(node.scope).path == "norm"
    assert node.source.file == HERE and "h / total" in node.source.code
    assert node.meta["stats"][0]["nan"] + node.meta["stats"][0]["inf"] > 0


def test_a_nan_from_the_input_is_found_at_its_first_consumer() -> None:
    x = torch.randn(2, 4)
    x[0, 1] = float("nan")
    graph = torchatlas.trace(DividesByZero(), x, stats=True)
    node = graph.first_nonfinite()
    assert node.target == "torch.nn.functional.linear" and graph.ir.scope(node.scope).path == "fc"
    assert node.meta["stats"][0]["nan"] == 4  # one NaN row times four outputs
    # JSON holds no NaN: the numbers a NaN spoils are null, and the document loads back.
    assert node.meta["stats"][0]["mean"] is None
    assert torchatlas.GraphIR.from_dict(graph.to_dict()).node(node.id).meta["stats"] == node.meta["stats"]


def test_no_nonfinite_gives_none_and_stats_absent_on_meta_with_a_note() -> None:
    assert torchatlas.trace(Known(), torch.ones(3), stats=True).first_nonfinite() is None
    graph = torchatlas.trace(Known(), torch.ones(3, device="meta"), stats=True)
    assert all("stats" not in n.meta for n in graph.ir.ops())
    assert "meta device" in graph.ir.meta["stats_note"]


@pytest.mark.parametrize("context", [torch.no_grad, torch.inference_mode, torch.enable_grad])
def test_stats_under_grad_modes_and_at_the_aten_level(context) -> None:
    model, x = DividesByZero(), torch.randn(2, 4)
    with context():
        python = torchatlas.trace(model, x, stats=True)
        aten = torchatlas.trace(model, x, stats=True, level="aten")
    assert python.first_nonfinite().target == "torch.Tensor.__truediv__"
    assert aten.first_nonfinite().target == "aten.div.Tensor"


class Stack(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(3)])

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x


def test_saved_activations_equal_the_eager_module_outputs_bit_for_bit() -> None:
    model, x = Stack(), torch.randn(4, 8)
    eager = {}
    hooks = [m.register_forward_hook(lambda m, a, out, name=n: eager.__setitem__(name, out.clone()))
             for n, m in model.named_modules() if n]
    model(x)
    for h in hooks:
        h.remove()
    graph = torchatlas.trace(model, x, save="layers.*")
    assert set(graph.activations()) == {"layers.0", "layers.1", "layers.2"}
    for path, value in graph.activations().items():
        assert torch.equal(value, eager[path]) and not value.requires_grad
    assert torch.equal(graph.activation("layers.1"), eager["layers.1"])
    with pytest.raises(KeyError, match="layers.1"):
        graph.activation("nope")


def test_save_accepts_a_list_of_globs_a_callable_and_a_device() -> None:
    model, x = Stack(), torch.randn(4, 8)
    assert set(torchatlas.trace(model, x, save=["layers.0", "layers.2"]).activations()) == {"layers.0", "layers.2"}
    assert set(torchatlas.trace(model, x, save=lambda p: p.endswith("1")).activations()) == {"layers.1"}
    kept = torchatlas.trace(model, x, save="layers.0", save_device="cpu").activation("layers.0")
    assert kept.device.type == "cpu"
    # A glob with ':' selects ops, by <module path>:<op name>; they are kept under their node id.
    graph = torchatlas.trace(model, x, save="*:relu")
    relus = [n.id for n in graph.ir.ops() if n.target == "torch.relu"]
    assert sorted(graph.activations()) == sorted(relus) and len(relus) == 3


def test_nothing_unrequested_is_kept_alive() -> None:
    model, x = Stack(), torch.randn(4, 8)
    seen: list[weakref.ref] = []
    hooks = [m.register_forward_hook(lambda m, a, out: seen.append(weakref.ref(out))) for m in model.layers]
    graph = torchatlas.trace(model, x, stats=True, save="layers.1")
    for h in hooks:
        h.remove()
    gc.collect()
    alive = [r() is not None for r in seen]
    assert alive == [False, False, False]  # the kept one is a copy: the model's own outputs are freed
    assert graph.activation("layers.1").shape == (4, 8)


class OneHeavyLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.light = nn.Linear(16, 16)
        self.heavy = nn.Linear(16, 8192)
        self.out = nn.Linear(8192, 4)

    def forward(self, x):
        return self.out(torch.relu(self.heavy(self.light(x))))


def test_profile_times_fit_in_the_forward_and_find_the_heavy_layer() -> None:
    model, x = OneHeavyLayer(), torch.randn(512, 16)
    for _ in range(3):  # one timing pass on a busy machine can be preempted inside the light layer
        started = time.perf_counter()
        graph = torchatlas.trace(model, x, profile=True)
        wall_us = (time.perf_counter() - started) * 1e6
        ops = list(graph.ir.ops())
        assert all(isinstance(n.meta.get("time_us"), float) for n in ops)
        assert sum(n.meta["time_us"] for n in ops) <= wall_us
        assert "untraced" in graph.ir.meta["time_measure"]
        layers = {s.path: s.meta["time_us"] for s in graph.ir.scopes if s.parent is not None}
        if max(layers, key=layers.get) in ("heavy", "out"):
            break
    assert max(layers, key=layers.get) in ("heavy", "out"), layers


def test_profile_takes_the_median_of_repeated_passes() -> None:
    graph = torchatlas.profile(OneHeavyLayer(), torch.randn(64, 16), repeat=3, warmup=1)
    assert graph.ir.meta["profile_runs"] == 3
    assert all(n.meta["time_us"] >= 0 for n in graph.ir.ops())
    with pytest.raises(ValueError, match="repeat"):
        torchatlas.profile(OneHeavyLayer(), torch.randn(1, 16), repeat=0)


def test_the_diagram_marks_the_ops_and_modules_that_made_nan_or_inf() -> None:
    graph = torchatlas.trace(DividesByZero(), torch.randn(2, 4), stats=True)
    bad = graph.first_nonfinite()
    assert sum(bad.meta["nonfinite"].values()) == 8  # every element of the 2x4 quotient
    assert "⚠ 1 op with NaN/Inf inside" in graph.to_dot(depth=1)  # `norm` collapsed to one box
    marks = [line for line in graph.to_dot().splitlines() if "NaN×" in line or "Inf×" in line]
    assert len(marks) == 1 and f'"{bad.id}"' in marks[0]
    clean = torchatlas.trace(nn.Linear(4, 4), torch.randn(2, 4), stats=True).to_dot()
    assert "NaN×" not in clean and "Inf×" not in clean and "NaN/Inf" not in clean


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().split("  ") if c.strip()]


def test_summary_shows_time_and_sorts_the_hottest_calls_first() -> None:
    graph = torchatlas.trace(OneHeavyLayer(), torch.randn(512, 16), profile=True)
    text = graph.summary(format="text", wide=True)
    assert _cells(text.splitlines()[0])[-2:] == ["Time", "% Time"]
    hot = graph.summary(format="text", sort="time").splitlines()
    rows = [line for line in hot[2:] if line and not line.startswith("-") and not line.startswith("Total")]
    times = {s.label: s.meta["time_us"] for s in graph.ir.scopes}
    listed = [next(label for label in times if line.startswith(label)) for line in rows]
    assert [times[label] for label in listed] == sorted(times.values(), reverse=True)
    assert listed[0] == "<root> (OneHeavyLayer)"  # inclusive: the model's own call is the hottest
    with pytest.raises(ValueError, match="profile=True"):
        torchatlas.trace(OneHeavyLayer(), torch.randn(2, 16)).summary(format="text", sort="time")


def test_summary_and_tree_show_output_ranges_and_nan() -> None:
    graph = torchatlas.trace(DividesByZero(), torch.randn(2, 4), stats=True)
    text = graph.summary(format="text", wide=True)
    assert _cells(text.splitlines()[0])[-2:] == ["Output range", "NaN/Inf ops"]
    fc = next(line for line in text.splitlines() if line.strip().startswith("fc (Linear)"))
    low = next(s for s in graph.ir.scopes if s.path == "fc").meta["output_stats"][0]["min"]
    assert f"[{low:.3g}, " in fc and fc.rstrip().endswith("-")  # a finite range, no NaN/Inf op
    norm = next(line for line in text.splitlines() if line.strip().startswith("norm (Normalise)"))
    assert "NaN/Inf" in norm and norm.rstrip().endswith("1")
    bad = graph.first_nonfinite()
    tree = graph.tree(ascii=False)
    marked = [line for line in tree.splitlines() if "⚠" in line]
    counts = bad.meta["nonfinite"]
    assert sum(counts.values()) == 8  # every element of the 2x4 quotient: 0/0 is NaN, x/0 is Inf
    mark = "⚠ " + " ".join(f"{kind.replace('nan', 'NaN').replace('inf', 'Inf')}×{n}" for kind, n in counts.items() if n)
    assert len(marked) == 1 and "truediv" in marked[0] and marked[0].endswith(mark)
    assert "⚠ 1 op with NaN/Inf inside" in graph.tree(depth=1, ascii=False)
