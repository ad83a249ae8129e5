"""Distributed traces against ground truth: torch's DebugMode and CommDebugMode on the same
model and rank, the unsharded model's FLOPs, and a real 2-process gloo job.

* Each collective and the redistribution it serves (``P(sum) → R``, as DebugMode names it)
  come in DebugMode's order; the counts are CommDebugMode's.
* FLOPs count each op once at its global size (the unsharded model's total) and once per
  rank at what this rank computes (an op on the plain local tensor ``to_local`` handed on is
  counted once, not divided again).
* A collective DTensor runs inside an op (loss parallel's cross-entropy) is on its path.
* On a real gloo group the trace equals the fake group's, rank by rank.
"""

from __future__ import annotations

import json

import pytest
import torch
import torch.distributed as dist
from _distributed_models import (
    CASES,
    GLOO_CASES,
    comm_debug_counts,
    debug_mode_sequence,
    gloo_rank,
    seen_by_rank,
    tiny_llama,
    traced_counts,
    traced_sequence,
)
from torch import nn

import torchatlas
from torchatlas._render._summary import SummaryOptions
from torchatlas._render._summary import summary as render_summary
from torchatlas._view import page_document

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not built")

if dist.is_available():
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    from torch.testing._internal.distributed.fake_pg import FakeStore


@pytest.fixture
def fake_group(request: pytest.FixtureRequest):
    size = getattr(request, "param", 4)
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=size)
    try:
        yield size
    finally:
        dist.destroy_process_group()


def reaches_output(ir, start: str) -> bool:
    readers: dict[str, list[str]] = {}
    for n in ir.nodes:
        for r in n.inputs:
            readers.setdefault(r.node, []).append(n.id)
    todo, seen = [start], {start}
    while todo:
        for nxt in readers.get(todo.pop(), []):
            if ir.node(nxt).kind == "output":
                return True
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return False


# -- against DebugMode and CommDebugMode ----------------------------------------------------


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("fake_group", [2, 4], indirect=True)
def test_collectives_and_redistributions_come_as_debug_mode_sees_them(fake_group: int, case: str) -> None:
    if case == "tp_llama":
        pytest.importorskip("transformers")
    model, args, kwargs = CASES[case](fake_group)
    expected = debug_mode_sequence(model, args, kwargs)
    counts = comm_debug_counts(model, args, kwargs)
    if hasattr(model, "reshard"):
        model.reshard()  # FSDP2's root keeps its parameters gathered after forward
    ir = torchatlas.trace(model, args, kwargs=kwargs).ir
    assert traced_sequence(ir) == expected
    assert traced_counts(ir) == counts
    if case != "2d" or fake_group > 2:  # a dp mesh of one rank gathers nothing
        assert expected


def test_a_redistribution_is_drawn_as_debug_mode_names_it(fake_group: int) -> None:
    model, args, _ = CASES["tp_mlp"](fake_group)
    graph = torchatlas.trace(model, args)
    assert f"⇄ all_reduce over tp:{fake_group}, 128 B (P(sum) → R)" in graph.tree()
    assert "(P(sum) → R)" in graph.to_dot()


# -- loss parallel ----------------------------------------------------------------------------


@pytest.mark.parametrize("level", ["python", "aten"])
@pytest.mark.parametrize("fake_group", [2, 4], indirect=True)
def test_loss_parallel_all_reduces_are_on_the_loss_path(fake_group: int, level: str) -> None:
    model, args, _ = CASES["loss_parallel"](fake_group)
    counts = comm_debug_counts(model, args, {})
    graph = torchatlas.trace(model, args, level=level)
    ir = graph.ir
    reduces = [n for n in ir.ops() if n.meta.get("collective")]
    assert traced_counts(ir) == counts == {"all_reduce": 3}
    for n in reduces:
        assert not n.meta.get("dead")
        assert all(ir.node(r).kind != "constant" for r in n.inputs)
        assert reaches_output(ir, n.id)
    assert not [line for line in graph.tree().splitlines() if "unused" in line and "all_reduce" in line]


# -- FLOPs: global and per rank -------------------------------------------------------------


class ReluMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w1, self.relu, self.w2 = nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 16)

    def forward(self, x):
        return self.w2(self.relu(self.w1(x)))


@pytest.mark.parametrize("fake_group", [2, 4], indirect=True)
def test_an_op_on_the_local_tensor_is_counted_once_per_rank(fake_group: int) -> None:
    x = torch.randn(2, 16)
    plain = torchatlas.trace(ReluMLP(), x).ir
    model = ReluMLP()
    parallelize_module(
        model, init_device_mesh("cpu", (fake_group,), mesh_dim_names=("tp",)),
        {"w1": ColwiseParallel(), "w2": RowwiseParallel()},
    )
    seen = []
    hook = model.relu.register_forward_hook(lambda m, i, o: seen.append(i[0]))
    (model(x) + 0)  # + 0 waits for the all-reduce
    hook.remove()
    assert type(seen[0]) is torch.Tensor  # ColwiseParallel hands ReLU this rank's plain part
    graph = torchatlas.trace(model, x)
    ir = graph.ir
    relu = next(n for n in ir.ops() if n.target.endswith("relu"))
    assert relu.meta["flops_per_rank"] == seen[0].numel() == 2 * 64 // fake_group
    assert relu.meta["flops"] == 2 * 64  # its global size, as the unsharded ReLU counts
    assert ir.meta["flops"] == plain.meta["flops"]
    assert f"relu (ReLU)  2×{64 // fake_group} → 2×{64 // fake_group}" in graph.tree()
    assert next(s for s in ir.scopes if s.path == "relu").meta["input_shapes"] == [[2, 64 // fake_group]]
    (box,) = [line for line in graph.to_dot().splitlines() if line.lstrip().startswith('"') and "(ReLU)" in line]
    assert f"2×{64 // fake_group} → 2×{64 // fake_group}</FONT>" in box


@pytest.mark.parametrize("fake_group", [2, 4], indirect=True)
def test_tensor_parallel_llama_counts_the_unsharded_flops_globally(fake_group: int) -> None:
    pytest.importorskip("transformers")
    model, args, kwargs = CASES["tp_llama"](fake_group)
    plain = torchatlas.trace(tiny_llama(), args, kwargs=kwargs).ir
    ir = torchatlas.trace(model, args, kwargs=kwargs).ir
    assert ir.meta["flops"] == plain.meta["flops"]
    # every rank runs the head, norms and embeddings whole; the projections and attention in part
    assert plain.meta["flops"] / fake_group < ir.meta["flops_per_rank"] < plain.meta["flops"]
    lm_head = next(s for s in ir.scopes if s.path == "lm_head")
    assert lm_head.meta["flops_per_rank"] == lm_head.meta["flops"]


@pytest.mark.parametrize("fake_group", [4], indirect=True)
def test_a_narrow_summary_keeps_the_per_rank_columns_and_names_what_it_hid(fake_group: int) -> None:
    model, args, _ = CASES["tp_mlp"](fake_group)
    ir = torchatlas.trace(model, args).ir
    for fmt in ("text", "rich"):
        text = render_summary(ir, SummaryOptions(format=fmt, width=80))
        header = next(line for line in text.splitlines() if "Module" in line)
        for column in ("Params/rank", "FLOPs/rank", "Comm", "Collectives"):
            assert column in header
        hidden = " ".join(text.split("Hidden at width 80:")[1].split())
        assert "Param bytes" in hidden and "MACs (global)" in hidden
        assert max(len(line) for line in text.splitlines()) <= 80
    wide = render_summary(ir, SummaryOptions(format="text"))
    assert "FLOPs (global)" in wide.splitlines()[0] and "Hidden" not in wide
    assert "| FLOPs (global) | MACs (global) |" in render_summary(ir, SummaryOptions(format="markdown"))


# -- a real gloo group ------------------------------------------------------------------------


def test_a_real_two_process_gloo_group_traces_as_the_fake_one(tmp_path) -> None:
    mp = pytest.importorskip("torch.multiprocessing")
    if not dist.is_gloo_available():
        pytest.skip("gloo is not built")
    out = str(tmp_path / "seen")
    mp.start_processes(gloo_rank, args=(2, str(tmp_path / "store"), out), nprocs=2, start_method="fork")
    for rank in range(2):
        with open(f"{out}.{rank}") as f:
            real = json.load(f)
        dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=2)
        try:
            fake = json.loads(json.dumps({name: seen_by_rank(name, 2, torchatlas) for name in GLOO_CASES}))
        finally:
            dist.destroy_process_group()
        assert real == fake
        for name in GLOO_CASES:
            assert real[name]["sequence"] == real[name]["debug_mode"]  # DebugMode on the real group too


# -- every collective visible ---------------------------------------------------------------


@pytest.mark.parametrize("fake_group", [4], indirect=True)
def test_a_closed_box_says_which_collectives_it_holds(fake_group: int) -> None:
    pytest.importorskip("transformers")
    model, args, kwargs = CASES["tp_llama"](fake_group)
    graph = torchatlas.trace(model, args, kwargs=kwargs)
    folded = [line for line in graph.to_dot(depth=2).splitlines() if "LlamaDecoderLayer" in line and "<B>×2</B>" in line]
    assert len(folded) == 1 and "⇄ all_reduce ×2 4.00 KiB" in folded[0]  # per layer, as its other numbers
    boxes = [line for line in graph.to_dot(depth=3).splitlines() if "⇄ all_reduce 2.00 KiB" in line]
    assert {("self_attn" in b, "mlp" in b) for b in boxes} == {(True, False), (False, True)}
    # a row-wise Linear runs its all-reduce: it opens at any depth, so the collective shows
    open_dot = graph.to_dot(depth=6)
    assert sum("<B>all_reduce</B>" in line for line in open_dot.splitlines()) == 2  # the first layer; the second folds
    assert "(P(sum) → R)" in open_dot
    page = page_document(graph.ir)
    held = {s.path: s.cw for s in page.scopes if s.cw}
    assert held["model.layers.0"] == "⇄ all_reduce ×2 4.00 KiB" and held["model.layers.0.mlp"] == "⇄ all_reduce 2.00 KiB"


@pytest.mark.parametrize("fake_group", [4], indirect=True)
def test_the_page_shows_the_all_reduces_closed_and_open(fake_group: int, browser, tmp_path) -> None:
    from _viewer import Viewer

    pytest.importorskip("transformers")
    model, args, kwargs = CASES["tp_llama"](fake_group)
    v = Viewer(browser, torchatlas.trace(model, args, kwargs=kwargs).ir, tmp_path, "tensor-parallel")
    subtitles = lambda: v.page.eval_on_selector_all(".unit text.subtitle", "els => els.map(e => e.textContent)")  # noqa: E731
    assert "LlamaDecoderLayer · ⇄ all_reduce ×2 4.00 KiB" in subtitles()  # the first view: the folded layers
    v.search("all_reduce")  # opens the first layer down to o_proj (depth 5, as the README shows it)
    assert v.page.input_value("select[aria-label='Collapse to depth']") == "5"
    assert v.count('.unit[data-category="communication"]') == 1  # o_proj's, opened as a row-wise Linear
    assert "LlamaMLP · ⇄ all_reduce 2.00 KiB" in subtitles()  # the closed mlp says it holds down_proj's
    v.screenshot("viewer-tensor-parallel")  # the README's docs/img/viewer-tensor-parallel.png (docs/pictures.py)
    v.close()


# -- FSDP2: one line per parameter all-gather -------------------------------------------------


@pytest.mark.parametrize("warm", [False, True], ids=["first-forward", "later-forward"])
@pytest.mark.parametrize("case", ["fsdp", "2d"])
def test_fsdp_trees_fold_the_storage_steps_into_each_all_gather(case: str, warm: bool) -> None:
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=4)
    try:
        model, args, kwargs = CASES[case](4)
        if warm:  # the first pass lays the unsharded parameters out; later ones write into them
            model(*args, **kwargs).sum().item()
            model.reshard()
        graph = torchatlas.trace(model, args, kwargs=kwargs)
    finally:
        dist.destroy_process_group()
    ir, tree = graph.ir, graph.tree()
    gathers = [line for line in tree.splitlines() if "⇄ all_gather" in line]
    assert len(gathers) == 2 and all(": 2 params → (" in line for line in gathers), tree
    for step in ("empty", "as_strided", "split_with_sizes_copy", "all_gather_copy_in", "updated", "unused"):
        assert step not in tree, tree
    # on the graph itself, every all-gather feeds its unit's matmul, on every pass, 1-D or 2-D
    for gather in (n for n in ir.ops() if n.meta.get("collective", {}).get("op") == "all_gather_single"):
        linear = next(n for n in ir.ops() if n.target == "torch.nn.functional.linear" and n.scope == gather.scope)
        assert not gather.meta.get("dead")
        assert reaches_output(ir, gather.id) and linear.id in _downstream(ir, gather.id)


def _downstream(ir, start: str) -> set[str]:
    readers: dict[str, list[str]] = {}
    for n in ir.nodes:
        for r in n.inputs:
            readers.setdefault(r.node, []).append(n.id)
    seen, todo = set(), [start]
    while todo:
        for nxt in readers.get(todo.pop(), []):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen
