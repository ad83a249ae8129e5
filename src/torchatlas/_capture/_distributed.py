"""torch.distributed as a trace sees it: collectives, DTensors and the wrappers between them.

* A **DTensor** is a global value whose rank-local part is ``_local_tensor``; an
  ``AsyncCollectiveTensor`` is a collective's result waiting in ``elem``. Both are the same
  value as the tensor they wrap: data flow reads through them (:func:`inner_tensor`), and a
  DTensor's recorded meta adds its placements, mesh and local shape (:func:`dist_meta`).
* Wrapping calls compute nothing: ``x.view_as(x)`` (DTensor's ``from_local``/``to_local``),
  ``_c10d_functional._wrap_tensor_autograd`` and ``wait_tensor`` are folded into the value
  they pass on (:data:`PLUMBING`).
* A **functional collective** (``torch.ops._c10d_functional.all_reduce``...) is an op the mode
  sees; its node gets :func:`collective_facts` (kind, group, bytes, the redistribution it
  serves) and the trace waits for it at once, so no work is left pending.
* A functional collective a DTensor op runs inside its ``__torch_dispatch__`` (a
  redistribution of an operand) is seen by no mode: while an op on DTensors runs, the
  ``torch.ops._c10d_functional`` ops stand in (:class:`Packet`), the collective becomes a node
  before the op, and the op reads its result (:func:`redirect`).
* A **c10d call** (``dist.all_reduce(t)``, FSDP2's ``dist.all_gather_single``) runs in C++
  where no mode sees it: while a trace runs, :func:`stand_ins` wrap the ``torch.distributed``
  functions so each becomes an in-place op node reading what it sends and writing what it
  receives.

Nothing here imports ``torch.distributed`` unless the model already did.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
from collections.abc import Callable, Iterator
from typing import Any

import torch

from . import _pipeline

Tensor = torch.Tensor
Slot = tuple[int, int]  # (record index, output slot), as in _records
_DTENSOR_MODULE = "torch.distributed.tensor._api"
_FUNCOL_MODULE = "torch.distributed._functional_collectives"
_C10D_MODULE = "torch.distributed.distributed_c10d"

PLUMBING = frozenset(
    {
        "torch.Tensor.view_as",  # only x.view_as(x): see is_plumbing
        "_c10d_functional._wrap_tensor_autograd",
        "_c10d_functional._wrap_tensor_autograd.default",
        "_c10d_functional.wait_tensor",
        "_c10d_functional.wait_tensor.default",
    }
)
"""Targets of calls that pass a value on unchanged (folded into it, never a node)."""

FUNCTIONAL_PREFIX = "_c10d_functional."

# c10d function -> (arguments it reads, arguments it writes), by parameter name
C10D_CALLS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "all_reduce": (("tensor",), ("tensor",)),
    "all_reduce_coalesced": (("tensors",), ("tensors",)),
    "broadcast": (("tensor",), ("tensor",)),
    "reduce": (("tensor",), ("tensor",)),
    "all_gather": (("tensor",), ("tensor_list",)),
    "all_gather_into_tensor": (("input_tensor",), ("output_tensor",)),
    "all_gather_single": (("input_tensor",), ("output_tensor",)),
    "_all_gather_base": (("input_tensor",), ("output_tensor",)),
    "reduce_scatter": (("input_list",), ("output",)),
    "reduce_scatter_tensor": (("input",), ("output",)),
    "reduce_scatter_single": (("input",), ("output",)),
    "_reduce_scatter_base": (("input",), ("output",)),
    "all_to_all": (("input_tensor_list",), ("output_tensor_list",)),
    "all_to_all_single": (("input",), ("output",)),
    "scatter": (("scatter_list",), ("tensor",)),
    "gather": (("tensor",), ("gather_list",)),
    "send": (("tensor",), ()),
    "isend": (("tensor",), ()),
    "recv": ((), ("tensor",)),
    "irecv": ((), ("tensor",)),
}


P2P_CALLS = frozenset({"send", "isend", "recv", "irecv"})


def initialized() -> bool:
    """A default process group exists (the model may run collectives)."""
    c10d = sys.modules.get(_C10D_MODULE)
    return c10d is not None and c10d.is_initialized()


def check_rank(rank: int) -> None:
    """``trace(rank=r)``: refuse, in one line, a process that is not rank ``r``."""
    if not isinstance(rank, int) or isinstance(rank, bool):
        raise TypeError(f"torchatlas: rank must be an int, not {type(rank).__name__}")
    if not initialized():
        raise ValueError(
            f"torchatlas: rank={rank} needs a torch.distributed process group; make one with "
            f"init_process_group('fake', store=FakeStore(), rank={rank}, world_size=N) before sharding the model"
        )
    c10d = sys.modules[_C10D_MODULE]
    here, size = c10d.get_rank(), c10d.get_world_size()
    if not 0 <= rank < size:
        raise ValueError(f"torchatlas: rank={rank} is not a rank of this process group of {size}")
    if here != rank:
        raise ValueError(
            f"torchatlas: rank={rank}, but this process is rank {here}; a model is sharded for the rank its "
            f"process group was made with: init_process_group('fake', ..., rank={rank}, world_size={size})"
        )


def world() -> dict[str, int]:
    """``graph.ir.meta["distributed"]``: this process's rank and the world size."""
    c10d = sys.modules[_C10D_MODULE]
    return {"rank": int(c10d.get_rank()), "world_size": int(c10d.get_world_size())}


def _wrapper_classes() -> tuple[type | None, type | None]:
    dtensor = sys.modules.get(_DTENSOR_MODULE)
    funcol = sys.modules.get(_FUNCOL_MODULE)
    return (
        getattr(dtensor, "DTensor", None) if dtensor is not None else None,
        getattr(funcol, "AsyncCollectiveTensor", None) if funcol is not None else None,
    )


def inner_tensor(t: Tensor) -> Tensor | None:
    """The tensor a DTensor or AsyncCollectiveTensor wraps (the same value), else None."""
    cls = type(t)
    if cls is Tensor or cls is torch.nn.Parameter:
        return None
    dtensor, waiting = _wrapper_classes()
    if dtensor is not None and isinstance(t, dtensor):
        return t._local_tensor
    if waiting is not None and isinstance(t, waiting):
        return t.elem
    return None


def is_dtensor(t: Any) -> bool:
    dtensor = _wrapper_classes()[0]
    return dtensor is not None and isinstance(t, dtensor)


def has_dtensor(args: tuple, kwargs: dict) -> bool:
    """Whether a call is given a DTensor (directly or in a list)."""
    dtensor = _wrapper_classes()[0]
    if dtensor is None:
        return False
    for a in (*args, *kwargs.values()):
        if isinstance(a, dtensor) or (type(a) in (list, tuple) and any(isinstance(x, dtensor) for x in a)):
            return True
    return False


def placement_text(p: Any) -> str:
    """``Shard(1)``, ``Replicate``, ``Partial(sum)``: a placement as the tree shows it."""
    name = type(p).__name__
    if name == "Replicate":
        return "Replicate"
    if name == "Shard":
        return f"Shard({p.dim})"
    if name == "Partial":
        return f"Partial({getattr(p, 'reduce_op', 'sum')})"
    return str(p)


def dist_meta(t: Tensor) -> tuple[tuple[str, ...], tuple[tuple[str, int], ...], tuple[Any, ...]] | None:
    """(placements, mesh dims as (name, size), local shape) of a DTensor; None for other tensors."""
    if not is_dtensor(t):
        return None
    mesh = t.device_mesh
    names = mesh.mesh_dim_names or tuple(f"dim{i}" for i in range(mesh.ndim))
    local = t._local_tensor
    return (
        tuple(placement_text(p) for p in t.placements),
        tuple(zip(names, (int(s) for s in mesh.shape))),
        tuple(s if isinstance(s, int) else str(s) for s in local.shape),
    )


def is_plumbing(target: str, args: tuple) -> bool:
    """A call that passes its first argument on as it is (``x.view_as(x)``, a wrap, a wait)."""
    if target == "torch.Tensor.view_as":
        return len(args) == 2 and args[0] is args[1]
    return bool(args) and isinstance(args[0], Tensor)


# -- collectives -----------------------------------------------------------------------------


def _nbytes(tensors: list[Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


class Groups:
    """What one trace knows of process groups: the mesh dimension each one is (a 1-D mesh over
    every rank reuses the default group, so only a mesh that uses it can name it)."""

    def __init__(self) -> None:
        self.mesh_dims: dict[str, str] = {}  # group name -> mesh dimension name
        self._facts: dict[Any, dict[str, Any]] = {}

    def saw_mesh(self, mesh: Any) -> None:
        names = mesh.mesh_dim_names
        if not names:
            return
        for dim, name in enumerate(names):
            try:
                self.mesh_dims.setdefault(mesh.get_group(dim).group_name, name)
            except (RuntimeError, ValueError, AttributeError):
                continue

    def saw_meshes_of(self, tensors: list[Tensor]) -> None:
        """The meshes of the DTensors among ``tensors`` (a model's parameters), each once."""
        meshes = {id(t.device_mesh): t.device_mesh for t in tensors if is_dtensor(t)}
        for mesh in meshes.values():
            self.saw_mesh(mesh)

    def facts(self, group: Any) -> dict[str, Any]:
        """Mesh dimension name (``tp``; ``world`` for the default group), size and ranks of a group."""
        key = group if isinstance(group, (str, type(None))) else id(group)
        known = self._facts.get(key)
        if known is None:
            known = self._facts[key] = self._work_out(group)
        return known

    def _work_out(self, group: Any) -> dict[str, Any]:
        c10d = sys.modules[_C10D_MODULE]
        pg = c10d._resolve_process_group(group) if isinstance(group, str) else group
        if pg is None:
            pg = c10d._get_default_group()
        desc = getattr(pg, "group_desc", "") or ""
        name = self.mesh_dims.get(pg.group_name)
        if name is None:
            name = desc.removeprefix("mesh_") if desc.startswith("mesh_") else ("world" if desc == "default_pg" else desc)
        try:
            ranks = list(c10d.get_process_group_ranks(pg))
        except (RuntimeError, ValueError):
            ranks = None
        return {"group": name or str(pg.group_name), "group_size": int(pg.size()), "ranks": ranks}


def redirected(redirects: dict[Slot, Slot], slot: Slot) -> Slot:
    """The last collective in the chain that redistributed the value ``slot``."""
    seen = 0
    while slot in redirects and seen < 64:
        slot, seen = redirects[slot], seen + 1
    return slot


def inner_reads(
    flow: Any, redirects: dict[Slot, Slot], args: tuple, kwargs: dict, caller: Any, operands: list[Tensor]
) -> list[Slot | None]:
    """The values a collective inside an op on DTensors reads; a local copy made on the way
    (contiguous, movedim) is the value the redistribution started from. A tensor the op computed
    inside itself (loss parallel's local max of the logits) stands for the op's first operand,
    so the collective lies on the op's path, as it does when it runs."""
    reads: list[Tensor] = []
    _flat_into([*args, *kwargs.values()], reads)
    local = redistributed_tensor(caller)
    given = flow.lookup(local) if local is not None else None
    if given is None:
        given = next((slot for slot in map(flow.lookup, operands) if slot is not None), None)
    before: list[Slot | None] = []
    for t in reads:
        slot = flow.lookup(t)
        if slot is None and given is not None:
            slot = redirected(redirects, given)
            flow.register(t, *slot)
        before.append(slot)
    return before


def redirect(redirects: dict[Slot, Slot], before: list[Slot | None], made: Slot) -> None:
    """The op on DTensors reads ``made`` where it would have read what the collective redistributed."""
    for slot in before:
        if slot is not None:
            redirects[slot] = made


def _flat_into(values: list[Any], out: list[Tensor]) -> None:
    out.extend(t for v in values for t in _flat(v))


def redistributed_tensor(caller: Any) -> Tensor | None:
    """The local tensor a DTensor redistribution running above ``caller`` started from."""
    frame, depth = caller, 0
    while frame is not None and depth < 24:
        if frame.f_code.co_name == "redistribute_local_tensor":
            local = frame.f_locals.get("local_tensor")
            return local if isinstance(local, Tensor) else None
        frame, depth = frame.f_back, depth + 1
    return None


def _redistribution(caller: Any, groups: Groups) -> str | None:
    """``S(1) → R``: the placement change a DTensor redistribution runs this collective for, as
    ``torch.utils._debug_mode.DebugMode`` names it (``trace: S(1)->R``); read from torch's frame
    that runs it, whose mesh also names the group."""
    frame, depth = caller, 0
    while frame is not None and depth < 24:
        if frame.f_code.co_name == "redistribute_local_tensor":
            local = frame.f_locals
            for key in ("mesh_to_use", "device_mesh"):
                if local.get(key) is not None:
                    groups.saw_mesh(local[key])
                    break
            current, target = local.get("current"), local.get("target")
            if current is None or target is None:
                spec, goal = local.get("current_spec"), local.get("target_spec")
                if spec is None or goal is None:
                    return None
                before = "".join(str(p) for p in spec.placements)
                after = "".join(str(p) for p in goal.placements)
                return f"{before} → {after}"
            return f"{current} → {target}"
        frame, depth = frame.f_back, depth + 1
    return None


def collective_facts(
    groups: Groups, name: str, group: Any, reads: list[Tensor], writes: list[Tensor], caller: Any,
    details: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``node.meta["collective"]``: what a collective moved, over which group, and why; ``details``
    of a c10d call (:meth:`C10dCall.details`: a send's peer, an all-to-all's splits) added."""
    for t in (*reads, *writes):
        if is_dtensor(t):
            groups.saw_mesh(t.device_mesh)
    change = _redistribution(caller, groups)
    facts: dict[str, Any] = {"op": name, **groups.facts(group), "bytes": max(_nbytes(reads), _nbytes(writes))}
    if change is not None:
        facts["redistribute"] = change
    facts.update(details or {})
    return facts


def functional_details(groups: Groups, name: str, group: Any, args: tuple, kwargs: dict) -> dict[str, Any] | None:
    """A functional ``all_to_all_single``'s splits, as :meth:`C10dCall.details` gives a c10d
    one's: its arguments are (input, output_split_sizes, input_split_sizes, group). Its split
    sizes usually come from an exchange of counts (transformers' expert parallelism), which a
    fake group does not make: there ``checked`` is False and the hang check leaves them be."""
    if not name.startswith("all_to_all_single") or not args or not isinstance(args[0], Tensor):
        return None
    size = int(groups.facts(group)["group_size"])
    received = args[1] if len(args) > 1 else kwargs.get("output_split_sizes")
    sent = args[2] if len(args) > 2 else kwargs.get("input_split_sizes")
    c10d = sys.modules[_C10D_MODULE]
    pg = c10d._resolve_process_group(group) if isinstance(group, str) else group
    splits = {"sent": _split_rows(sent, args[0], size), "received": _split_rows(received, args[0], size)}
    return {"splits": {**splits, "checked": c10d.get_backend(pg) != "fake"}}


def functional_group(args: tuple, kwargs: dict) -> Any:
    """The group name a functional collective was given (its last string argument)."""
    if "group_name" in kwargs:
        return kwargs["group_name"]
    return next((a for a in reversed(args) if isinstance(a, str)), None)


def aten_group(args: tuple, kwargs: dict) -> Any:
    """The group an ATen-level collective was given: a ProcessGroup (c10d) or a group name."""
    for a in (*args, *kwargs.values()):
        if type(a).__name__ == "ProcessGroup":
            return a
    return functional_group(args, kwargs)


def settled(output: Any) -> Any:
    """``output`` once every collective result in it that nothing read yet is waited for (an
    untraced timing pass returns the model's output straight away)."""
    waiting = _wrapper_classes()[1]
    if waiting is not None:
        found: list[Tensor] = []
        _flat_into([output] if not isinstance(output, dict) else list(output.values()), found)
        with torch._C.DisableTorchFunction():  # unseen by the timing pass's op clock
            for t in found:
                if isinstance(t, waiting):
                    t.trigger_wait()
    return output


def wait_for(outs: list[Tensor]) -> None:
    """Wait for a functional collective's results now (a later wait on them does nothing)."""
    wait = torch.ops._c10d_functional.wait_tensor
    for t in outs:
        wait(t)


# -- c10d stand-ins --------------------------------------------------------------------------


def _flat(value: Any) -> list[Tensor]:
    if isinstance(value, Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _flat(item)]
    return []


class C10dCall:
    """One ``torch.distributed`` collective function, and how its arguments are read and written."""

    def __init__(self, name: str, original: Callable[..., Any]) -> None:
        self.name, self.original = name, original
        self.target = f"torch.distributed.{name}"
        self.reads, self.writes = C10D_CALLS[name]
        self.signature = inspect.signature(original)

    def tensors(self, args: tuple, kwargs: dict) -> tuple[list[Tensor], list[Tensor], Any]:
        """(tensors read, tensors written, group) of one call."""
        bound = self.signature.bind(*args, **kwargs).arguments
        reads = [t for name in self.reads for t in _flat(bound.get(name))]
        writes = [t for name in self.writes for t in _flat(bound.get(name))]
        return reads, writes, bound.get("group")

    def details(self, args: tuple, kwargs: dict) -> dict[str, Any]:
        """``peer``: the global rank a send goes to or a receive comes from (left out: any), and
        ``action``: the pipeline schedule's step it serves (``1SEND_F0``), inside one;
        ``splits``: the rows an ``all_to_all_single`` sends to and receives from each rank
        of its group, in group order (its split sizes, or the even split)."""
        if self.name in P2P_CALLS:
            bound = self.signature.bind(*args, **kwargs).arguments
            end = "dst" if "send" in self.name else "src"
            action = _pipeline.current_action()
            facts: dict[str, Any] = {} if action is None else {"action": action}
            if isinstance(bound.get(end), int):
                facts["peer"] = bound[end]
            elif isinstance(bound.get(f"group_{end}"), int):
                group = bound.get("group") or None
                facts["peer"] = int(sys.modules[_C10D_MODULE].get_global_rank(group, bound[f"group_{end}"]))
            return facts
        if self.name != "all_to_all_single":
            return {}
        bound = self.signature.bind(*args, **kwargs).arguments
        size = int(sys.modules[_C10D_MODULE].get_world_size(bound.get("group")))
        return {
            "splits": {
                "sent": _split_rows(bound.get("input_split_sizes"), bound["input"], size),
                "received": _split_rows(bound.get("output_split_sizes"), bound["output"], size),
            }
        }


    def deliver(self, args: tuple, kwargs: dict) -> None:
        """In a fake job, a send's message kept for its peer, a receive's buffer filled from it."""
        if self.name in P2P_CALLS:
            reads, writes, _ = self.tensors(args, kwargs)
            rank = int(sys.modules[_C10D_MODULE].get_rank())
            _pipeline.deliver(self.name, reads or writes, rank, self.details(args, kwargs).get("peer"))


def _split_rows(sizes: Any, tensor: Tensor, ranks: int) -> list[int]:
    """Rows per rank: the split sizes given, or ``tensor``'s first dimension shared evenly."""
    if sizes:
        return [int(s) for s in sizes]
    rows = int(tensor.shape[0]) if tensor.dim() else 0
    return [rows // ranks] * ranks


_CALLS: dict[Any, C10dCall] = {}
_IMPORTERS = ("torch.distributed.tensor._collective_utils", "transformers.distributed.expert_parallel")


def stand_ins(active: Callable[[], Any]) -> Iterator[tuple[Any, str, Callable[..., Any]]]:
    """(namespace, name, stand-in) for each c10d collective: with a trace's Python level
    recording, the call runs through it and becomes a node."""
    c10d = sys.modules[_C10D_MODULE]
    public = sys.modules["torch.distributed"]
    # modules that call names they imported: DTensor's own helpers (mesh_scatter,
    # mesh_broadcast), transformers' expert parallelism (its exchange of token counts)
    importers = [sys.modules.get(m) for m in _IMPORTERS]
    for name in C10D_CALLS:
        original = getattr(c10d, name, None)
        if original is None:
            continue
        call = _CALLS.get(original)
        if call is None:
            call = _CALLS[original] = C10dCall(name, original)  # its signature, read once
        stand_in = _stand_in(call, active)
        for namespace in (c10d, public, *importers):
            if getattr(namespace, name, None) is original:
                yield namespace, name, stand_in


FUNCTIONAL_OPS = (
    "all_reduce", "all_reduce_", "all_reduce_coalesced", "all_gather_into_tensor", "all_gather_into_tensor_coalesced",
    "reduce_scatter_tensor", "reduce_scatter_tensor_coalesced", "all_to_all_single", "broadcast", "broadcast_",
)
"""The functional collectives a DTensor op may run inside its ``__torch_dispatch__``."""


class Packet:
    """Stands in for one ``torch.ops._c10d_functional`` op while traces run: a call the recording
    mode cannot see (inside an op on DTensors) goes to the Python level recording there."""

    def __init__(self, packet: Any, active: Callable[[], Any], inside: Callable[[], Any]) -> None:
        self._packet, self._active, self._inside = packet, active, inside

    @property
    def op(self) -> Any:
        """The op it stands in for (what torch hands a mode that sees the call)."""
        return self._packet

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._active() is not None:  # the mode on the stack sees the call itself
            return self._packet(*args, **kwargs)
        level = self._inside()
        if level is None:
            return self._packet(*args, **kwargs)
        return level.run_inner_collective(self._packet, args, kwargs, sys._getframe(1))

    def __getattr__(self, name: str) -> Any:  # .default and the other overloads
        return getattr(self._packet, name)


def functional_stand_ins(active: Callable[[], Any], inside: Callable[[], Any]) -> Iterator[tuple[Any, str, Any]]:
    """(namespace, name, stand-in) for each functional collective op."""
    namespace = torch.ops._c10d_functional
    for name in FUNCTIONAL_OPS:
        packet = getattr(namespace, name, None)
        if packet is not None:
            yield namespace, name, Packet(packet, active, inside)


def _stand_in(call: C10dCall, active: Callable[[], Any]) -> Callable[..., Any]:
    @functools.wraps(call.original)
    def stand_in(*args: Any, **kwargs: Any) -> Any:
        level = active()
        if level is None:
            return call.original(*args, **kwargs)
        return level.run_collective(call, args, kwargs, sys._getframe(1))

    return stand_in


# -- one rank of a fake job ------------------------------------------------------------------


def _forget_sharding_caches() -> None:
    """DTensor caches sharding plans by mesh *equality* (the same ranks and names on every rank),
    and a cached plan keeps the mesh object of the rank that made it, whose process groups
    another rank does not have: each rank of a fake job starts with none cached."""
    if _DTENSOR_MODULE not in sys.modules:
        return
    from torch.distributed.tensor._redistribute import _gen_transform_infos
    from torch.distributed.tensor.debug import _clear_sharding_prop_cache

    _clear_sharding_prop_cache()
    _gen_transform_infos.cache_clear()


@contextlib.contextmanager
def fake_rank(world_size: int, rank: int) -> Iterator[None]:
    """A fake process group of ``world_size`` in which this process is ``rank``; destroyed after,
    with torch's rank-prefixing ``sys.excepthook`` put back and no sharding plan left cached."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    hook = sys.excepthook
    _forget_sharding_caches()
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)
    try:
        yield
    finally:
        dist.destroy_process_group()
        sys.excepthook = hook
        _forget_sharding_caches()
