"""Tracing leaves torch as it found it: after an interrupt, next to another thread's trace,
inside another trace, under the user's own modes, and after many traces in a row."""

from __future__ import annotations

import gc
import os
import threading
import time
import types
import weakref
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch._dynamo  # traces then set and restore dynamo's stance, which torch_state checks
from _capture_helpers import load_coolcnn
from torch import nn
from torch.nn.modules import module as nn_module
from torch.overrides import TorchFunctionMode

import torchatlas

COOL = load_coolcnn()


def coolcnn() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return COOL.CoolCNN().eval(), COOL.example_input()


def torch_state() -> dict[str, Any]:
    """Everything a trace installs or toggles, as comparable values."""
    return {
        "forward_hooks": dict(nn_module._global_forward_hooks),
        "forward_pre_hooks": dict(nn_module._global_forward_pre_hooks),
        "always_called": set(nn_module._global_forward_hooks_always_called),
        "function_modes": torch._C._len_torch_function_stack(),
        "dispatch_modes": torch._C._len_torch_dispatch_stack(),
        "grad": torch.is_grad_enabled(),
        "module_call": (nn.Module.__call__, nn.Module._call_impl),
        "script_call": torch.jit.ScriptFunction.__call__,
        "tensor_set_": "set_" in torch.Tensor.__dict__,
        "has_torch_function": torch.overrides.has_torch_function,
        "compile_stance": torch._dynamo.eval_frame._stance,
    }


def comparable(graph: torchatlas.Graph) -> dict[str, Any]:
    """The graph document without the line that called ``trace`` (the root call's source)."""
    doc = graph.to_dict()
    doc["scopes"][0]["source"] = None
    return doc


@pytest.fixture(scope="module")
def reference() -> dict[str, Any]:
    model, x = coolcnn()
    return comparable(torchatlas.trace(model, x))


def assert_clean_and_working(before: dict[str, Any], reference: dict[str, Any]) -> None:
    assert torch_state() == before
    model, x = coolcnn()
    assert comparable(torchatlas.trace(model, x)) == reference


# -- interruptions ------------------------------------------------------------------------


class StopsMidway(nn.Module):
    def __init__(self, error: type[BaseException]) -> None:
        super().__init__()
        self.first = nn.Linear(4, 4)
        self.second = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
        self.error = error

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.second(self.first(x))
        raise self.error()


class RaisingMode(TorchFunctionMode):
    """A user mode that raises on the n-th torch call it sees."""

    def __init__(self, error: type[BaseException], after: int) -> None:
        super().__init__()
        self.error, self.left = error, after

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.left -= 1
        if self.left == 0:
            raise self.error()
        return func(*args, **(kwargs or {}))


def interrupt_in_forward(error: type[BaseException]) -> None:
    torchatlas.trace(StopsMidway(error), torch.randn(2, 4))


def interrupt_in_op_from_outer_mode(error: type[BaseException]) -> None:
    model, x = coolcnn()
    with RaisingMode(error, after=7):
        torchatlas.trace(model, x)


def interrupt_in_op_from_inner_mode(error: type[BaseException]) -> None:
    class EntersMode(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            with RaisingMode(error, after=3):
                return torch.relu(self.body(x)) * 2

    torchatlas.trace(EntersMode(), torch.randn(2, 4))


def interrupt_in_module_hook(error: type[BaseException]) -> None:
    model, x = coolcnn()

    def hook(module: nn.Module, args: Any, output: Any) -> None:
        raise error()

    model.secondary_conv.register_forward_hook(hook)
    torchatlas.trace(model, x)


def interrupt_in_global_pre_hook(error: type[BaseException]) -> None:
    model, x = coolcnn()
    calls = []

    def hook(module: nn.Module, args: Any) -> None:
        calls.append(module)
        if len(calls) == 4:
            raise error()

    handle = nn_module.register_module_forward_pre_hook(hook)
    try:
        torchatlas.trace(model, x)
    finally:
        handle.remove()


INTERRUPTERS: dict[str, Callable[[type[BaseException]], None]] = {
    "forward": interrupt_in_forward,
    "op-outer-mode": interrupt_in_op_from_outer_mode,
    "op-inner-mode": interrupt_in_op_from_inner_mode,
    "module-hook": interrupt_in_module_hook,
    "global-pre-hook": interrupt_in_global_pre_hook,
}


@pytest.mark.parametrize("error", [KeyboardInterrupt, SystemExit], ids=["ctrl-c", "exit"])
@pytest.mark.parametrize("where", INTERRUPTERS)
def test_interrupt_leaves_nothing_installed(reference: dict[str, Any], where: str, error: type[BaseException]) -> None:
    before = torch_state()
    with pytest.raises(error) as info:
        INTERRUPTERS[where](error)
    assert not [n for n in getattr(info.value, "__notes__", [])], "interrupts pass through untouched"
    assert_clean_and_working(before, reference)


@pytest.mark.parametrize("error", [KeyboardInterrupt, SystemExit], ids=["ctrl-c", "exit"])
def test_interrupt_with_partial_still_propagates(reference: dict[str, Any], error: type[BaseException]) -> None:
    before = torch_state()
    with pytest.raises(error):
        torchatlas.trace(StopsMidway(error), torch.randn(2, 4), partial=True)
    assert_clean_and_working(before, reference)


def test_failed_trace_leaves_nothing_installed(reference: dict[str, Any]) -> None:
    before = torch_state()
    with pytest.raises(RuntimeError):
        torchatlas.trace(StopsMidway(RuntimeError), torch.randn(2, 4))
    assert_clean_and_working(before, reference)


# -- threads and nesting -----------------------------------------------------------------------


class Waits(nn.Module):
    """Meets the other thread half-way through forward, so both traces are open at once."""

    def __init__(self, inner: nn.Module, barrier: threading.Barrier | None) -> None:
        super().__init__()
        self.inner, self.barrier = inner, barrier
        self.tail = nn.Linear(10, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.inner(x)
        if self.barrier is not None:
            self.barrier.wait(timeout=30)
        return self.tail(y).softmax(-1)


def test_untraced_thread_running_meanwhile_stays_out_of_the_graph(reference: dict[str, Any]) -> None:
    """Module hooks are process-wide: another thread's module calls must not reach this trace."""
    model, x = coolcnn()
    other, other_x = coolcnn()
    expected = other(other_x)
    barrier = threading.Barrier(2)
    results: list[Any] = []

    def run_untraced() -> None:
        try:
            barrier.wait(timeout=30)
            results.append(other(other_x))
            barrier.wait(timeout=30)
        except BaseException as e:  # reported below, in the main thread
            results.append(e)
            barrier.abort()

    class MeetsHalfway(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            barrier.wait(timeout=30)  # the other thread runs its forward now
            barrier.wait(timeout=30)
            return self.model(x)

    thread = threading.Thread(target=run_untraced)
    thread.start()
    graph = torchatlas.trace(MeetsHalfway(), x)
    thread.join(timeout=60)
    assert len(results) == 1 and torch.equal(results[0], expected)
    doc = comparable(graph)
    assert [s["path"] for s in doc["scopes"]] == [""] + ["model." + s["path"] if s["path"] else "model" for s in reference["scopes"]]
    assert len(doc["nodes"]) == len(reference["nodes"])


def test_two_threads_trace_at_once_each_their_own_graph() -> None:
    torch.manual_seed(0)
    models = [Waits(COOL.CoolCNN().eval(), None), Waits(nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 10)), None)]
    x = COOL.example_input()
    alone = [comparable(torchatlas.trace(m, x)) for m in models]
    barrier = threading.Barrier(2)
    for m in models:
        m.barrier = barrier
    results: dict[int, Any] = {}

    def run(i: int) -> None:
        try:
            results[i] = comparable(torchatlas.trace(models[i], x))
        except BaseException as e:  # reported below, in the main thread
            results[i] = e
            barrier.abort()

    before = torch_state()
    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert results == {0: alone[0], 1: alone[1]}
    assert torch_state() == before


class TracesItself(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torchatlas.trace(self.body, x)
        return self.body(x)


def test_trace_inside_a_trace_is_refused(reference: dict[str, Any]) -> None:
    before = torch_state()
    with pytest.raises(RuntimeError, match="inside another"):
        torchatlas.trace(TracesItself(), torch.randn(2, 4))
    assert_clean_and_working(before, reference)


def test_refused_nested_trace_has_one_note_naming_the_line() -> None:
    with pytest.raises(RuntimeError) as info:
        torchatlas.trace(TracesItself(), torch.randn(2, 4))
    notes = [n for n in info.value.__notes__ if n.startswith("torchatlas:")]
    assert len(notes) == 1 and __file__ in notes[0]


# -- the user's own modes -----------------------------------------------------------------------


class CountingMode(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.seen.append(getattr(func, "__name__", repr(func)))
        return func(*args, **(kwargs or {}))


def test_outer_user_mode_still_sees_the_ops_and_stays_on_the_stack(reference: dict[str, Any]) -> None:
    model, x = coolcnn()
    with CountingMode() as mode:
        depth = torch._C._len_torch_function_stack()
        graph = torchatlas.trace(model, x)
        assert torch._C._len_torch_function_stack() == depth
        mode.seen.clear()
        torch.relu(x)
        assert mode.seen == ["relu"]  # still active after the trace
    assert comparable(graph) == reference


def test_outer_user_mode_sees_exactly_the_model_ops() -> None:
    model, x = coolcnn()
    with CountingMode() as plain:
        model(x)
    with CountingMode() as traced:
        torchatlas.trace(model, x)
    assert Counter(traced.seen) == Counter(plain.seen)


def test_inner_user_mode_does_not_change_the_graph() -> None:
    class WithMode(nn.Module):
        def __init__(self, use_mode: bool) -> None:
            super().__init__()
            self.body = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 4))
            self.use_mode = use_mode
            self.mode = CountingMode()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if not self.use_mode:
                return self.body(x) + x
            with self.mode:
                return self.body(x) + x

    torch.manual_seed(0)
    plain = torchatlas.trace(WithMode(False), torch.ones(2, 4))
    torch.manual_seed(0)
    model = WithMode(True)
    graph = torchatlas.trace(model, torch.ones(2, 4))
    # Under a user mode torch hands ``x + y`` on as ``Tensor.add``, not ``Tensor.__add__``: same op.
    def flow(g: torchatlas.Graph) -> list[tuple[str, Any, list[str]]]:
        return [(n.kind, n.target and n.target.rsplit(".", 1)[-1].strip("_"), n.inputs) for n in g.ir.nodes]

    assert flow(graph) == flow(plain)
    assert model.mode.seen.count("linear") == 2
    assert torch._C._len_torch_function_stack() == 0


def test_flop_counter_counts_the_same_with_trace_inside(reference: dict[str, Any]) -> None:
    from torch.utils.flop_counter import FlopCounterMode

    model, x = coolcnn()
    with FlopCounterMode(display=False) as plain:
        model(x)
    with FlopCounterMode(display=False) as counted:
        graph = torchatlas.trace(model, x)
    assert counted.get_total_flops() == plain.get_total_flops() > 0
    assert comparable(graph) == reference
    assert torch._C._len_torch_dispatch_stack() == 0


def test_fake_tensor_mode_gives_the_same_graph(reference: dict[str, Any]) -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as fake:
        model, x = coolcnn()
        graph = torchatlas.trace(model, x)
        assert torch._C._len_torch_dispatch_stack() == 1
    assert torch._C._len_torch_dispatch_stack() == 0
    assert fake is not None and comparable(graph) == reference


@pytest.mark.parametrize("context", [torch.no_grad, torch.inference_mode, torch.enable_grad], ids=lambda c: c.__name__)
def test_grad_modes_give_the_same_graph(reference: dict[str, Any], context: Callable[[], Any]) -> None:
    model, x = coolcnn()
    with context():
        grad = torch.is_grad_enabled()
        graph = torchatlas.trace(model, x)
        assert torch.is_grad_enabled() == grad
    assert [(n.kind, n.target, [r.node for r in n.inputs]) for n in graph.ir.nodes] == [
        (n["kind"], n.get("target"), n["inputs"]) for n in reference["nodes"]
    ]


# -- memory -----------------------------------------------------------------------------------------


def rss_bytes() -> int:
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def tiny_llama() -> tuple[nn.Module, tuple, dict[str, torch.Tensor]]:
    transformers = pytest.importorskip("transformers")
    config = transformers.AutoConfig.for_model(
        "llama", num_hidden_layers=2, hidden_size=64, intermediate_size=128,
        num_attention_heads=4, num_key_value_heads=4, vocab_size=1000,
    )
    torch.manual_seed(0)
    return transformers.AutoModel.from_config(config).eval(), (), {"input_ids": torch.randint(0, 1000, (1, 16))}


def coolcnn_batch1() -> tuple[nn.Module, tuple[torch.Tensor], dict[str, torch.Tensor]]:
    model, _ = coolcnn()
    return model, (torch.randn(1, 3, 32, 32),), {}


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs Linux /proc")
@pytest.mark.parametrize(
    "make",
    [coolcnn_batch1, pytest.param(tiny_llama, marks=pytest.mark.slow)],
    ids=["coolcnn", "tiny-llama"],
)
def test_hundred_traces_do_not_grow_memory(make: Callable[[], tuple[nn.Module, tuple, dict]]) -> None:
    model, args, kwargs = make()
    for _ in range(10):  # warm caches (op names, source lines) and the allocator
        torchatlas.trace(model, args, kwargs)
    gc.collect()
    start, t0 = rss_bytes(), time.perf_counter()
    for _ in range(100):
        torchatlas.trace(model, args, kwargs)
    gc.collect()
    grown, seconds = rss_bytes() - start, time.perf_counter() - t0
    assert grown < 4 * 2**20, f"RSS grew {grown / 2**20:.1f} MiB over 100 traces ({seconds:.1f} s)"


FORBIDDEN = (torch.Tensor, torch.UntypedStorage, nn.Module, types.FrameType, types.CodeType, types.TracebackType)


def reachable(root: Any) -> list[Any]:
    seen: set[int] = set()
    stack, out = [root], []
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, (type, types.ModuleType, types.FunctionType)):
            continue
        seen.add(id(obj))
        out.append(obj)
        stack.extend(gc.get_referents(obj))
    return out


def test_graph_holds_no_tensor_module_or_frame() -> None:
    model, x = coolcnn()
    graph = torchatlas.trace(model, x)
    bad = [type(o).__name__ for o in reachable(graph.ir) if isinstance(o, FORBIDDEN)]
    assert bad == []


def test_model_and_inputs_are_freed_after_trace() -> None:
    model, x = coolcnn()
    refs = [weakref.ref(model), weakref.ref(x), weakref.ref(model.initial_conv.weight)]
    graph = torchatlas.trace(model, x)
    del model, x
    gc.collect()
    assert [r() is None for r in refs] == [True, True, True]
    assert graph.ir.nodes  # the graph itself lives on


def test_an_interrupt_while_installing_leaves_no_stand_in(monkeypatch: pytest.MonkeyPatch) -> None:
    from torchatlas._capture import _patches

    call_impl, set_ = torch.nn.Module._call_impl, torch.Tensor.set_

    def interrupted() -> bool:  # Ctrl-C after the first stand-ins are in
        raise KeyboardInterrupt

    monkeypatch.setattr(_patches._distributed, "initialized", interrupted)
    with pytest.raises(KeyboardInterrupt):
        torchatlas.trace(torch.nn.Linear(2, 2), torch.randn(1, 2))
    monkeypatch.undo()
    assert torch.nn.Module._call_impl is call_impl and torch.Tensor.set_ is set_ and _patches._users == 0
    assert torchatlas.trace(torch.nn.Linear(2, 2), torch.randn(1, 2)).ir.ops()
