"""Sharded models for the distributed tests, and what torch's own debuggers see of them.

Each case builds its model for the process group that exists (fake or real): the same
code shards it on a one-process fake group and inside a ``torch.multiprocessing`` gloo job.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from torchatlas._ops import collective_kind

LLAMA_PLAN = {
    "self_attn.q_proj": "col", "self_attn.k_proj": "col", "self_attn.v_proj": "col", "self_attn.o_proj": "row",
    "mlp.gate_proj": "col", "mlp.up_proj": "col", "mlp.down_proj": "row",
}


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w1 = nn.Linear(16, 64)
        self.w2 = nn.Linear(64, 16)

    def forward(self, x):
        return self.w2(torch.relu(self.w1(x)))


def tiny_llama():
    import transformers

    config = transformers.LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=4, vocab_size=100,
    )
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).eval()


def _mesh(shape: tuple[int, ...], names: tuple[str, ...]):
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh("cpu", shape, mesh_dim_names=names)


def _tp_plan(plan: dict[str, str]) -> dict[str, Any]:
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    return {k: ColwiseParallel() if v == "col" else RowwiseParallel() for k, v in plan.items()}


def tp_mlp(world: int) -> tuple[nn.Module, tuple, dict]:
    from torch.distributed.tensor.parallel import parallelize_module

    torch.manual_seed(0)
    model = MLP()
    parallelize_module(model, _mesh((world,), ("tp",)), _tp_plan({"w1": "col", "w2": "row"}))
    return model, (torch.randn(2, 16),), {}


def tp_llama(world: int) -> tuple[nn.Module, tuple, dict]:
    from torch.distributed.tensor.parallel import parallelize_module

    model, tp = tiny_llama(), _mesh((world,), ("tp",))
    for layer in model.model.layers:
        parallelize_module(layer, tp, _tp_plan(LLAMA_PLAN))
    return model, (torch.randint(0, 100, (1, 8), generator=torch.Generator().manual_seed(0)),), {"use_cache": False}


def fsdp_mlp(world: int) -> tuple[nn.Module, tuple, dict]:
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model, dp = MLP(), _mesh((world,), ("dp",))
    fully_shard(model.w1, mesh=dp)
    fully_shard(model.w2, mesh=dp)
    fully_shard(model, mesh=dp)
    return model, (torch.randn(2, 16),), {}


def two_d_mlp(world: int) -> tuple[nn.Module, tuple, dict]:
    """TP over ``tp`` (2 ranks), then FSDP2 over ``dp`` (the rest): the usual 2-D order."""
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import parallelize_module

    torch.manual_seed(0)
    model, mesh = MLP(), _mesh((world // 2, 2), ("dp", "tp"))
    parallelize_module(model, mesh["tp"], _tp_plan({"w1": "col", "w2": "row"}))
    fully_shard(model.w1, mesh=mesh["dp"])
    fully_shard(model.w2, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    return model, (torch.randn(2, 16),), {}


class LossModel(nn.Module):
    """A vocab-sharded head and its cross-entropy under ``loss_parallel()``: three all-reduces
    inside the loss op."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(16, 32, bias=False)

    def forward(self, x, target):
        import torch.nn.functional as F
        from torch.distributed.tensor.parallel import loss_parallel

        logits = self.head(x)
        with loss_parallel():
            return F.cross_entropy(logits.flatten(0, 1), target.flatten())


def loss_parallel_head(world: int) -> tuple[nn.Module, tuple, dict]:
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module

    torch.manual_seed(0)
    model = LossModel()
    plan = {"head": ColwiseParallel(output_layouts=Shard(-1), use_local_output=False)}
    parallelize_module(model, _mesh((world,), ("tp",)), plan)
    return model, (torch.randn(2, 4, 16), torch.randint(0, 32, (2, 4))), {}


CASES: dict[str, Callable[[int], tuple[nn.Module, tuple, dict]]] = {
    "tp_mlp": tp_mlp, "tp_llama": tp_llama, "fsdp": fsdp_mlp, "2d": two_d_mlp, "loss_parallel": loss_parallel_head,
}


def redistribution_text(text: str) -> str:
    """DebugMode's ``P(sum)->R`` as the trace draws it: ``P(sum) → R``."""
    return text.replace("->", " → ")


def debug_mode_sequence(model: nn.Module, args: tuple, kwargs: dict) -> list[tuple[str, str | None]]:
    """(collective kind, the redistribution it serves as DebugMode names it, None outside one)
    for each collective ``torch.utils._debug_mode.DebugMode`` sees, in order, on an untraced
    forward pass."""
    from torch.utils._debug_mode import DebugMode
    from torch.utils._debug_mode._calls import _OpCall, _RedistributeCall

    with torch.no_grad(), DebugMode(record_torchfunction=False) as mode:
        settle(model(*args, **kwargs))
    sequence: list[tuple[str, str | None]] = []
    inside: list[tuple[int, str]] = []  # open redistributions: (depth, DebugMode's text)
    for call in mode.operators:
        while inside and call.call_depth <= inside[-1][0]:
            inside.pop()
        if isinstance(call, _RedistributeCall) and call.transform_info_str:
            inside.append((call.call_depth, redistribution_text(call.transform_info_str)))
        elif isinstance(call, _OpCall):
            kind = collective_kind(str(call.op))
            if kind is not None:
                sequence.append((kind, inside[-1][1] if inside else None))
    return sequence


def traced_sequence(ir) -> list[tuple[str, str | None]]:
    """The same of a trace: each collective node's kind and redistribution, in order."""
    return [
        (collective_kind(n.target), n.meta["collective"].get("redistribute"))
        for n in ir.ops()
        if collective_kind(n.target) is not None
    ]


def comm_debug_counts(model: nn.Module, args: tuple, kwargs: dict) -> collections.Counter:
    """The collectives torch's ``CommDebugMode`` counts on an untraced forward pass, by kind."""
    from torch.distributed.tensor.debug import CommDebugMode

    with torch.no_grad(), CommDebugMode() as comm:
        settle(model(*args, **kwargs))
    counts: collections.Counter = collections.Counter()
    for op, n in comm.get_comm_counts().items():
        counts[collective_kind(f"c10d.{op._qualified_op_name.split('::')[1]}")] += n
    return counts


def traced_counts(ir) -> collections.Counter:
    return collections.Counter(collective_kind(n.target) for n in ir.ops() if collective_kind(n.target) is not None)


def settle(out: Any) -> Any:
    """Wait for an output a collective made that nothing read yet (an AsyncCollectiveTensor)."""
    logits = getattr(out, "logits", out)
    if hasattr(logits, "wait"):
        logits.wait()
    return out


def trace_facts(graph) -> dict[str, Any]:
    """What must not depend on whether the group is real: every op with its reads, shapes and
    placements, every collective's facts, and the per-rank numbers."""
    ir = graph.ir
    ops = [
        (n.id, n.target, [tuple(r) for r in n.inputs], [(m.shape, m.placements, m.local_shape) for m in n.outputs],
         n.meta.get("collective"), bool(n.meta.get("dead")))
        for n in ir.ops()
    ]
    keys = ("flops", "flops_per_rank", "param_count_per_rank", "comm_bytes", "collectives_by_kind")
    return {"ops": ops, "graph": {k: ir.meta.get(k) for k in keys}, "tree": graph.tree()}


GLOO_CASES = ("tp_mlp", "fsdp", "loss_parallel")


def gloo_rank(rank: int, world: int, store: str, out: str) -> None:
    """One rank of a real gloo job (``torch.multiprocessing.spawn``): trace each of
    :data:`GLOO_CASES` and write what the trace and DebugMode saw to ``out``.rank."""
    import json

    import torch.distributed as dist

    import torchatlas

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        found = {}
        for name in GLOO_CASES:
            found[name] = seen_by_rank(name, world, torchatlas)
        with open(f"{out}.{rank}", "w") as f:
            json.dump(found, f)
    finally:
        dist.destroy_process_group()


def seen_by_rank(name: str, world: int, torchatlas: Any) -> dict[str, Any]:
    """A trace of case ``name`` on this process's group, and DebugMode's collectives."""
    model, args, kwargs = CASES[name](world)
    debug = debug_mode_sequence(model, args, kwargs)
    if hasattr(model, "reshard"):
        model.reshard()  # FSDP2's root keeps its parameters gathered after forward
    graph = torchatlas.trace(model, args, kwargs=kwargs)
    facts = trace_facts(graph)
    return {**facts, "debug_mode": debug, "sequence": traced_sequence(graph.ir)}
