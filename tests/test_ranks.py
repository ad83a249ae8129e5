"""Every rank of a job: ``trace_ranks`` on the fake process group, the hang check on planted
bugs, the multi-rank document, ``--ranks`` and ``torchatlas merge`` on the command line."""

from __future__ import annotations

import json

import pytest
import torch
import torch.distributed as dist
from _distributed_models import MLP
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import torchatlas
from torchatlas._cli import main

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not built")

if dist.is_available():
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    from torch.testing._internal.distributed.fake_pg import FakeStore


class Linear8(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)


class SkipsOnRank1(Linear8):
    """Planted bug: rank 1 skips the all-reduce."""

    def forward(self, x):
        y = self.fc(x)
        if dist.get_rank() != 1:
            dist.all_reduce(y)
        return y


class BranchesOnData(Linear8):
    """Planted bug: whether the all-reduce runs depends on each rank's data."""

    def forward(self, x):
        y = self.fc(x)
        if x.sum() > 0:
            dist.all_reduce(y)
        return y


class OtherCollective(Linear8):
    """Planted bug: rank 1 all-gathers where rank 0 all-reduces."""

    def forward(self, x):
        y = self.fc(x)
        if dist.get_rank() == 1:
            out = y.new_empty(2 * y.shape[0], y.shape[1])
            dist.all_gather_into_tensor(out, y)
            return out
        dist.all_reduce(y)
        return y


class UnequalShards(nn.Module):
    """Planted bug: rank 0 gives 3 rows to the all-gather, rank 1 gives 2."""

    def forward(self, x):
        shard = x[: 3 - dist.get_rank()]
        out = x.new_empty(2 * shard.shape[0], x.shape[1])
        dist.all_gather_into_tensor(out, shard)
        return out


class Pipeline(Linear8):
    """Rank 0 sends its activations to rank 1, which receives ``rows`` rows (2 is right)."""

    def __init__(self, rows: int = 2, batched: bool = False) -> None:
        super().__init__()
        self.rows, self.batched = rows, batched

    def forward(self, x):
        if dist.get_rank() == 0:
            y = self.fc(x)
            self.transfer(dist.send, dist.isend, y, 1)
            return y
        got = torch.empty(self.rows, 8)
        self.transfer(dist.recv, dist.irecv, got, 0)
        return self.fc(got)

    def transfer(self, blocking, batched, tensor, peer):
        """``dist.send``/``recv``, or as pipeline schedules do: ``batch_isend_irecv`` of ``P2POp``s."""
        if not self.batched:
            return blocking(tensor, peer)
        for work in dist.batch_isend_irecv([dist.P2POp(batched, tensor, peer)]):
            work.wait()


class Linear8Only(Linear8):
    def forward(self, x):
        return self.fc(x)


class MoE(nn.Module):
    """Expert parallelism in the style of Mixtral (top-1): one expert per rank of the ``ep`` mesh
    dimension. Every rank routes every rank's tokens (the batch is replicated, each rank owns
    its slice), so it knows how many rows it sends to and receives from each expert without
    exchanging counts; the tokens go to their experts and come back with ``all_to_all_single``.
    ``swapped=True`` plants a bug: the combine sends each rank's rows back in the wrong rank
    order (its splits reversed: right in sum, so no rank can tell on its own)."""

    def __init__(self, mesh=None, swapped: bool = False) -> None:
        super().__init__()
        self.router = nn.Linear(8, 2)
        self.expert = nn.Linear(8, 8)  # this rank's expert
        self.group = mesh.get_group("ep") if mesh is not None else None
        self.swapped = swapped

    def forward(self, batch):
        rank, experts = dist.get_rank(self.group), dist.get_world_size(self.group)
        choice = self.router(batch).argmax(-1)  # the expert of each token of each rank
        counts = torch.stack([torch.bincount(c, minlength=experts) for c in choice])  # [from rank, to expert]
        send, receive = counts[rank].tolist(), counts[:, rank].tolist()
        mine = batch[rank]
        order = choice[rank].argsort()
        dispatched = mine.new_empty(sum(receive), mine.shape[-1])
        dist.all_to_all_single(dispatched, mine[order], receive, send, group=self.group)
        done = self.expert(dispatched)
        combined = torch.empty_like(mine)
        returned = receive[::-1] if self.swapped else receive
        dist.all_to_all_single(combined, done, send, returned, group=self.group)
        return combined[order.argsort()]


def expert_parallel(mesh, swapped: bool = False):
    torch.manual_seed(0)
    return MoE(mesh, swapped)


def routed_batch(rank: int = 0) -> tuple[torch.Tensor]:
    """Every rank's 6 tokens (the same on every rank); seeded so the routing is uneven."""
    return (torch.randn(2, 6, 8, generator=torch.Generator().manual_seed(1)),)


def built(cls, *args):
    def build(mesh=None):
        torch.manual_seed(0)
        return cls(*args)

    return build


def tensor_parallel_mlp(mesh):
    torch.manual_seed(0)
    return parallelize_module(MLP(), mesh, {"w1": ColwiseParallel(), "w2": RowwiseParallel()})


def fully_sharded_mlp(mesh):
    torch.manual_seed(0)
    model = MLP()
    fully_shard(model.w1, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def two_dimensional_mlp(mesh):
    model = tensor_parallel_mlp(mesh["tp"])
    fully_shard(model, mesh=mesh["dp"])
    return model


def signs(rank: int) -> tuple[torch.Tensor]:
    """Rank 0 gets positive data, rank 1 negative."""
    return (torch.ones(2, 8) * (1 if rank == 0 else -1),)


# -- the hang check on planted bugs -----------------------------------------------------------


def test_a_rank_that_skips_an_all_reduce_is_a_predicted_hang() -> None:
    ranks = torchatlas.trace_ranks(built(SkipsOnRank1), 2, args=torch.randn(2, 8))
    [problem] = ranks.problems
    assert (problem["kind"], problem["why"], problem["step"], problem["ranks"]) == ("hang", "missing", 0, [1])
    assert problem["group"] == "world" and problem["members"] == [0, 1]
    assert problem["at"][1] is None
    waiting = problem["at"][0]
    assert waiting["op"] == "all_reduce" and waiting["module"] == "<root> (SkipsOnRank1)"
    assert waiting["source"].endswith(f"test_ranks.py:{SkipsOnRank1.forward.__code__.co_firstlineno + 3}")
    assert problem["decision"] is None  # the rank decided, not a tensor
    report = ranks.report(ascii=False)
    assert "PREDICTED HANG on group world (ranks 0, 1) at collective #0: rank(s) 1 issue no collective" in report
    assert "`dist.all_reduce(y)`" in report and "the rank, a flag" in report


def test_a_data_dependent_branch_names_the_decision_that_parted_the_ranks() -> None:
    ranks = torchatlas.trace_ranks(built(BranchesOnData), 2, args=signs)
    [problem] = ranks.problems
    assert (problem["kind"], problem["step"], problem["ranks"]) == ("hang", 0, [1])
    decision = problem["decision"]
    assert decision["code"] == "if x.sum() > 0:" and decision["statement"] == "if"
    assert decision["values"] == {0: True, 1: False}
    assert "parted by: if @ test_ranks.py:" in ranks.report() and "(rank 0: taken; rank 1: not taken)" in ranks.report()


def test_ranks_issuing_different_collectives_at_one_step_hang() -> None:
    [problem] = torchatlas.trace_ranks(built(OtherCollective), 2, args=torch.randn(2, 8)).problems
    assert (problem["kind"], problem["why"], problem["ranks"]) == ("hang", "collective", [0, 1])
    assert [problem["at"][r]["op"] for r in (0, 1)] == ["all_reduce", "all_gather"]


def test_an_all_gather_with_unequal_shards_is_flagged_with_each_ranks_bytes() -> None:
    ranks = torchatlas.trace_ranks(built(UnequalShards), 2, args=torch.randn(4, 8))
    [problem] = ranks.problems
    assert (problem["kind"], problem["why"], problem["ranks"]) == ("unequal shards", "bytes", [0, 1])
    assert [problem["at"][r]["sent_bytes"] for r in (0, 1)] == [3 * 8 * 4, 2 * 8 * 4]
    assert "UNEQUAL SHARDS" in ranks.report() and "96 B sent" in ranks.report()


@pytest.mark.parametrize("batched", [False, True], ids=["send-recv", "batch_isend_irecv"])
def test_a_receive_of_the_wrong_shape_does_not_match_its_send(batched: bool) -> None:
    assert torchatlas.trace_ranks(built(Pipeline, 2, batched), 2, args=torch.randn(2, 8)).problems == []
    [problem] = torchatlas.trace_ranks(built(Pipeline, 3, batched), 2, args=torch.randn(2, 8)).problems
    assert (problem["why"], problem["group"], problem["ranks"]) == ("p2p shape", "0→1", [0, 1])
    assert problem["at"][0]["peer"] == 1 and problem["at"][1]["peer"] == 0
    assert problem["at"][0]["sent"] == [[2, 8]] and problem["at"][1]["received"] == [[3, 8]]
    assert "the receive's shape or dtype is not what was sent" in torchatlas.trace_ranks(
        built(Pipeline, 3, batched), 2, args=torch.randn(2, 8)
    ).report()


def test_a_send_no_rank_receives_is_a_predicted_hang() -> None:
    ranks = torchatlas.trace_ranks(built(Pipeline, 2), 2, args=torch.randn(2, 8))
    merged = torchatlas.Ranks([ranks.graphs[0], torchatlas.trace_ranks(built(Linear8Only), 2, args=torch.randn(2, 8)).graphs[1]])
    [problem] = merged.problems
    assert (problem["kind"], problem["why"], problem["group"], problem["ranks"]) == ("hang", "unmatched", "0→1", [1])
    assert problem["at"][1] is None and problem["at"][0]["op"] == "send"


def test_expert_parallel_all_to_alls_carry_each_ranks_splits_and_a_swapped_combine_is_flagged() -> None:
    ranks = torchatlas.trace_ranks(expert_parallel, 2, mesh={"ep": 2}, args=routed_batch)
    assert ranks.problems == []
    splits = [[n.meta["collective"]["splits"] for n in g.ir.ops() if "collective" in n.meta] for g in ranks.graphs]
    (dispatch0, combine0), (dispatch1, combine1) = splits
    assert dispatch0["sent"] != [3, 3]  # uneven routing: the data decided
    assert dispatch0["sent"][1] == dispatch1["received"][0] and dispatch1["sent"][0] == dispatch0["received"][1]
    assert combine0 == {"sent": dispatch0["received"], "received": dispatch0["sent"]}
    bad = torchatlas.trace_ranks(lambda mesh: expert_parallel(mesh, swapped=True), 2, mesh={"ep": 2}, args=routed_batch)
    [problem] = bad.problems
    # a 1-D mesh over every rank is the default group: "world" (no DTensor names it "ep")
    assert (problem["kind"], problem["why"], problem["group"], problem["step"]) == ("unequal splits", "splits", "world", 1)
    assert "an all-to-all's split sizes disagree" in bad.report() and "splits sent [" in bad.report()


@pytest.mark.parametrize(
    ("build", "mesh"),
    [
        (tensor_parallel_mlp, {"tp": 2}), (fully_sharded_mlp, {"dp": 2}), (two_dimensional_mlp, {"dp": 2, "tp": 2}),
    ],
    ids=["tp", "fsdp2", "2d"],
)
def test_correct_sharded_models_pass(build, mesh) -> None:
    size = 1
    for s in mesh.values():
        size *= s
    ranks = torchatlas.trace_ranks(build, size, mesh=mesh, args=torch.randn(2, 16))
    assert ranks.problems == [] and "no predicted hang" in ranks.report()
    assert [g.ir.meta["distributed"] for g in ranks.graphs] == [{"rank": r, "world_size": size} for r in range(size)]
    assert all(any("collective" in n.meta for n in g.ir.ops()) for g in ranks.graphs)
    assert ranks.differences() == []


def test_each_ranks_graph_is_what_tracing_that_rank_alone_gives() -> None:
    """Ranks one after another in one process leave nothing behind for the next (DTensor caches
    a sharding plan with the mesh of the rank that made it)."""
    ranks = torchatlas.trace_ranks(two_dimensional_mlp, 4, mesh={"dp": 2, "tp": 2}, args=torch.randn(2, 16))
    from torch.distributed.device_mesh import init_device_mesh

    dist.init_process_group("fake", store=FakeStore(), rank=3, world_size=4)
    try:
        model = two_dimensional_mlp(init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp")))
        alone = torchatlas.trace(model, torch.randn(2, 16))
    finally:
        dist.destroy_process_group()
    assert _structure(alone.ir) == _structure(ranks.graphs[3].ir)
    assert _structure(ranks.graphs[0].ir) != _structure(ranks.graphs[3].ir)  # other groups


def test_ranks_traced_in_processes_of_their_own_are_the_ranks_traced_one_after_another() -> None:
    x = torch.randn(2, 16)
    apart = torchatlas.trace_ranks(two_dimensional_mlp, 4, mesh={"dp": 2, "tp": 2}, args=x, processes=2)
    together = torchatlas.trace_ranks(two_dimensional_mlp, 4, mesh={"dp": 2, "tp": 2}, args=x)
    assert [_structure(g.ir) for g in apart.graphs] == [_structure(g.ir) for g in together.graphs]
    assert apart.problems == together.problems == []


def _structure(ir) -> list:
    """Each op with its shapes and collective facts (groups named by rank)."""
    return [(n.target, [m.shape for m in n.outputs], n.meta.get("collective")) for n in ir.ops()]


def test_the_tree_shows_one_rank_and_where_the_others_differ() -> None:
    ranks = torchatlas.trace_ranks(built(SkipsOnRank1), 2, args=torch.randn(2, 8))
    tree = ranks.tree(1, ascii=False)
    assert tree.startswith("rank 1 of 2\nSkipsOnRank1")
    assert "all_reduce" not in tree.split("other ranks")[0]
    assert "<root> (SkipsOnRank1): collectives differ — rank 0: all_reduce world 64 B; rank 1: nothing" in tree


def test_the_summary_gives_each_per_rank_number_its_smallest_and_largest_rank() -> None:
    text = torchatlas.trace_ranks(built(UnequalShards), 2, args=torch.randn(4, 8)).summary(ascii=False)
    header, root = text.splitlines()[1:3]
    assert "Comm min" in header and "Comm max" in header
    assert root.startswith("≠ <root> (UnequalShards)") and "128 B" in root and "192 B" in root


def test_the_multi_rank_document_round_trips(tmp_path) -> None:
    ranks = torchatlas.trace_ranks(built(BranchesOnData), 2, args=signs)
    path = ranks.save(tmp_path / "ranks.json")
    doc = json.loads(path.read_text())
    assert doc["format"] == "torchatlas-ranks" and doc["world_size"] == 2 and len(doc["graphs"]) == 2
    again = torchatlas.load_ranks(path)
    assert again.problems == json.loads(json.dumps(ranks.problems), object_hook=_int_keys)
    assert [g.to_json() for g in again.graphs] == [g.to_json() for g in ranks.graphs]
    with pytest.raises(torchatlas.GraphFormatError, match="a multi-rank document .*: read it with torchatlas.load_ranks"):
        torchatlas.load(path)
    with pytest.raises(torchatlas.GraphFormatError, match="graphs\\[1\\]: "):
        doc["graphs"][1]["nodes"][0]["id"] = 7
        (tmp_path / "bad.json").write_text(json.dumps(doc))
        torchatlas.load_ranks(tmp_path / "bad.json")


def _int_keys(d: dict) -> dict:
    return {int(k) if k.isdigit() else k: v for k, v in d.items()}


def test_merge_of_per_rank_files_is_trace_ranks(tmp_path) -> None:
    ranks = torchatlas.trace_ranks(built(SkipsOnRank1), 2, args=torch.randn(2, 8))
    paths = [g.save(tmp_path / f"graph-rank{r}.json") for r, g in enumerate(ranks.graphs)]
    merged = torchatlas.merge(reversed(paths))
    assert merged.problems == ranks.problems and merged.report() == ranks.report()


def test_merge_refuses_a_missing_or_doubled_rank_in_one_line(tmp_path) -> None:
    ranks = torchatlas.trace_ranks(built(SkipsOnRank1), 2, args=torch.randn(2, 8))
    path = ranks.graphs[1].save(tmp_path / "graph-rank1.json")
    with pytest.raises(ValueError, match="missing rank\\(s\\) 0"):
        torchatlas.merge([path])
    with pytest.raises(ValueError, match="two graphs of rank 1"):
        torchatlas.merge([path, path])
    plain = torchatlas.trace(nn.Linear(2, 2), torch.randn(1, 2)).save(tmp_path / "plain.json")
    with pytest.raises(ValueError, match="not traced under a process group"):
        torchatlas.merge([plain])


def test_trace_ranks_refuses_bad_arguments_and_leaves_no_process_group() -> None:
    with pytest.raises(ValueError, match="mesh \\{'tp': 2\\} has 2 ranks, not world_size=4"):
        torchatlas.trace_ranks(tensor_parallel_mlp, 4, mesh={"tp": 2})
    with pytest.raises(ValueError, match="world_size must be a positive int"):
        torchatlas.trace_ranks(tensor_parallel_mlp, 0)
    with pytest.raises(ValueError, match="processes=2 sends build, args and kwargs to other processes, so they must be picklable"):
        torchatlas.trace_ranks(lambda: MLP(), 2, processes=2)
    hook = __import__("sys").excepthook
    with pytest.raises(RuntimeError, match="boom"):
        torchatlas.trace_ranks(lambda: (_ for _ in ()).throw(RuntimeError("boom")), 2)
    assert not dist.is_initialized() and __import__("sys").excepthook is hook


@settings(max_examples=25, deadline=None)
@given(st.lists(st.sampled_from(["all_reduce", "all_gather", "broadcast"]), max_size=5), st.data())
def test_the_check_finds_a_hang_exactly_when_sequences_differ(plan, data) -> None:
    """Rank 1 runs ``plan`` with one step possibly changed or dropped; the check reports the first
    step where the two sequences differ, and nothing when they are the same."""
    other = list(plan)
    if plan and data.draw(st.booleans()):
        step = data.draw(st.integers(0, len(plan) - 1))
        if data.draw(st.booleans()):
            del other[step]
        else:
            other[step] = data.draw(st.sampled_from(["all_reduce", "all_gather", "broadcast"]))
    problems = torchatlas.trace_ranks(_planned, 2, args=lambda rank: (torch.ones(2, 4), plan if rank == 0 else other)).problems
    first = next((k for k, (a, b) in enumerate(zip(plan, other)) if a != b), None)
    if first is None and len(plan) != len(other):
        first = min(len(plan), len(other))
    assert [p["step"] for p in problems] == ([] if first is None else [first])


def _planned():
    return _Planned()


class _Planned(nn.Module):
    def forward(self, x, plan):
        for kind in plan:
            if kind == "all_reduce":
                dist.all_reduce(x)
            elif kind == "all_gather":
                out = x.new_empty(2 * x.shape[0], x.shape[1])
                dist.all_gather_into_tensor(out, x)
            else:
                dist.broadcast(x, src=0)
        return x


# -- the command line -----------------------------------------------------------------------


MODEL_FILE = '''
import torch, torch.distributed as dist
from torch import nn

class Skip(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        y = self.fc(x)
        if dist.get_rank() != 1:
            dist.all_reduce(y)
        return y
'''


def test_cli_ranks_reports_a_predicted_hang_and_exits_1(tmp_path, capsys) -> None:
    (tmp_path / "skip.py").write_text(MODEL_FILE)
    code = main([f"{tmp_path / 'skip.py'}:Skip", "--input", "2,8", "--ranks", "2", "--rank", "1"])
    out = capsys.readouterr().out
    assert code == 1
    assert "PREDICTED HANG on group world (ranks 0, 1) at collective #0" in out
    assert "skip.py:13" in out and "rank 1 of 2\nSkip" in out


def test_cli_ranks_names_the_rank_a_model_fails_on_and_writes_the_page(tmp_path, capsys) -> None:
    (tmp_path / "skip.py").write_text(MODEL_FILE + FAILS_ON_RANK_1)
    assert main([f"{tmp_path / 'skip.py'}:Fails", "--input", "2,8", "--ranks", "2"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("torchatlas: error: ") and "failed on rank 1 of 2: RuntimeError: rank 1 is broken" in err
    assert main([f"{tmp_path / 'skip.py'}:Skip", "--input", "2,8", "--ranks", "2", "-o", str(tmp_path / "job.html")]) == 1
    assert 'id="atlas-ranks"' in (tmp_path / "job.html").read_text()


def test_cli_ranks_refuses_an_output_it_cannot_write_before_tracing_any_rank(tmp_path, capsys) -> None:
    (tmp_path / "skip.py").write_text(MODEL_FILE + FAILS_ON_RANK_1)
    # Fails raises on rank 1: an -o refused after tracing would report that failure instead
    assert main([f"{tmp_path / 'skip.py'}:Fails", "--input", "2,8", "--ranks", "2", "-o", str(tmp_path / "job.svg")]) == 2
    err = capsys.readouterr().err
    assert err == "torchatlas: error: with several ranks, -o writes the multi-rank document (.json) or the page (.html)\n"
    assert not (tmp_path / "job.svg").exists()


FAILS_ON_RANK_1 = """

class Fails(Skip):
    def forward(self, x):
        if dist.get_rank() == 1:
            raise RuntimeError("rank 1 is broken")
        return self.fc(x)
"""


def test_cli_merge_builds_the_document_from_per_rank_files(tmp_path, capsys) -> None:
    ranks = torchatlas.trace_ranks(tensor_parallel_mlp, 2, mesh={"tp": 2}, args=torch.randn(2, 16))
    paths = [str(g.save(tmp_path / f"graph-rank{r}.json")) for r, g in enumerate(ranks.graphs)]
    assert main(["merge", *paths, "-o", str(tmp_path / "job.json")]) == 0
    assert "no predicted hang" in capsys.readouterr().out
    assert len(torchatlas.load_ranks(tmp_path / "job.json").graphs) == 2
    assert main(["merge", paths[0]]) == 2
    assert "missing rank(s) 1" in capsys.readouterr().err


def test_cli_ranks_of_tensor_parallel_llama_pass(capsys) -> None:
    pytest.importorskip("transformers")
    argv = [
        "hf:llama", "--set", "num_hidden_layers=1", "--set", "hidden_size=64", "--set", "intermediate_size=128",
        "--set", "num_attention_heads=4", "--set", "num_key_value_heads=4", "--set", "vocab_size=100",
        "--tokens", "1,8", "--tp", "2", "--ranks", "-f", "summary",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith("ranks: 2 ranks, collectives line up on every group: no predicted hang")
    assert "Comm min" in out


# -- a real job: 2 gloo processes ------------------------------------------------------------


REAL_CASES = {
    "tp": (tensor_parallel_mlp, {"tp": 2}, lambda: torch.randn(2, 16)),
    "fsdp2": (fully_sharded_mlp, {"dp": 2}, lambda: torch.randn(2, 16)),
    "pipeline": (built(Pipeline, 2), None, lambda: torch.randn(2, 8)),
    "ep": (expert_parallel, {"ep": 2}, lambda: routed_batch()[0]),
}


def _gloo_rank(rank: int, store: str, out: str) -> None:
    """One process of a real 2-rank gloo job: each case traced and saved as its rank's file."""
    from torch.distributed.device_mesh import init_device_mesh

    dist.init_process_group("gloo", store=dist.FileStore(store, 2), rank=rank, world_size=2)
    try:
        for name, (build, mesh, make_input) in REAL_CASES.items():
            model = build(init_device_mesh("cpu", tuple(mesh.values()), mesh_dim_names=tuple(mesh))) if mesh else build()
            torch.manual_seed(1)
            torchatlas.trace(model, make_input()).save(f"{out}/{name}-rank{rank}.json")
    finally:
        dist.destroy_process_group()


def test_a_real_gloo_job_saves_per_rank_graphs_that_merge_into_what_trace_ranks_gives(tmp_path) -> None:
    import torch.multiprocessing as mp

    mp.spawn(_gloo_rank, args=(str(tmp_path / "store"), str(tmp_path)), nprocs=2, join=True)
    for name, (build, mesh, make_input) in REAL_CASES.items():
        merged = torchatlas.merge(sorted(tmp_path.glob(f"{name}-rank*.json")))
        torch.manual_seed(1)
        faked = torchatlas.trace_ranks(build, 2, mesh=mesh, args=make_input())
        assert merged.problems == faked.problems == [], name
        for real, fake in zip(merged.graphs, faked.graphs):
            assert _structure(real.ir) == _structure(fake.ir), name
            assert real.ir.meta["distributed"] == fake.ir.meta["distributed"]
        assert merged.report() == faked.report() and merged.summary() == faked.summary()


# -- the page ---------------------------------------------------------------------------------


def test_the_page_picks_a_rank_and_fills_where_ranks_differ(browser, tmp_path) -> None:
    from _viewer import ARTIFACTS, VIEWPORT, open_viewer

    ranks = torchatlas.trace_ranks(built(SkipsOnRank1), 2, args=torch.randn(2, 8))
    path = ranks.to_html(tmp_path / "ranks.html")
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        open_viewer(page, path, timeout_ms=60_000)
        assert page.evaluate("window.__atlas.rank") == 0
        assert page.eval_on_selector_all(".rank-picker option", "os => os.map(o => o.textContent)") == ["rank 0", "rank 1"]
        communication = '.unit[data-category="communication"]'
        assert page.locator(communication).count() == 1  # rank 0's all-reduce
        page.select_option(".toolbar select[aria-label='Colour boxes by']", "drk")
        page.wait_for_timeout(300)
        # the fill colours darkest the ops of the call whose ranks differ: the root's all-reduce, not fc
        filled = "us => Object.fromEntries(us.map(u => [u.dataset.category, u.style.getPropertyValue('--unit-overlay')]))"
        darkest = f"var(--overlay-{page.evaluate('window.__atlas.app.model.doc.overlaySteps') - 1})"
        assert page.eval_on_selector_all(".unit", filled) == {"io": "", "compute": "var(--overlay-0)", "communication": darkest}
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "ranks-picker-rank0.png"))
        page.select_option(".rank-picker", "1")
        page.wait_for_function("() => window.__atlas.rank === 1 && window.__atlas.app.result")
        page.wait_for_timeout(700)
        assert page.locator(communication).count() == 0  # rank 1 skips it
        assert page.locator(".rank-picker").input_value() == "1"
        assert page.locator(".toolbar select[aria-label='Colour boxes by']").input_value() == "drk"  # kept
        page.screenshot(path=str(ARTIFACTS / "ranks-picker-rank1.png"))
        assert errors == []
    finally:
        context.close()
