"""Capture leaves the process as it found it: the garbage collector's state, the model's
own exceptions, memory (no activation behind a partial graph, no cache that grows per
model), and the recursion headroom of deep models."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
import torch.nn as nn

import torchatlas
from torchatlas._capture import _source


class Small(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(self.fc(x))


class Fails(nn.Module):
    def forward(self, x):
        big = torch.ones(1024, 1024)  # noqa: F841 (a local the failing frame holds)
        return x @ torch.ones(3, 3)  # shapes do not match


def test_the_garbage_collector_is_left_exactly_as_the_user_set_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Frozen objects stay frozen: torchatlas never freezes or unfreezes. The freeze count itself
    is no measure of that in a long run: it drops whenever a frozen object's last reference goes,
    as when a full ``lru_cache`` (here or in torch) evicts an entry made before the freeze."""
    calls: list[str] = []
    for name in ("freeze", "unfreeze"):
        real = getattr(gc, name)
        monkeypatch.setattr(gc, name, lambda real=real, name=name: calls.append(name) or real())
    threshold, enabled = gc.get_threshold(), gc.isenabled()
    gc.freeze()
    frozen = gc.get_freeze_count()
    calls.clear()
    try:
        gc.set_threshold(1234, 11, 12)
        assert torchatlas.trace(Small(), torch.randn(2, 4)).ir.meta["analyzed"]
        with pytest.raises(RuntimeError):
            torchatlas.trace(Fails(), torch.randn(2, 4))
        assert calls == [] and 0 < gc.get_freeze_count() <= frozen
        assert gc.get_threshold() == (1234, 11, 12) and gc.isenabled() == enabled
        gc.disable()
        assert torchatlas.trace(Small(), torch.randn(2, 4)).ir.meta["analyzed"]
        assert not gc.isenabled() and calls == []
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()
        if enabled:
            gc.enable()


class SeesCollection(nn.Module):
    def forward(self, x):
        self.collecting = gc.isenabled()
        return x + 1


def test_collection_pauses_only_while_a_trace_runs_and_only_if_it_was_on() -> None:
    model = SeesCollection()
    assert gc.isenabled()
    torchatlas.trace(model, torch.randn(2))
    assert model.collecting is False and gc.isenabled()
    with pytest.raises(RuntimeError):
        torchatlas.trace(Fails(), torch.randn(2, 4))
    assert gc.isenabled()
    gc.disable()
    try:
        torchatlas.trace(model, torch.randn(2))
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_partial_graph_keeps_no_activation_alive() -> None:
    seen: list[weakref.ref] = []
    real_ones = torch.ones

    class Remembers(Fails):
        def forward(self, x):
            kept = real_ones(256, 256)
            seen.append(weakref.ref(kept))
            return x @ torch.ones(3, 3)

    graph = torchatlas.trace(Remembers(), torch.randn(2, 4), partial=True)
    assert isinstance(graph.error, RuntimeError) and graph.error.__traceback__ is not None
    gc.collect()
    assert seen[0]() is None
    assert "✗ failed" in graph.tree(ascii=False)


class Unprintable(Exception):
    def __str__(self) -> str:
        raise ValueError("no message for you")


class RaisesUnprintable(nn.Module):
    def forward(self, x):
        raise Unprintable()


class TupleNotes(Exception):
    pass


class RaisesTupleNotes(nn.Module):
    def forward(self, x):
        error = TupleNotes("tuple notes")
        error.__notes__ = ("the model's own note",)
        raise error


def test_an_exception_whose_str_raises_propagates_as_itself() -> None:
    with pytest.raises(Unprintable) as caught:
        torchatlas.trace(RaisesUnprintable(), torch.randn(2))
    assert type(caught.value) is Unprintable


class RefusesOps(torch.Tensor):
    """A tensor whose every op raises an exception that cannot print itself."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        raise Unprintable()


class AddsOne(nn.Module):
    def forward(self, x):
        return x + 1


def test_an_op_error_whose_str_raises_is_recorded_and_propagates_as_itself() -> None:
    x = torch.randn(2).as_subclass(RefusesOps)
    with pytest.raises(Unprintable):
        torchatlas.trace(AddsOne(), x)
    graph = torchatlas.trace(AddsOne(), x, partial=True)
    assert isinstance(graph.error, Unprintable)
    assert list(graph.ir.ops())[-1].meta["error"] == "Unprintable (its message could not be read)"


def test_an_exception_with_tuple_notes_propagates_as_itself_untouched() -> None:
    with pytest.raises(TupleNotes) as caught:
        torchatlas.trace(RaisesTupleNotes(), torch.randn(2))
    assert caught.value.__notes__ == ("the model's own note",)


GENERATED = """
def user_op(x):
    if torch.overrides.has_torch_function((x,)):
        return torch.overrides.handle_torch_function(user_op, (x,), x)
    return x * 2

def forward(self, x):
    return user_op(x) + 1
"""


def test_the_source_caches_are_bounded_and_keep_no_code_alive() -> None:
    """5,000 generated models once grew memory by 18.7 MB: every code object and every
    user function that opts into ``__torch_function__`` was kept, with its globals."""
    functions: list[weakref.ref] = []
    for i in range(50):
        namespace: dict = {"torch": torch, "nn": nn}
        exec(compile(GENERATED, f"<generated-{i}>", "exec"), namespace)
        model_cls = type(f"Gen{i}", (nn.Module,), {"forward": namespace["forward"]})
        functions += [weakref.ref(namespace["forward"]), weakref.ref(namespace["user_op"])]
        graph = torchatlas.trace(model_cls(), torch.randn(2))
        assert [n.target.rsplit(".", 1)[-1] for n in graph.ir.ops()] == ["user_op", "__add__"]
        del namespace, model_cls, graph
    gc.collect()
    assert sum(f() is not None for f in functions) == 0
    for cache in (_source._is_internal_file, _source.line_text, _source.assignment_targets):
        assert cache.cache_info().maxsize is not None


class Recursive(nn.Module):
    def forward(self, x, depth):
        return x + 1 if depth == 0 else self(x, depth - 1)


def _deepest(run) -> int:
    low, high = 1, 3000
    while low < high:
        middle = (low + high + 1) // 2
        try:
            run(middle)
            low = middle
        except RecursionError:
            high = middle - 1
    return low


def test_tracing_keeps_the_recursion_headroom_of_deep_models() -> None:
    model, x = Recursive(), torch.ones(1)
    untraced = _deepest(lambda d: model(x, d))
    traced = _deepest(lambda d: torchatlas.trace(model, (x, d)))
    # A constant few frames for trace() itself, none more per module call.
    assert traced >= untraced - 5


def test_a_module_that_contains_itself_is_refused_in_one_line() -> None:
    model = Small()
    model.me = model  # registers the module as its own child
    with pytest.raises(ValueError, match="does a module contain itself") as caught:
        torchatlas.trace(model, torch.randn(2, 4))
    assert "\n" not in str(caught.value)


class _TakesDict(nn.Module):
    def forward(self, d):
        return d["x"] + 1


class _Unwraps(nn.Module):
    def forward(self, d):
        while isinstance(d, list):
            d = d[0]
        return d * 2


class _Proxy:
    def __init__(self) -> None:
        self.t = torch.randn(2)

    def __getattr__(self, name):
        raise KeyError(name)


class _TakesProxy(nn.Module):
    def forward(self, o):
        return o.t + 1


def _cyclic() -> dict:
    d = {"x": torch.randn(2)}
    d["self"] = d
    return d


def _deep() -> list:
    value: object = torch.randn(2)
    for _ in range(5000):
        value = [value]
    return value  # type: ignore[return-value]


@pytest.mark.parametrize(
    "model, make", [(_TakesDict, _cyclic), (_Unwraps, _deep), (_TakesProxy, _Proxy)], ids=["cycle", "deep", "proxy"]
)
def test_inputs_the_model_takes_untraced_are_walked_as_pytree_walks_them(model, make) -> None:
    m, arg = model(), make()
    expected = m(arg)
    graph = torchatlas.trace(m, (arg,))
    assert [tuple(o.shape) for o in graph.ir.nodes[-1].outputs] == [tuple(expected.shape)]


def test_tensors_are_found_in_order_through_shared_and_cyclic_containers() -> None:
    from torchatlas._capture._values import tensors_flat

    a, b, c = torch.ones(1), torch.ones(2), torch.ones(3)
    shared = [b]
    cyclic: list = [a, shared, (shared, {"c": c})]
    cyclic.append(cyclic)
    found: list = []
    tensors_flat(cyclic, found)
    assert [t.numel() for t in found] == [1, 2, 2, 3]


class _Buffered(nn.Module):
    def forward(self, x):
        buf = torch.empty(4096)
        buf.fill_(float("nan"))  # the model's own NaN, written before it is read
        return x + buf[:4].nan_to_num() + torch.empty_like(x).zero_() + x.new_empty(4).fill_(0)


def test_stats_do_not_blame_uninitialised_memory_but_do_see_what_the_model_writes() -> None:
    graph = torchatlas.trace(_Buffered(), torch.randn(4), stats=True)
    allocations = [n for n in graph.ir.ops() if n.target.rsplit(".", 1)[-1] in ("empty", "empty_like", "new_empty")]
    assert len(allocations) == 3
    for node in allocations:
        assert "stats" not in node.meta or node.meta["stats"] == [None]
        assert "uninitialised memory" in node.meta["stats_skipped"][0]
    first = graph.first_nonfinite()
    assert first is not None and first.target.endswith("fill_")
