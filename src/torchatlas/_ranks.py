"""Every rank of a distributed job: ``trace_ranks`` on the fake process group, ``merge`` of
the per-rank files of a real job, and ``Ranks``, the one document holding all their graphs
with the hang check (``docs/distributed.md``). Wires capture, passes and renderers, as
``_api`` does for one graph."""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ._api import Graph, PathLike, _can_encode, load, trace
from ._capture import collection_paused, fake_job, fake_rank
from ._io import write_atomic
from ._ir import GraphFormatError, graph_from_json, ranks_from_json, ranks_to_json
from ._passes import check_ranks, expert_loads, rank_differences, rank_of, strip_analyses
from ._render import HtmlOptions, differences_text, hang_report, ranks_page, ranks_summary, schedule_text


class Ranks:
    """The graphs every rank of one job runs, in rank order, and what lining them up finds.

    ``ranks.graphs[r]`` is rank ``r``'s :class:`Graph`; ``ranks.problems`` the predicted hangs,
    unequal shards and unmatched sends (empty when the ranks' collectives line up);
    ``ranks.report()`` words them; ``tree``, ``summary`` and ``save`` as on a ``Graph``.
    """

    def __init__(self, graphs: Sequence[Graph]) -> None:
        by_rank: dict[int, Graph] = {}
        sizes = set()
        for graph in graphs:
            try:
                rank = rank_of(graph.ir)
            except ValueError as e:
                raise ValueError(f"torchatlas: {e}") from None
            if rank in by_rank:
                raise ValueError(f"torchatlas: two graphs of rank {rank}")
            by_rank[rank] = graph
            sizes.add(graph.ir.meta["distributed"].get("world_size"))
        if len(sizes) != 1:
            raise ValueError(f"torchatlas: the graphs come from jobs of different sizes ({sorted(map(str, sizes))})")
        size = sizes.pop()
        missing = [r for r in range(size) if r not in by_rank]
        if missing:
            raise ValueError(
                f"torchatlas: a job of {size} ranks needs a graph per rank; missing rank(s) {', '.join(map(str, missing))}"
            )
        self.graphs = [by_rank[r] for r in range(size)]
        """Each rank's graph, in rank order."""
        self._problems: list[dict[str, Any]] | None = None

    @property
    def world_size(self) -> int:
        return len(self.graphs)

    @property
    def problems(self) -> list[dict[str, Any]]:
        """Predicted hangs and other mismatches, each a dict: ``kind`` (``hang``, ``unequal
        shards``), ``group``, ``members``, ``step`` (the collective's index on that group),
        ``ranks`` (those at fault), ``at`` (each rank's collective there: op, sizes, dtype,
        ``source``, ``module``) and ``decision`` (the branch that sent the ranks apart, or None)."""
        if self._problems is None:
            self._problems = check_ranks([g.ir for g in self.graphs])
        return self._problems

    def report(self, ascii: bool | None = None) -> str:
        """The hang check in words: one paragraph per problem, or one line saying there is none."""
        return hang_report(self.problems, self.world_size, _ascii(ascii))

    def differences(self) -> list[dict[str, Any]]:
        """The module calls whose ranks run different ops, shapes or collectives (or that some
        ranks never make): ``{"label", "what", "by_rank"}`` each, in call order."""
        return rank_differences([g.ir for g in self.graphs])

    def expert_load(self) -> list[dict[str, int]]:
        """Per rank, the tokens its experts run on in each module call that dispatches them with
        an all-to-all (an MoE layer under expert parallelism), summed from the rows every rank
        sends it: ``{call path: rows}`` (``path#k`` for a later call). Each rank's graph also
        gets them as the overlay ``expert load``, which the tree, summary and page show."""
        loads = []
        for graph, by_scope in zip(self.graphs, expert_loads([g.ir for g in self.graphs]).values()):
            graph.overlay("expert load", by_scope)
            names = {s.id: s.path if s.call == 0 else f"{s.path}#{s.call}" for s in graph.ir.scopes}
            loads.append({names[scope]: rows for scope, rows in by_scope.items()})
        return loads

    def tree(self, rank: int = 0, depth: int | None = None, ascii: bool | None = None) -> str:
        """Rank ``rank``'s tree (after a pipeline rank's schedule, the actions it ran in order),
        then each call where the other ranks differ from it."""
        ascii = _ascii(ascii)
        graph = self._graph(rank)
        shown = str(graph.tree(depth=depth, ascii=ascii)).rstrip("\n") + "\n"
        schedule = schedule_text(graph.ir.meta.get("pipeline"))
        return f"rank {rank} of {self.world_size}\n{schedule}{shown}" + differences_text(self.differences(), rank, ascii)

    def summary(self, depth: int | None = 1, ascii: bool | None = None) -> str:
        """Per module call, the smallest and largest over the ranks of parameters, FLOPs,
        communication bytes and collectives per rank (``≠`` marks calls where ranks differ)."""
        return ranks_summary([g.ir for g in self.graphs], depth, _ascii(ascii))

    def to_html(self, path: PathLike | None = None, rank: int = 0, title: str | None = None, **options: Any) -> str | Path:
        """The interactive page of every rank: rank ``rank`` first, the others behind the rank
        picker, and the fill menu's "differs across ranks" marking the calls (and their ops)
        where the ranks run different ops, shapes or collectives. Options: ``HtmlOptions``'."""
        self._graph(rank)
        differing = {(d["path"], d["call"]) for d in self.differences()}
        marked = []
        for graph in self.graphs:
            ir = graph.ir
            scopes = {s.id for s in ir.scopes if (s.path, s.call) in differing}
            marked.append(
                ir.with_meta(
                    nodes={n.id: {"ranks_differ": n.scope in scopes} for n in ir.ops()},
                    scopes={s.id: {"ranks_differ": s.id in scopes} for s in ir.scopes},
                )
            )
        with collection_paused():
            page = ranks_page(marked, rank, HtmlOptions(title=title, **options))
        return page if path is None else write_atomic(path, page)

    def to_json(self) -> str:
        """The multi-rank document (``docs/format.md``): every rank's graph document and the problems."""
        return ranks_to_json([g.ir for g in self.graphs], {"problems": self.problems})

    def save(self, path: PathLike) -> Path:
        """Write the multi-rank document (atomically); ``torchatlas.load_ranks`` reads it back."""
        return write_atomic(path, self.to_json())

    def _graph(self, rank: int) -> Graph:
        if not isinstance(rank, int) or not 0 <= rank < self.world_size:
            raise ValueError(f"torchatlas: rank {rank!r} is not a rank of this job of {self.world_size}")
        return self.graphs[rank]

    def __repr__(self) -> str:
        hangs = sum(1 for p in self.problems if p["kind"] == "hang")
        return f"<torchatlas.Ranks {self.world_size} ranks: {hangs} predicted hang(s), {len(self.problems)} problem(s)>"


def _ascii(ascii: bool | None) -> bool:
    return not _can_encode(sys.stdout, "├→×≠—") if ascii is None else ascii


def trace_ranks(
    build: Callable[..., Any],
    world_size: int,
    *,
    mesh: Mapping[str, int] | None = None,
    args: Any = (),
    kwargs: dict[str, Any] | Callable[[int], dict[str, Any]] | None = None,
    processes: int = 1,
    **options: Any,
) -> Ranks:
    """Trace what every rank of a job of ``world_size`` runs, on torch.distributed's fake
    process group (one process, no network): for each rank, a fake group of that rank is
    made, ``build`` makes the sharded model and its forward is traced.

    * ``mesh={"dp": 2, "tp": 4}``: a device mesh of those dimensions (their product is
      ``world_size``) is made on each rank and handed to ``build(mesh)``; without it,
      ``build()`` makes its own groups.
    * ``args`` (and ``kwargs``): the forward's inputs, the same on every rank, or a callable
      ``args(rank)`` (``kwargs(rank)``) giving each rank's own (a data-dependent branch
      differs by data).
    * ``processes=N`` traces N ranks at a time, each in its own process (``build`` and ``args``
      must then be picklable: functions defined at a module's top level); the default traces
      the ranks one after another.
    * ``options`` go to ``torchatlas.trace`` (``level``, ``stats``...).

    The ``Ranks`` it returns holds every rank's graph and the hang check (``ranks.problems``).
    """
    if not isinstance(world_size, int) or isinstance(world_size, bool) or world_size < 1:
        raise ValueError(f"torchatlas: world_size must be a positive int, not {world_size!r}")
    if mesh is not None:
        sizes = list(mesh.values())
        product = 1
        for size in sizes:
            product *= size
        if product != world_size:
            raise ValueError(f"torchatlas: mesh {dict(mesh)} has {product} ranks, not world_size={world_size}")
    if not isinstance(processes, int) or processes < 1:
        raise ValueError(f"torchatlas: processes must be a positive int, not {processes!r}")
    import torch.distributed as dist

    if not dist.is_available():
        raise RuntimeError("torchatlas: trace_ranks needs torch.distributed, which this torch build lacks")
    if dist.is_initialized():
        raise RuntimeError("torchatlas: trace_ranks makes a fake process group per rank; destroy the one that exists first")
    job = (build, world_size, None if mesh is None else dict(mesh), args, kwargs, options)
    if processes == 1:
        with fake_job() as mailbox:
            ranks = Ranks([_trace_rank(job, rank) for rank in range(world_size)])
        _check_votes(mailbox.votes)
        return ranks
    context = multiprocessing.get_context("spawn")
    try:
        with concurrent.futures.ProcessPoolExecutor(processes, mp_context=context) as pool:
            documents = list(pool.map(_trace_rank_document, [job] * world_size, range(world_size)))
    except Exception as e:
        if "pickle" not in str(e).lower():  # not the sending of the job: the rank's own error
            raise
        raise ValueError(
            f"torchatlas: processes={processes} sends build, args and kwargs to other processes, so they must be "
            f"picklable (functions defined at a module's top level): {e}"
        ) from None
    return Ranks([Graph(strip_analyses(graph_from_json(text))) for text in documents])


def _check_votes(votes: dict[int, bool]) -> None:
    """Pipeline stages must agree whether their shapes are given: a real job then infers every
    stage's, which a rank traced alone cannot."""
    if len(set(votes.values())) > 1:
        given = ", ".join(str(s) for s, static in sorted(votes.items()) if static)
        inferred = ", ".join(str(s) for s, static in sorted(votes.items()) if not static)
        raise ValueError(
            f"torchatlas: pipeline stage(s) {given} are given input_args/output_args and stage(s) {inferred} are not; "
            "give them on every stage or on none"
        )


def _trace_rank(job: tuple[Any, ...], rank: int) -> Graph:
    build, world_size, mesh, args, kwargs, options = job
    try:
        with fake_rank(world_size, rank):
            if mesh is None:
                model = build()
            else:
                from torch.distributed.device_mesh import init_device_mesh

                model = build(init_device_mesh("cpu", tuple(mesh.values()), mesh_dim_names=tuple(mesh)))
            given = args(rank) if callable(args) else args
            return trace(model, given, kwargs(rank) if callable(kwargs) else kwargs, rank=rank, **options)
    except Exception as e:
        e.add_note(f"torchatlas: rank {rank} of {world_size}")
        raise


def _trace_rank_document(job: tuple[Any, ...], rank: int) -> str:
    """One rank traced in a worker process, as its graph document (what crosses processes)."""
    return _trace_rank(job, rank).to_json()


def merge(paths: Sequence[PathLike]) -> Ranks:
    """The multi-rank document of a real job from each rank's saved graph
    (``graph.save(f"graph-rank{rank}.json")`` inside ``torchrun``): the same as ``trace_ranks``."""
    if isinstance(paths, (str, Path)):
        raise TypeError("torchatlas: merge takes a list of per-rank graph files")
    return Ranks([load(p) for p in paths])


def load_ranks(path: PathLike) -> Ranks:
    """Read a multi-rank document written by ``Ranks.save``; malformed files raise ``GraphFormatError``."""
    try:
        graphs, _ = ranks_from_json(Path(path).read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        raise GraphFormatError(f"{path}: not a UTF-8 JSON file ({e.reason})") from None
    except GraphFormatError as e:
        raise GraphFormatError(f"{path}: {e}") from None
    return Ranks([Graph(strip_analyses(ir)) for ir in graphs])
