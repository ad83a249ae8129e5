"""``--tp N`` / ``--fsdp N``: a model sharded as it would be on N ranks, on one process.

torch.distributed's fake process group runs tensor parallelism and FSDP2 for any world
size without other processes or a network; with ``--device meta`` the shards hold no
memory, so a 70B model with 8-way tensor parallelism is drawn on a laptop. The process
group lives only while the command traces (:func:`fake_world`).

Tensor parallelism applies the standard plan of Llama-like decoders (Megatron's): the
attention's q/k/v and the MLP's gate/up projections split by output columns, o and down
by input rows, so each attention block and each MLP ends in one all-reduce. FSDP2 shards
every decoder layer and the root; both together shard on a 2-D ``(dp, tp)`` mesh, as
TorchTitan does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from ._spec import SpecError

COLUMN_WISE = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")
ROW_WISE = ("o_proj", "down_proj")


@contextlib.contextmanager
def fake_world(size: int, rank: int = 0) -> Iterator[None]:
    """A fake process group of ``size`` ranks, this process being ``rank``; destroyed afterwards."""
    import torch.distributed as dist

    if not dist.is_available():
        raise SpecError("--tp and --fsdp need torch.distributed, which this torch build lacks")
    if dist.is_initialized():
        raise SpecError("--tp and --fsdp make their own fake process group; one exists already")
    if not 0 <= rank < size:
        raise SpecError(f"--rank {rank} is not a rank of {size} (0 to {size - 1})")
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=size)
    try:
        yield
    finally:
        dist.destroy_process_group()


def mesh_dims(tp: int | None, fsdp: int | None) -> dict[str, int]:
    """The device mesh's dimensions: ``dp`` (FSDP2), then ``tp``, each one given."""
    return {name: size for name, size in (("dp", fsdp), ("tp", tp)) if size is not None}


def shard(model: torch.nn.Module, tp: int | None, fsdp: int | None, spec: str, mesh: Any = None) -> None:
    """Tensor parallelism over ``tp`` ranks, FSDP2 over ``fsdp``, or both on a 2-D ``(dp, tp)`` mesh
    (``mesh``, or one made here)."""
    if mesh is None:
        from torch.distributed.device_mesh import init_device_mesh

        dims = mesh_dims(tp, fsdp)
        mesh = init_device_mesh("cpu", tuple(dims.values()), mesh_dim_names=tuple(dims))
    if tp is not None:  # first, as FSDP2 then shards the DTensors it made (the usual 2-D order)
        tensor_parallel(model, mesh["tp"] if fsdp is not None else mesh, spec)
    if fsdp is not None:
        fully_sharded(model, mesh["dp"] if tp is not None else mesh)


def tensor_parallel(model: torch.nn.Module, mesh: Any, spec: str) -> int:
    """Split ``model``'s projections over the 1-D ``mesh``; how many were split."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    size = mesh.size()
    config = getattr(model, "config", None)
    for key in ("num_attention_heads", "num_key_value_heads"):  # each rank computes whole heads
        heads = getattr(config, key, None)
        if isinstance(heads, int) and heads % size:
            raise SpecError(f"--tp {size}: {spec}'s config has {key}={heads}, which {size} ranks cannot share evenly")
    plan: dict[str, Any] = {}
    for name, module in model.named_modules():
        leaf = name.rsplit(".", 1)[-1]
        if isinstance(module, torch.nn.Linear) and leaf in COLUMN_WISE + ROW_WISE:
            _check_divisible(module, leaf, size, spec)
            plan[name] = ColwiseParallel() if leaf in COLUMN_WISE else RowwiseParallel()
    if not plan:
        raise SpecError(
            f"--tp splits the {'/'.join(COLUMN_WISE + ROW_WISE)} projections of Llama-like models; {spec} has none"
        )
    parallelize_module(model, mesh, plan)
    return len(plan)


def _check_divisible(module: torch.nn.Linear, leaf: str, size: int, spec: str) -> None:
    split = module.out_features if leaf in COLUMN_WISE else module.in_features
    if split % size:
        raise SpecError(f"--tp {size}: {spec}'s {leaf} has {split} features, which {size} ranks cannot share evenly")


def fully_sharded(model: torch.nn.Module, mesh: Any) -> int:
    """Shard every decoder layer (each module of a ModuleList of blocks) and the root over the
    1-D ``mesh``; how many units."""
    from torch.distributed.fsdp import fully_shard

    units = 0
    for module in list(model.modules()):
        if isinstance(module, torch.nn.ModuleList):
            for block in module:
                if any(True for _ in block.parameters()):
                    fully_shard(block, mesh=mesh)
                    units += 1
    fully_shard(model, mesh=mesh)
    return units + 1


def expert_parallel(model: torch.nn.Module, mesh: Any, spec: str) -> int:
    """Shard a transformers MoE model's experts over the ``ep`` dimension of ``mesh`` with its own
    expert-parallel plan (``model.ep_plan``) and transformers' all-to-all token dispatch; the
    ``tp`` dimension (size 1) is the ranks sharing a batch. How many plan entries applied."""
    import re

    plan = getattr(model, "ep_plan", None) or {}
    if not plan:
        raise SpecError(f"--ep shards the experts of a transformers MoE model with an expert-parallel plan; {spec} has none")
    experts = getattr(getattr(model, "config", None), "num_local_experts", None) or getattr(model.config, "num_experts", None)
    size = mesh["ep"].size()
    if isinstance(experts, int) and experts % size:
        raise SpecError(f"--ep {size}: {spec} has {experts} experts, which {size} ranks cannot share evenly")
    from transformers.distributed.expert_parallel import apply_expert_parallelism

    names = [*dict(model.named_modules()), *dict(model.named_parameters())]
    resolved = {  # the plan's ``layers.*.mlp.experts`` for every layer, in the plan's order
        name: style
        for pattern, style in plan.items()
        for name in names
        if re.fullmatch(re.escape(pattern).replace(r"\*", r"\d+"), name)
    }
    apply_expert_parallelism(model, mesh["ep"], mesh["tp"], resolved, ep_implementation="all_to_all")
    return len(resolved)
