"""Distributed models on torch.distributed's fake process group: one process, any world size.

Tensor parallelism (DTensor), FSDP2 and explicit redistributions trace with their
collectives as op nodes on the data path, DTensor values keep their global and local
shapes, and nothing real is unused. The collectives are checked against what
``CommDebugMode`` (torch's own counter) sees on an untraced forward pass.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator

import _distributed_models as _models
import pytest
import torch
import torch.distributed as dist
from _distributed_models import LLAMA_PLAN, MLP
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

import torchatlas
from torchatlas._ops import collective_kind

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not built")

if dist.is_available():
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    from torch.testing._internal.distributed.fake_pg import FakeStore


@pytest.fixture
def world(request: pytest.FixtureRequest) -> Iterator[int]:
    """A fake process group of ``request.param`` ranks (default 4), destroyed afterwards."""
    size = getattr(request, "param", 4)
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=size)
    try:
        yield size
    finally:
        dist.destroy_process_group()


def mesh(size: int, name: str):
    return init_device_mesh("cpu", (size,), mesh_dim_names=(name,))


def tiny_llama():
    pytest.importorskip("transformers")
    return _models.tiny_llama()


def tensor_parallel_llama(size: int):
    model, tp = tiny_llama(), mesh(size, "tp")
    for layer in model.model.layers:
        parallelize_module(
            layer, tp, {k: ColwiseParallel() if v == "col" else RowwiseParallel() for k, v in LLAMA_PLAN.items()}
        )
    return model


def collectives(ir) -> list:
    return [n for n in ir.ops() if collective_kind(n.target) is not None]


def kinds(ir) -> collections.Counter:
    return collections.Counter(collective_kind(n.target) for n in collectives(ir))


def debug_mode_kinds(model, *args, **kwargs) -> collections.Counter:
    """The collectives torch's own CommDebugMode counts on an untraced forward pass."""
    return _models.comm_debug_counts(model, args, kwargs)


def reaches(ir, start: str, end: str) -> bool:
    """Whether data flows from node ``start`` to node ``end``."""
    readers = collections.defaultdict(list)
    for n in ir.nodes:
        for r in n.inputs:
            readers[r.node].append(n.id)
    todo, seen = [start], {start}
    while todo:
        for nxt in readers[todo.pop()]:
            if nxt == end:
                return True
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return False


def scope_by_path(ir, path: str):
    return next(s for s in ir.scopes if s.path == path)


def dead(ir) -> list[str]:
    return sorted(n.target for n in ir.ops() if n.meta.get("dead"))


def no_pending_work() -> bool:
    return torch._C._distributed_c10d._get_work_registry_size() == 0


# -- tensor parallelism --------------------------------------------------------------------


@pytest.mark.parametrize("world", [2, 4, 8], indirect=True)
def test_tensor_parallel_mlp_all_reduces_after_the_row_wise_matmul(world: int) -> None:
    model = MLP()
    parallelize_module(model, mesh(world, "tp"), {"w1": ColwiseParallel(), "w2": RowwiseParallel()})
    x = torch.randn(2, 16)
    ir = torchatlas.trace(model, x).ir
    assert no_pending_work()
    assert kinds(ir) == {"all_reduce": 1} == debug_mode_kinds(model, x)
    (reduce,) = collectives(ir)
    assert ir.scope(reduce.scope).path == "w2"
    linear = next(n for n in ir.ops() if n.target == "torch.nn.functional.linear" and ir.scope(n.scope).path == "w2")
    assert ir.node(reduce.inputs[0]) is linear
    assert ir.node(next(n for n in ir.nodes if n.kind == "output").inputs[0]) is reduce
    facts = reduce.meta["collective"]
    assert facts["group"] == "tp" and facts["group_size"] == world and facts["ranks"] == list(range(world))
    assert facts["bytes"] == 2 * 16 * 4
    assert facts["redistribute"] == "P(sum) → R"
    assert dead(ir) == []
    # w1's result is a DTensor: 2×64 globally, split over the ranks on its last dim
    out = ir.value_meta(scope_by_path(ir, "w1").outputs[0])
    assert out.shape == (2, 64) and out.placements == ("Shard(1)",) and out.local_shape == (2, 64 // world)
    assert out.mesh == (("tp", world),)
    # ... and the relu that reads its local part reads the matmul itself
    relu = next(n for n in ir.ops() if n.target == "torch.relu")
    assert ir.node(relu.inputs[0]).target == "torch.nn.functional.linear"


def test_an_explicit_redistribute_is_the_collective_it_runs(world: int) -> None:
    tp = mesh(world, "tp")

    class Gather(nn.Module):
        def forward(self, x):
            sharded = distribute_tensor(x, tp, [Shard(0)])
            return (sharded * 2).redistribute(tp, [Replicate()]).to_local() + 1

    x = torch.randn(8, 4)
    ir = torchatlas.trace(Gather(), x).ir
    assert no_pending_work()
    # distribute_tensor scatters the rows from rank 0; the redistribution gathers them back
    assert kinds(ir) == {"scatter": 1, "all_gather": 1} == debug_mode_kinds(Gather(), x)
    gather = next(n for n in collectives(ir) if collective_kind(n.target) == "all_gather")
    assert gather.meta["collective"]["redistribute"] == "S(0) → R"
    mul = next(n for n in ir.ops() if n.target == "torch.Tensor.__mul__")
    add = next(n for n in ir.ops() if n.target == "torch.Tensor.__add__")
    assert reaches(ir, mul.id, gather.id) and reaches(ir, gather.id, add.id)
    assert mul.outputs[0].placements == ("Shard(0)",) and mul.outputs[0].local_shape == (8 // world, 4)
    assert dead(ir) == []


@pytest.mark.parametrize("level", ["python", "aten"])
@pytest.mark.parametrize("world", [2, 8], indirect=True)
def test_a_redistribution_inside_an_op_is_a_node_before_it(world: int, level: str) -> None:
    tp = mesh(world, "tp")

    class ShardedMatmul(nn.Module):
        def forward(self, a, b):
            rows_a, rows_b = distribute_tensor(a, tp, [Shard(0)]), distribute_tensor(b, tp, [Shard(0)])
            return torch.mm(rows_a, rows_b).full_tensor()  # mm gathers b's rows first

    a, b = torch.randn(8, 8), torch.randn(8, 8)
    ir = torchatlas.trace(ShardedMatmul(), (a, b), level=level).ir
    assert no_pending_work()
    assert kinds(ir) == {"scatter": 2, "all_gather": 2} == debug_mode_kinds(ShardedMatmul(), a, b)
    mm = next(n for n in ir.ops() if n.target in ("torch.mm", "aten.mm.default"))
    first, last = [n for n in collectives(ir) if collective_kind(n.target) == "all_gather"]
    assert mm.inputs[1].node == first.id and ir.node(last.inputs[0]) is mm
    assert collective_kind(ir.node(first.inputs[0]).target) == "scatter"  # b's shard, as it was scattered
    assert dead(ir) == []


def test_c10d_calls_are_in_place_collectives_on_the_data_path(world: int) -> None:
    class Reduce(nn.Module):
        def forward(self, x):
            y = x * 2
            dist.all_reduce(y)
            gathered = torch.empty(world * 2, 3)
            dist.all_gather_single(gathered, y)
            return gathered + 1

    x = torch.randn(2, 3)
    ir = torchatlas.trace(Reduce(), x).ir
    assert kinds(ir) == {"all_reduce": 1, "all_gather": 1} == debug_mode_kinds(Reduce(), x)
    reduce, gather = collectives(ir)
    assert reduce.inplace and ir.node(reduce.inputs[0]).target == "torch.Tensor.__mul__"
    assert gather.inputs[0].node == reduce.id and gather.meta["collective"]["bytes"] == world * 2 * 3 * 4
    add = next(n for n in ir.ops() if n.target == "torch.Tensor.__add__")
    assert add.inputs[0].node == gather.id
    assert dead(ir) == []  # the buffer gathered into is needed


@pytest.mark.parametrize("world", [2, 4], indirect=True)
def test_tensor_parallel_llama_all_reduces_twice_per_layer(world: int) -> None:
    model = tensor_parallel_llama(world)
    ids = torch.randint(0, 100, (1, 8))
    plain = torchatlas.trace(tiny_llama(), ids, kwargs={"use_cache": False}).ir
    ir = torchatlas.trace(model, ids, kwargs={"use_cache": False}).ir
    assert no_pending_work()
    assert kinds(ir) == {"all_reduce": 4} == debug_mode_kinds(model, ids, use_cache=False)
    for reduce in collectives(ir):
        path = ir.scope(reduce.scope).path
        assert path.endswith(("self_attn.o_proj", "mlp.down_proj"))
        assert ir.node(reduce.inputs[0]).target == "torch.nn.functional.linear"
        layer = path.rsplit(".", 2)[0]
        residual = next(n for n in ir.ops() if n.target == "torch.Tensor.__add__" and ir.scope(n.scope).path == layer
                        and reaches(ir, reduce.id, n.id))
        assert residual is not None
    assert dead(ir) == dead(plain)  # the mask checks Llama reads into Python, nothing of TP
    q = ir.value_meta(scope_by_path(ir, "model.layers.0.self_attn.q_proj").outputs[0])
    assert q.shape == (1, 8, 64) and q.local_shape == (1, 8, 64 // world) and q.placements == ("Shard(2)",)
    # the split projections hold 1/world each; norms, embeddings and the head stay whole
    split = sum(p.numel() for name, p in tiny_llama().named_parameters() if name.rsplit(".", 2)[-2] in
                {k.rsplit(".", 1)[-1] for k in LLAMA_PLAN})
    assert ir.meta["param_count_per_rank"] == plain.meta["param_count"] - split + split // world


# -- FSDP2 -----------------------------------------------------------------------------------


@pytest.mark.parametrize("world", [2, 4, 8], indirect=True)
def test_fsdp_gathers_each_layers_weights_into_its_matmul(world: int) -> None:
    model = MLP()
    dp = mesh(world, "dp")
    fully_shard(model.w1, mesh=dp)
    fully_shard(model.w2, mesh=dp)
    fully_shard(model, mesh=dp)
    x = torch.randn(2, 16)
    ir = torchatlas.trace(model, x).ir
    assert no_pending_work()
    assert kinds(ir) == {"all_gather": 2} == debug_mode_kinds(model, x)
    for gather in collectives(ir):
        path = ir.scope(gather.scope).path
        linear = next(n for n in ir.ops() if n.target == "torch.nn.functional.linear" and ir.scope(n.scope).path == path)
        assert reaches(ir, gather.id, linear.id)
        assert gather.meta["collective"]["group"] == "dp"
    assert dead(ir) == []


def test_fsdp_llama_gathers_once_per_unit(world: int) -> None:
    model = tiny_llama()
    dp = mesh(world, "dp")
    for layer in model.model.layers:
        fully_shard(layer, mesh=dp)
    fully_shard(model, mesh=dp)
    ids = torch.randint(0, 100, (1, 8))
    plain = torchatlas.trace(tiny_llama(), ids, kwargs={"use_cache": False}).ir
    for _ in range(2):  # the first forward pass lays the unsharded parameters out; later ones reuse them
        model.reshard()  # the root keeps its parameters gathered after forward
        ir = torchatlas.trace(model, ids, kwargs={"use_cache": False}).ir
        assert no_pending_work()
        model.reshard()
        assert kinds(ir) == {"all_gather": 3} == debug_mode_kinds(model, ids, use_cache=False)
        assert dead(ir) == dead(plain)
        assert ir.meta["param_count"] == plain.meta["param_count"] == world * ir.meta["param_count_per_rank"]
        for gather in collectives(ir):
            path = ir.scope(gather.scope).path
            assert path in ("", "model.layers.0", "model.layers.1")
            assert any(reaches(ir, gather.id, n.id) for n in ir.ops() if n.target == "torch.nn.functional.linear")


def test_no_process_group_means_nothing_changes() -> None:
    assert not dist.is_initialized()
    ir = torchatlas.trace(MLP(), torch.randn(2, 16)).ir
    assert kinds(ir) == {} and all(not m.placements for n in ir.nodes for m in n.outputs)


def test_the_collective_stand_ins_are_removed_after_a_trace(world: int) -> None:
    before = dist.all_reduce, dist.distributed_c10d.all_gather_single
    torchatlas.trace(MLP(), torch.randn(2, 16))
    assert (dist.all_reduce, dist.distributed_c10d.all_gather_single) == before


# -- analyses and renderers --------------------------------------------------------------------


@pytest.mark.parametrize("world", [2, 4, 8], indirect=True)
def test_per_rank_parameters_are_the_plain_count_over_the_shards(world: int) -> None:
    plain = sum(p.numel() for p in MLP().parameters())
    model = MLP()
    dp = mesh(world, "dp")
    fully_shard(model.w1, mesh=dp)
    fully_shard(model.w2, mesh=dp)
    fully_shard(model, mesh=dp)
    graph = torchatlas.trace(model, torch.randn(2, 16))
    assert graph.ir.meta["param_count"] == plain
    assert graph.ir.meta["param_count_per_rank"] == plain // world
    assert graph.ir.meta["param_bytes_per_rank"] == 4 * plain // world
    assert scope_by_path(graph.ir, "w1").meta["params_per_rank"] == (64 * 16 + 64) // world


def test_tensor_parallel_parameters_per_rank_keep_replicated_ones_whole(world: int) -> None:
    model = MLP()
    parallelize_module(model, mesh(world, "tp"), {"w1": ColwiseParallel(), "w2": RowwiseParallel()})
    ir = torchatlas.trace(model, torch.randn(2, 16)).ir
    # w2's bias is replicated (added after the all-reduce); the rest is split
    assert ir.meta["param_count_per_rank"] == (64 * 16 + 64 + 16 * 64) // world + 16
    table = {e["path"]: e for e in ir.meta["parameters"]}
    assert table["w1.weight"]["placements"] == ["Shard(0)"] and table["w1.weight"]["local_shape"] == [64 // world, 16]
    assert table["w2.bias"]["placements"] == ["Replicate"]


def test_activation_memory_per_rank_counts_a_dtensor_by_its_local_part() -> None:
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=4)
    try:
        model = MLP()
        parallelize_module(model, mesh(4, "tp"), {"w1": ColwiseParallel(), "w2": RowwiseParallel()})
        ir = torchatlas.trace(model, torch.randn(2, 16)).ir
    finally:
        dist.destroy_process_group()
    row = 2 * 16 * 4  # x, w1's shard of its 2×64 result, relu, w2's partial sum, the all-reduced sum
    assert ir.meta["activation_bytes_per_rank"] == 5 * row
    assert ir.meta["activation_bytes"] == 4 * row + 2 * 64 * 4  # w1's result counted whole
    assert scope_by_path(ir, "w1").meta["activation_bytes_per_rank"] == row


def test_communication_adds_up_per_call_and_per_mesh_dimension(world: int) -> None:
    model = tensor_parallel_llama(world)
    graph = torchatlas.trace(model, torch.randint(0, 100, (1, 8)), kwargs={"use_cache": False})
    ir = graph.ir
    per_reduce = 1 * 8 * 64 * 4  # the hidden states, float32, each rank's full copy
    assert ir.meta["comm_bytes"] == 4 * per_reduce and ir.meta["comm_by_group"] == {"tp": 4 * per_reduce}
    assert ir.meta["collective_count"] == 4 and ir.meta["collectives_by_kind"] == {"all_reduce": 4}
    layer = scope_by_path(ir, "model.layers.0")
    assert layer.meta["comm_bytes"] == 2 * per_reduce and layer.meta["collectives"] == 2
    assert scope_by_path(ir, "model.layers.0.mlp.up_proj").meta["collectives"] == 0
    summary = graph.summary(format="markdown", fold_repeats=False)
    header = summary.splitlines()[0]
    assert "Comm" in header and "Collectives" in header and "Params/rank" in header
    row = next(line for line in summary.splitlines() if "layers.0 (LlamaDecoderLayer)" in line)
    assert "4.00 KiB" in row


def test_the_tree_marks_collectives_and_placements(world: int) -> None:
    model = MLP()
    parallelize_module(model, mesh(world, "tp"), {"w1": ColwiseParallel(), "w2": RowwiseParallel()})
    tree = torchatlas.trace(model, torch.randn(2, 16)).tree()
    assert f"w1 (Linear)  2×16 → 2×64 [Shard(1) over tp:{world}, local 2×{64 // world}]" in tree
    assert f"⇄ all_reduce over tp:{world}, 128 B (P(sum) → R) → 2×16" in tree
    assert "unused" not in tree and "view_as" not in tree and "default" not in tree


def test_a_saved_graph_keeps_placements_and_collectives(world: int, tmp_path) -> None:
    model = MLP()
    parallelize_module(model, mesh(world, "tp"), {"w1": ColwiseParallel(), "w2": RowwiseParallel()})
    graph = torchatlas.trace(model, torch.randn(2, 16))
    loaded = torchatlas.load(graph.save(tmp_path / "tp.json"))
    assert loaded.tree() == graph.tree()
    assert [n.outputs for n in loaded.ir.nodes] == [n.outputs for n in graph.ir.nodes]
    assert loaded.ir.meta["comm_bytes"] == graph.ir.meta["comm_bytes"]


# -- the command line and rank= ----------------------------------------------------------------

LLAMA_SETS = (
    "--set", "num_hidden_layers=2", "--set", "hidden_size=64", "--set", "intermediate_size=128",
    "--set", "num_attention_heads=4", "--set", "num_key_value_heads=4", "--set", "vocab_size=100",
)


def test_cli_tensor_parallel_on_meta_draws_the_all_reduces(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    from _cli_helpers import run_cli

    out = tmp_path / "tp.json"
    code, _, err = run_cli(capsys, "hf:llama/causal-lm", "--tp", "4", "--device", "meta", "--tokens", "1,8", *LLAMA_SETS,
                           "-o", str(out))
    assert code == 0, err
    assert not dist.is_initialized()  # the fake process group lived only while tracing
    ir = torchatlas.load(out).ir
    assert kinds(ir) == {"all_reduce": 4} and ir.meta["distributed"] == {"rank": 0, "world_size": 4}
    assert ir.meta["comm_by_group"] == {"tp": 4 * 8 * 64 * 4}
    q = ir.value_meta(scope_by_path(ir, "model.layers.0.self_attn.q_proj").outputs[0])
    assert q.device == "meta" and q.placements == ("Shard(2)",) and q.local_shape == (1, 8, 16)


def test_cli_tensor_parallel_and_fsdp_together_shard_on_a_2d_mesh(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    from _cli_helpers import run_cli

    out = tmp_path / "2d.json"
    code, _, err = run_cli(capsys, "hf:llama", "--tp", "4", "--fsdp", "2", "--tokens", "1,8", *LLAMA_SETS, "-o", str(out))
    assert code == 0, err
    ir = torchatlas.load(out).ir
    assert ir.meta["distributed"] == {"rank": 0, "world_size": 8}
    assert kinds(ir) == {"all_reduce": 4, "all_gather": 3}
    assert set(ir.meta["comm_by_group"]) == {"dp", "tp"}
    for c in collectives(ir):
        facts = c.meta["collective"]
        assert (facts["group"], facts["group_size"]) == (("tp", 4) if collective_kind(c.target) == "all_reduce" else ("dp", 2))
    assert not any(c.meta["dead"] for c in collectives(ir))


def test_cli_fsdp_gathers_per_layer(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    from _cli_helpers import run_cli

    out = tmp_path / "fsdp.json"
    code, _, err = run_cli(capsys, "hf:llama", "--fsdp", "2", "--rank", "1", "--tokens", "1,8", *LLAMA_SETS, "-o", str(out))
    assert code == 0, err
    ir = torchatlas.load(out).ir
    assert kinds(ir) == {"all_gather": 3} and ir.meta["distributed"] == {"rank": 1, "world_size": 2}  # layers, root
    assert ir.meta["param_count_per_rank"] * 2 == ir.meta["param_count"]
    assert "⇄ all_gather over dp:2" in torchatlas.load(out).tree()


@pytest.mark.parametrize(
    "argv, message",
    [
        (("--rank", "1"), "add one of them"),
        (("--tp", "4", "--rank", "4"), "not a rank of 4"),
        (("--tp", "0"), "from 1 to 65,536"),
        (("--tp", "3"), "cannot share evenly"),
    ],
)
def test_cli_sharding_mistakes_are_one_line_errors(capsys: pytest.CaptureFixture[str], argv, message) -> None:
    from _cli_helpers import run_cli

    code, _, err = run_cli(capsys, "hf:llama", "--device", "meta", "--tokens", "1,8", *LLAMA_SETS, *argv)
    assert code != 0 and message in err and len(err.strip().splitlines()) == 1, err
    assert not dist.is_initialized()


def test_rank_names_the_rank_a_model_was_sharded_for(world: int) -> None:
    model = MLP()
    parallelize_module(model, mesh(world, "tp"), {"w1": ColwiseParallel(), "w2": RowwiseParallel()})
    assert torchatlas.trace(model, torch.randn(2, 16), rank=0).ir.meta["distributed"] == {"rank": 0, "world_size": world}
    with pytest.raises(ValueError, match="this process is rank 0"):
        torchatlas.trace(model, torch.randn(2, 16), rank=1)


def test_rank_without_a_process_group_is_refused() -> None:
    with pytest.raises(ValueError, match="needs a torch.distributed process group"):
        torchatlas.trace(MLP(), torch.randn(2, 16), rank=0)
    with pytest.raises(TypeError, match="rank must be an int, not str"):
        torchatlas.trace(MLP(), torch.randn(2, 16), rank="0")


@pytest.mark.parametrize("shard", ["tp", "fsdp"])
def test_the_aten_level_sees_the_same_collectives_without_profiler_markers(world: int, shard: str) -> None:
    model = MLP()
    if shard == "tp":
        parallelize_module(model, mesh(world, "tp"), {"w1": ColwiseParallel(), "w2": RowwiseParallel()})
    else:
        dp = mesh(world, "dp")
        for module in (model.w1, model.w2, model):
            fully_shard(module, mesh=dp)
    x = torch.randn(2, 16)
    plain = torchatlas.trace(MLP(), x, level="aten").ir
    ir = torchatlas.trace(model, x, level="aten").ir
    assert no_pending_work()
    assert kinds(ir) == ({"all_reduce": 1} if shard == "tp" else {"all_gather": 2}) == debug_mode_kinds(model, x)
    assert not any("record_function" in n.target or "wait_tensor" in n.target for n in ir.ops())
    assert dead(ir) == dead(plain)  # autograd's detach of what relu saves, as on one device
    for c in collectives(ir):
        assert c.meta["collective"]["group"] == shard.replace("fsdp", "dp")
    if shard == "tp":  # from_local/to_local's views pass the value on at this level too
        assert ir.value_meta(scope_by_path(ir, "w1").outputs[0]).placements == ("Shard(1)",)
        assert [n.target for n in ir.ops() if ir.scope(n.scope).path == "w1"] == ["aten.t.default", "aten.addmm.default"]


def test_a_dtensor_given_as_input_is_read_through_its_local_part(world: int) -> None:
    tp = mesh(world, "tp")

    class Local(nn.Module):
        def forward(self, x):
            return x.to_local() * 2

    x = distribute_tensor(torch.randn(8, 4), tp, [Shard(0)])
    ir = torchatlas.trace(Local(), x).ir
    (mul,) = ir.ops()
    given = ir.node(mul.inputs[0])
    assert given.kind == "input" and given.outputs[0].placements == ("Shard(0)",)
    assert given.outputs[0].local_shape == (8 // world, 4)
    assert type(torch.ops._c10d_functional.all_reduce).__name__ == "OpOverloadPacket"  # the stand-ins are gone


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    world_size=st.sampled_from([2, 4, 8]), hidden=st.integers(1, 4), depth=st.integers(1, 3),
    batch=st.integers(1, 3), sequence_parallel=st.booleans(),
)
def test_any_tensor_parallel_mlp_stack_matches_comm_debug_mode(world_size, hidden, depth, batch, sequence_parallel) -> None:
    """Column-wise up, row-wise down; with sequence parallelism the rows between blocks stay
    split (a reduce-scatter after each block, an all-gather before the next)."""
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world_size)
    try:
        width = 8 * hidden
        model = Stack(nn.ModuleList(MLPBlock(width) for _ in range(depth)))
        plan = {}
        for i in range(depth):
            split_rows = sequence_parallel and i > 0
            plan[f"layers.{i}.up"] = ColwiseParallel(input_layouts=Shard(0)) if split_rows else ColwiseParallel()
            plan[f"layers.{i}.down"] = RowwiseParallel(output_layouts=Shard(0)) if sequence_parallel else RowwiseParallel()
        parallelize_module(model, mesh(world_size, "tp"), plan)
        x = torch.randn(batch * world_size, width)
        ir = torchatlas.trace(model, x).ir
        assert no_pending_work()
        expected = {"reduce_scatter": depth, "all_gather": depth - 1} if sequence_parallel else {"all_reduce": depth}
        assert kinds(ir) == collections.Counter({k: n for k, n in expected.items() if n}) == debug_mode_kinds(model, x)
        assert dead(ir) == []
        outputs = [n for n in ir.nodes if n.kind == "output"]
        for c in collectives(ir):  # every collective reaches what the model returns
            assert any(reaches(ir, c.id, o.id) for o in outputs)
    finally:
        dist.destroy_process_group()


class MLPBlock(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.up = nn.Linear(width, 2 * width)
        self.down = nn.Linear(2 * width, width)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


class Stack(nn.Module):
    def __init__(self, layers: nn.ModuleList) -> None:
        super().__init__()
        self.layers = layers

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def test_a_failing_forward_leaves_the_process_group_as_it_found_it(world: int) -> None:
    class Fails(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.mlp = MLP()

        def forward(self, x):
            y = self.mlp(x)
            dist.all_reduce(y)
            raise KeyError("boom")

    model = Fails()
    parallelize_module(model.mlp, mesh(world, "tp"), {"w1": ColwiseParallel(), "w2": RowwiseParallel()})
    before = dist.all_reduce, torch.ops._c10d_functional.all_reduce
    with pytest.raises(KeyError):
        torchatlas.trace(model, torch.randn(2, 16))
    graph = torchatlas.trace(model, torch.randn(2, 16), partial=True)
    assert (dist.all_reduce, torch.ops._c10d_functional.all_reduce) == before
    assert no_pending_work()
    assert kinds(graph.ir) == {"all_reduce": 2}


def test_the_diagram_draws_collectives_in_their_colour_with_dashed_edges(world: int) -> None:
    from torchatlas._view import PALETTES

    model = MLP()
    parallelize_module(model, mesh(world, "tp"), {"w1": ColwiseParallel(), "w2": RowwiseParallel()})
    dot = torchatlas.trace(model, torch.randn(2, 16)).to_dot(depth=5, expand_leaf_modules=True)
    colour = PALETTES["light"].border["communication"]
    (box,) = [line for line in dot.splitlines() if "<B>all_reduce</B>" in line]
    assert f"over tp:{world}, 128 B (P(sum) → R)" in box and f'color="{colour}"' in box
    dashed = [line for line in dot.splitlines() if "->" in line and f'style=dashed, color="{colour}"' in line]
    assert len(dashed) == 2  # into the all-reduce, and out of it to the output


def test_the_page_dashes_edges_across_a_collective_and_names_it(world: int, browser, tmp_path) -> None:
    from _viewer import Viewer

    model = MLP()
    parallelize_module(model, mesh(world, "tp"), {"w1": ColwiseParallel(), "w2": RowwiseParallel()})
    ir = torchatlas.trace(model, torch.randn(2, 16)).ir
    v = Viewer(browser, ir, tmp_path, "tensor-parallel")
    try:
        v.search("all_reduce")
        assert f"all_reduce over tp:{world}, 128 B" in v.details()["collective"]
        assert v.count(".edge.comm") == 2  # into the all-reduce and out of it
        assert v.count('.unit[data-category="communication"]') == 1
        assert v.errors == []
    finally:
        v.close()


def test_run_time_numbers_of_a_sharded_model_leave_no_work_pending(world: int) -> None:
    model = MLP()
    parallelize_module(model, mesh(world, "tp"), {"w1": ColwiseParallel(), "w2": RowwiseParallel()})
    stats = torchatlas.trace(model, torch.randn(2, 16), stats=True).ir
    assert all(n.meta.get("stats") for n in stats.ops())  # a DTensor's: this rank's part
    assert no_pending_work()
    timed = torchatlas.trace(model, torch.randn(2, 16), profile=True).ir  # untraced timing passes too
    assert all(isinstance(n.meta.get("time_us"), float) for n in timed.ops())
    assert no_pending_work()
