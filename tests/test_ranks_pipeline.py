"""Pipeline parallelism on every rank: ``torch.distributed.pipelining`` schedules traced by
``trace_ranks``, each stage's graph with its sends and receives, the schedule's actions per
rank, and the hang check on a stage that receives the wrong shape."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from _distributed_models import MLP
from torch import nn

import torchatlas

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not built")

if dist.is_available():
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

SCHEDULES = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B"}
MICROBATCHES = 4
BATCH = torch.randn(8, 16, generator=torch.Generator().manual_seed(0))


class Part(nn.Module):
    """One stage: a linear layer of 16 features and a ReLU."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x):
        return torch.relu(self.fc(x))


def part(stage: int) -> Part:
    torch.manual_seed(stage)
    return Part()


def pipeline(schedule: str, shapes: str = "inferred", rows_received_last: int = 2, group=None, stage_module=part):
    """A build for ``trace_ranks``: this rank's stage of a pipeline of ``Part``s, run by
    ``schedule``. ``shapes="given"``: each stage is given its microbatch's input and output
    (2 rows), the last stage ``rows_received_last`` rows (2 is right: the planted bug is 3)."""

    def build(mesh=None):
        pp = mesh.get_group("pp") if mesh is not None else group
        stage, stages = dist.get_rank(pp), dist.get_world_size(pp)
        module = stage_module(stage) if mesh is None else stage_module(stage, mesh)
        given = {}
        if shapes == "given":
            rows = rows_received_last if stage == stages - 1 else 2
            given = {"input_args": torch.empty(rows, 16), "output_args": torch.empty(2, 16)}
        made = PipelineStage(module, stage, stages, torch.device("cpu"), group=pp, **given)
        return (ScheduleGPipe if schedule == "gpipe" else Schedule1F1B)(made, n_microbatches=MICROBATCHES)

    return build


def first_stage_gets_the_batch(rank: int) -> tuple:
    return (BATCH,) if rank == 0 else ()


def forward_actions(stage: int, stages: int) -> list[str]:
    """What a forward-only schedule does on ``stage``: per microbatch, receive, run, send."""
    actions = []
    for mb in range(MICROBATCHES):
        if stage > 0:
            actions.append(f"{stage}RECV_F{mb}")
        actions.append(f"{stage}F{mb}")
        if stage < stages - 1:
            actions.append(f"{stage}SEND_F{mb}")
    return actions


def p2p(graph) -> list[tuple[str, int, list, int]]:
    """(op, peer, shape, bytes) of each send and receive, in order."""
    found = []
    for n in graph.ir.ops():
        facts = n.meta.get("collective") or {}
        if facts.get("op") in ("isend", "irecv", "send", "recv"):
            shape = graph.ir.value_meta(n.inputs[0]).shape if n.inputs and not n.outputs else n.outputs[0].shape
            found.append((facts["op"], facts["peer"], list(shape), facts["bytes"]))
    return found


@pytest.mark.parametrize("shapes", ["inferred", "given"])
@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
def test_each_stage_is_a_graph_with_its_sends_receives_and_schedule(schedule: str, shapes: str) -> None:
    with torch.no_grad():
        ranks = torchatlas.trace_ranks(pipeline(schedule, shapes), 3, args=first_stage_gets_the_batch)
    assert ranks.problems == [] and "no predicted hang" in ranks.report()
    for rank, graph in enumerate(ranks.graphs):
        facts = graph.ir.meta["pipeline"]
        assert facts == {
            "schedule": SCHEDULES[schedule], "stages": [rank], "num_stages": 3, "microbatches": MICROBATCHES,
            "actions": forward_actions(rank, 3),
        }
        # this rank's stage only, once per microbatch; inferring the shapes runs it once more first
        calls = [s.path for s in graph.ir.scopes if s.label.endswith("(Part)")]
        assert calls == [f"stage{rank}"] * (MICROBATCHES + (shapes == "inferred"))
        sends = [("isend", rank + 1, [2, 16], 2 * 16 * 4)] * MICROBATCHES if rank < 2 else []
        receives = [("irecv", rank - 1, [2, 16], 2 * 16 * 4)] * MICROBATCHES if rank > 0 else []
        moved = p2p(graph)
        assert sorted(m for m in moved if m[2] == [2, 16]) == sorted(sends + receives)
        # and the inferred shapes go to the next stage first: a size and the pickled shapes
        exchanged = [m[:2] for m in moved if m[2] != [2, 16]]
        links = [("irecv", rank - 1)] * (rank > 0) * 2 + [("isend", rank + 1)] * (rank < 2) * 2
        assert exchanged == (links if shapes == "inferred" else [])
    assert ranks.differences() == []  # stages differ by design; no two ranks hold the same stage


def test_the_last_stage_computes_what_the_stages_compute_one_after_another() -> None:
    """A receive gets what its peer sent: the pipeline's output is the eager model's."""
    with torch.no_grad():
        ranks = torchatlas.trace_ranks(pipeline("gpipe"), 3, args=first_stage_gets_the_batch, save="stage2*")
        expected = part(2)(part(1)(part(0)(BATCH)))
    last = ranks.graphs[2]
    # call 0 infers the shapes (on meta); the microbatches follow
    got = torch.cat([last.activation(f"stage2#{mb + 1}") for mb in range(MICROBATCHES)])
    torch.testing.assert_close(got, expected)


def test_a_last_stage_that_receives_the_wrong_shape_is_a_predicted_hang() -> None:
    with torch.no_grad():
        ranks = torchatlas.trace_ranks(pipeline("gpipe", "given", 3), 3, args=first_stage_gets_the_batch)
    [problem] = ranks.problems
    assert (problem["kind"], problem["why"], problem["group"], problem["step"], problem["ranks"]) == (
        "hang", "p2p shape", "1→2", 0, [1, 2]
    )
    sent, received = problem["at"][1], problem["at"][2]
    assert (sent["op"], sent["peer"], sent["sent"], sent["action"]) == ("send", 2, [[2, 16]], "1SEND_F0")
    assert (received["op"], received["peer"], received["received"], received["action"]) == ("recv", 1, [[3, 16]], "2RECV_F0")
    report = ranks.report(ascii=False)
    assert "PREDICTED HANG on group 1→2 (ranks 1, 2)" in report and "recv peer 1 for 2RECV_F0 3×16" in report


def test_stages_that_disagree_on_giving_their_shapes_are_refused_in_one_line() -> None:
    def build():
        stage = dist.get_rank()
        given = {"input_args": torch.empty(2, 16), "output_args": torch.empty(2, 16)} if stage == 1 else {}
        return ScheduleGPipe(PipelineStage(part(stage), stage, 2, torch.device("cpu"), **given), MICROBATCHES)

    with pytest.raises(ValueError, match=r"pipeline stage\(s\) 1 are given input_args/output_args and stage\(s\) 0 are not"):
        with torch.no_grad():
            torchatlas.trace_ranks(build, 2, args=first_stage_gets_the_batch)
    assert not dist.is_initialized()


def tensor_parallel_part(stage: int, mesh) -> nn.Module:
    torch.manual_seed(stage)
    return parallelize_module(MLP(), mesh["tp"], {"w1": ColwiseParallel(), "w2": RowwiseParallel()})


def test_tensor_parallel_stages_of_a_pipeline_line_up_and_ranks_of_one_stage_are_compared() -> None:
    with torch.no_grad():
        ranks = torchatlas.trace_ranks(
            pipeline("1f1b", stage_module=tensor_parallel_part), 4, mesh={"pp": 2, "tp": 2},
            args=lambda rank: (BATCH,) if rank < 2 else (),
        )
    assert ranks.problems == []
    stages = [g.ir.meta["pipeline"]["stages"] for g in ranks.graphs]
    assert stages == [[0], [0], [1], [1]]  # the pp dimension is the outer one
    for graph in ranks.graphs:
        kinds = [n.meta["collective"]["op"] for n in graph.ir.ops() if "collective" in n.meta]
        assert kinds.count("all_reduce") == MICROBATCHES + 1  # the row-wise w2 of each microbatch, and of the shapes
    assert {p[1] for p in p2p(ranks.graphs[0])} == {2} and {p[1] for p in p2p(ranks.graphs[3])} == {1}
    assert ranks.differences() == []


def test_the_tree_of_a_pipeline_rank_starts_with_its_schedule() -> None:
    with torch.no_grad():
        ranks = torchatlas.trace_ranks(pipeline("gpipe"), 2, args=first_stage_gets_the_batch)
    text = ranks.tree(1, ascii=False)
    assert text.splitlines()[1] == "ScheduleGPipe: stage 1 of 2, 4 microbatches: " + " ".join(forward_actions(1, 2))
    assert "⇄ recv over world:2, 128 B: irecv → 2×16" in text


def test_a_schedule_traced_alone_keeps_nothing_patched() -> None:
    from torch.distributed.pipelining.schedules import _PipelineSchedule
    from torch.testing._internal.distributed.fake_pg import FakeStore

    warmup = _PipelineSchedule._warmup_p2p
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    try:
        schedule = pipeline("gpipe", "given")()
        graph = torchatlas.trace(schedule, BATCH)
        stage = schedule._stage
        assert "forward_one_chunk" not in vars(stage) and _PipelineSchedule._warmup_p2p is warmup
    finally:
        dist.destroy_process_group()
    assert graph.ir.meta["pipeline"]["actions"] == forward_actions(0, 2)


TINY_LLAMA = [
    "hf:llama", "--task", "causal-lm", "--set", "num_hidden_layers=4", "--set", "hidden_size=64",
    "--set", "intermediate_size=128", "--set", "num_attention_heads=4", "--set", "num_key_value_heads=4",
    "--set", "vocab_size=100", "--tokens", "2,8",
]


def test_cli_pp_cuts_llama_into_stages_each_tensor_parallel(capsys) -> None:
    pytest.importorskip("transformers")
    from torchatlas._cli import main

    assert main([*TINY_LLAMA, "--ranks", "--pp", "2", "--tp", "2", "--rank", "3", "--depth", "2"]) == 0
    out = capsys.readouterr().out
    assert "ranks: 4 ranks, collectives line up on every group: no predicted hang" in out
    assert "ScheduleGPipe: stage 1 of 2, 2 microbatches: 1RECV_F0 1F0 1RECV_F1 1F1" in out
    # stage 1 holds layers 2 and 3 (their numbers kept), the norm and the head: 1×8×100 logits per microbatch
    assert "stage1 (" in out and "layers.2–3 (LlamaDecoderLayer) ×2" in out and "lm_head (Linear)  1×8×64 → 1×8×100" in out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--pp", "2"], "--pp traces every rank (--ranks)"),
        (["--pp", "8", "--ranks"], "--pp 8: hf:llama has 4 decoder layers, fewer than the stages"),
        (["--pp", "2", "--fsdp", "2", "--ranks"], "not with --fsdp"),
    ],
)
def test_cli_pp_mistakes_are_one_line_errors(capsys, extra, message) -> None:
    pytest.importorskip("transformers")
    from torchatlas._cli import main

    assert main([*TINY_LLAMA, *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_a_pipeline_job_saves_and_loads_with_its_schedule_and_the_hang(tmp_path) -> None:
    with torch.no_grad():
        ranks = torchatlas.trace_ranks(pipeline("gpipe", "given", 3), 3, args=first_stage_gets_the_batch)
    loaded = torchatlas.load_ranks(ranks.save(tmp_path / "job.json"))
    assert [g.ir.meta["pipeline"] for g in loaded.graphs] == [g.ir.meta["pipeline"] for g in ranks.graphs]
    assert loaded.problems == ranks.problems and loaded.report() == ranks.report()
    assert "parted by" not in ranks.report()  # both ranks reached the pair: a size parted them, not a branch


@pytest.mark.parametrize("level", ["python", "aten"])
def test_handing_a_receive_its_message_is_no_op_of_the_trace(level: str) -> None:
    with torch.no_grad():
        ranks = torchatlas.trace_ranks(pipeline("gpipe", "given"), 2, args=first_stage_gets_the_batch, level=level)
    targets = [n.target for n in ranks.graphs[1].ir.ops()]
    assert not any("copy" in t or "clone" in t for t in targets), targets
    assert not any("clone" in t for t in (n.target for n in ranks.graphs[0].ir.ops()))


class TwoLayers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(16, 16), nn.Linear(16, 16)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def split_by_pipeline():
    """``pipeline()``'s own split (before ``b``), whose stages greet their neighbours first."""
    from torch.distributed.pipelining import SplitPoint
    from torch.distributed.pipelining import pipeline as split

    torch.manual_seed(0)
    pipe = split(TwoLayers(), mb_args=(torch.empty(2, 16),), split_spec={"b": SplitPoint.BEGINNING})
    return ScheduleGPipe(pipe.build_stage(dist.get_rank(), torch.device("cpu")), n_microbatches=MICROBATCHES)


@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_a_model_split_by_pipeline_traces_each_stage_and_computes_the_model() -> None:
    with torch.no_grad():
        ranks = torchatlas.trace_ranks(split_by_pipeline, 2, args=first_stage_gets_the_batch, save="stage1")
        torch.manual_seed(0)
        expected = TwoLayers()(BATCH)
    assert ranks.problems == []  # the greeting: a 0-d send into a 1-element buffer, as backends match them
    assert [g.ir.meta["pipeline"]["actions"] for g in ranks.graphs] == [forward_actions(0, 2), forward_actions(1, 2)]
    last = ranks.graphs[1]
    got = torch.cat([last.activation("stage1" if mb == 0 else f"stage1#{mb}") for mb in range(MICROBATCHES)])
    torch.testing.assert_close(got, expected)


def test_the_summary_and_page_of_a_pipeline_compare_a_stage_over_the_ranks_holding_it(tmp_path) -> None:
    with torch.no_grad():
        ranks = torchatlas.trace_ranks(pipeline("1f1b", "given"), 3, args=first_stage_gets_the_batch)
    rows = ranks.summary(ascii=False).splitlines()[2:]
    assert rows[0].startswith("≠ <root> (PipelineRun)")  # the first stage sends, the last receives
    stage_rows = [r for r in rows if "(Part)" in r]
    assert len(stage_rows) == 3 * MICROBATCHES and not any(r.startswith("≠") for r in stage_rows)
    page = ranks.to_html(tmp_path / "job.html", rank=2).read_text()
    assert 'id="atlas-ranks"' in page
