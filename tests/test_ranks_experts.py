"""Expert parallelism on every rank: the tokens each rank's experts run on (``ranks.expert_load()``,
an overlay), transformers' own expert-parallel plan with its all-to-alls, and ``--ep``."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from test_ranks import expert_parallel, routed_batch

import torchatlas
from torchatlas._cli import main

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not built")

MIXTRAL = {
    "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 4, "vocab_size": 100, "num_local_experts": 4, "num_experts_per_tok": 2,
}


def test_the_load_of_each_ranks_expert_is_the_tokens_routed_to_it() -> None:
    ranks = torchatlas.trace_ranks(expert_parallel, 2, mesh={"ep": 2}, args=routed_batch)
    loads = ranks.expert_load()
    (batch,) = routed_batch()
    routed = torch.bincount(expert_parallel(None).router(batch).argmax(-1).flatten(), minlength=2).tolist()
    assert [load[""] for load in loads] == routed and routed[0] != routed[1]  # the root call dispatches
    for rank, graph in enumerate(ranks.graphs):
        overlay = graph.ir.meta["overlays"]["expert load"]
        assert overlay["kind"] == "number" and routed[rank] in overlay["values"].values()
    assert f"[expert load {routed[1]}]" in ranks.graphs[1].tree()


def mixtral_expert_parallel(mesh):
    import transformers

    from torchatlas._cli import _parallel

    torch.manual_seed(0)
    model = transformers.MixtralForCausalLM(transformers.MixtralConfig(**MIXTRAL)).eval()
    _parallel.expert_parallel(model, mesh, "hf:mixtral")
    return model


def tokens(rank: int) -> tuple[torch.Tensor]:
    return (torch.randint(0, 100, (2, 8), generator=torch.Generator().manual_seed(rank)),)


def test_transformers_expert_parallel_plan_dispatches_and_combines_with_all_to_alls() -> None:
    pytest.importorskip("transformers")
    with torch.no_grad():
        ranks = torchatlas.trace_ranks(mixtral_expert_parallel, 2, mesh={"ep": 2, "tp": 1}, args=tokens)
    assert ranks.problems == []
    for graph in ranks.graphs:
        moved = [
            (n.target, n.outputs[0].dtype if n.outputs else None, n.meta["collective"].get("splits"))
            for n in graph.ir.ops() if "collective" in n.meta
        ]
        assert len(moved) == 3 * 2  # per layer: the exchange of counts, the dispatch, the combine
        counts, dispatch, combine = moved[:3]
        assert counts[0] == "torch.distributed.all_to_all_single" and "int64" in str(counts[1])
        assert dispatch[0].endswith("all_to_all_single") and dispatch[2]["checked"] is False  # sizes from a fake exchange
        assert sum(dispatch[2]["sent"]) == 2 * 8 * MIXTRAL["num_experts_per_tok"]  # every (token, expert) pair goes
        assert combine[2]["received"] == dispatch[2]["sent"]
    loads = ranks.expert_load()
    pairs = 2 * 8 * MIXTRAL["num_experts_per_tok"]
    for layer in ("model.layers.0.mlp.experts", "model.layers.1.mlp.experts"):
        assert sum(load[layer] for load in loads) == 2 * pairs  # both ranks' pairs, each run by one rank


def test_cli_ep_shards_the_experts_and_shows_their_load(capsys) -> None:
    pytest.importorskip("transformers")
    argv = ["hf:mixtral", *[f"--set={k}={v}" for k, v in MIXTRAL.items()], "--tokens", "2,8", "--ranks", "--ep", "2"]
    assert main([*argv, "--rank", "1"]) == 0
    out = capsys.readouterr().out
    assert "ranks: 2 ranks, collectives line up on every group: no predicted hang" in out
    assert "experts (MixtralExperts)" in out and "[expert load " in out
    assert "⇄ all_to_all over ep:2" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["hf:mixtral", "--set=num_local_experts=3", "--ep", "2", "--ranks"], "has 3 experts, which 2 ranks cannot share"),
        (["hf:mixtral", "--ep", "2"], "--ep traces every rank (--ranks)"),
        (["hf:llama", "--ep", "2", "--ranks"], "hf:llama has none"),
    ],
)
def test_cli_ep_mistakes_are_one_line_errors(capsys, argv, message) -> None:
    pytest.importorskip("transformers")
    small = [f"--set={k}={v}" for k, v in MIXTRAL.items() if "experts" not in k]
    assert main([argv[0], *small, *argv[1:], "--tokens", "1,8"]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
