"""``--ranks``: every rank of a ``--tp``/``--fsdp``/``--pp``/``--ep`` job (or of a model that makes its own
collectives) traced on the fake process group, with the hang check; ``torchatlas merge``:
the same document from each rank's saved graph of a real job. A predicted hang exits 1."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torchatlas
from torchatlas._text import error_text

from ._spec import ModelError, SpecError

EXIT_PROBLEMS = 1


def add_job_arguments(parser: argparse.ArgumentParser) -> None:
    """``--pp`` and ``--ep``: the parallelisms only a job of every rank traces."""
    parser.add_argument(
        "--pp", type=int, metavar="N",
        help="with --ranks: pipeline parallelism over N ranks: a Llama-like decoder cut into N stages run by "
        "the GPipe schedule, one microbatch per batch row (with --tp: a pp×tp mesh)",
    )
    parser.add_argument(
        "--ep", type=int, metavar="N",
        help="with --ranks: expert parallelism over N ranks: a transformers MoE model's experts sharded by its own "
        "expert-parallel plan, tokens dispatched and combined with all-to-alls; the tokens each rank's experts get "
        "are the overlay 'expert load'",
    )


def sharded_for_job(
    opts: argparse.Namespace, loaded: Any, model: Any, mesh: Any, inputs: Callable[[], Any]
) -> tuple[Any, Any, str] | None:
    """``--pp``: (this rank's stage of ``model``, tensor-parallel with ``--tp``, as its schedule;
    the token ids; the spec). ``--ep``: None, once the experts are sharded."""
    from . import _models

    if opts.ep:
        if mesh is None or opts.tp or opts.fsdp or opts.pp:
            raise SpecError("--ep traces every rank (--ranks), without --tp, --fsdp or --pp")
        _models.expert_parallel(model, mesh, loaded.spec)
        return None
    import torch

    from . import _pipeline

    if mesh is None or opts.fsdp:
        raise SpecError("--pp traces every rank (--ranks), with or without --tp; not with --fsdp")
    stage = _pipeline.stage_of(model, mesh, opts.pp, loaded.spec)
    if opts.tp:
        _models.shard(stage, opts.tp, None, loaded.spec, mesh["tp"])
    made = inputs()
    ids = made.kwargs.get("input_ids", made.args[0] if made.args else None)
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2:
        raise SpecError(f"--pp feeds token ids (batch × length) to the first stage; {loaded.spec}'s inputs are not")
    return _pipeline.schedule(stage, mesh, ids), ids, loaded.spec


def trace_every_rank(opts: argparse.Namespace, prepared: Callable[..., tuple[Any, Any, str]]) -> Any:
    """``torchatlas.trace_ranks`` of the model ``opts`` names; ``prepared(opts, mesh)`` builds
    and shards it on one rank (the inputs of the first rank are every rank's)."""
    from . import _parallel  # torch: not for --help

    if opts.ep:  # the tp dimension: the ranks sharing a batch (each its own here)
        dims = {"ep": opts.ep, "tp": 1}
    elif opts.pp:
        dims = {"pp": opts.pp, **_parallel.mesh_dims(opts.tp, opts.fsdp)}
    else:
        dims = _parallel.mesh_dims(opts.tp, opts.fsdp)
    world = 1
    for size in dims.values():
        if size < 1:
            raise SpecError(f"--tp, --fsdp, --pp and --ep need a number of ranks >= 1, not {size}")
        world *= size
    if opts.ranks:  # --ranks N
        if dims and opts.ranks != world:
            raise SpecError(f"--ranks {opts.ranks}, but --tp/--fsdp/--pp/--ep make {world} ranks; leave out N")
        world = opts.ranks
    elif not dims:
        raise SpecError("--ranks needs --tp/--fsdp, or a number of ranks (--ranks N) for a model that makes its own collectives")
    check_output(opts)  # before minutes of tracing, not after
    if opts.compile_breaks or opts.backward or opts.profile or opts.find_nan:
        raise SpecError("--ranks traces each rank's forward pass; leave out --compile-breaks, --backward, --profile and --find-nan")
    made: dict[str, Any] = {}

    def build(mesh: Any = None) -> Any:
        model, inputs, _ = prepared(opts, mesh)
        made.setdefault("inputs", inputs)
        return model

    import torch

    if opts.pp:  # the first stage (the first ranks, pp being the outer dimension) gets the tokens
        args: Any = lambda rank: (made["inputs"],) if rank < world // opts.pp else ()  # noqa: E731
        kwargs: Any = None
    else:
        args, kwargs = lambda rank: made["inputs"].args, lambda rank: made["inputs"].kwargs
    try:
        with torch.no_grad():
            ranks = torchatlas.trace_ranks(
                build, world, mesh=dims or None, args=args, kwargs=kwargs, level=opts.level, stats=opts.stats,
                progress=opts.progress,
            )
    except (SpecError, ModelError, torchatlas.TraceError):
        raise
    except Exception as e:  # the model's own failure, on the rank the note names
        notes = [n for n in getattr(e, "__notes__", ()) if isinstance(n, str) and n.startswith("torchatlas: rank")]
        raise ModelError(f"{opts.model} failed{' on ' + notes[0].removeprefix('torchatlas: ') if notes else ''}: {error_text(e)}") from e
    if opts.ep:
        ranks.expert_load()  # the overlay the tree and summary show
    return ranks


def check_output(opts: argparse.Namespace) -> None:
    """Refuse an ``-o`` that several ranks cannot be written to: the document or the page only."""
    if opts.output and Path(opts.output).suffix.lower() not in (".json", ".html"):
        raise SpecError("with several ranks, -o writes the multi-rank document (.json) or the page (.html)")


def write_ranks(ranks: Any, opts: argparse.Namespace, fmt: str, show: Callable[[str], None]) -> int:
    """The hang report and the tree of ``--rank`` (or the per-rank summary) on stdout, or the
    multi-rank document to ``-o x.json`` (the page to ``-o x.html``); exit 1 where the check
    found a problem."""
    rank = opts.rank or 0
    report = ranks.report(ascii=opts.ascii)
    if opts.output:
        check_output(opts)  # merge comes here with any -o; a traced job was checked before
        if Path(opts.output).suffix.lower() == ".json":
            ranks.save(opts.output)
        else:
            ranks.to_html(opts.output, rank)
        show(report)
    elif fmt == "summary":
        show(report + "\n" + ranks.summary(depth=opts.depth if opts.depth is not None else 1, ascii=opts.ascii))
    elif fmt == "tree":
        show(report + "\n" + ranks.tree(rank, depth=opts.depth, ascii=opts.ascii))
    else:
        raise SpecError(f"with several ranks, the outputs are the tree, the summary and -o x.json, not --format {fmt}")
    return EXIT_PROBLEMS if ranks.problems else 0


def build_merge_parser(parser_class: type[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    parser = parser_class(
        prog="torchatlas merge",
        description="Every rank's graph of a real job (each saved with graph.save(f'graph-rank{rank}.json')) as "
        "one multi-rank document, with the hang check; exits 1 where ranks' collectives do not line up.",
    )
    parser.add_argument("graphs", nargs="+", metavar="GRAPH", help="one saved graph per rank (graph-rank*.json)")
    parser.add_argument("-o", "--output", metavar="PATH", help="write the multi-rank document (.json) or page (.html)")
    parser.add_argument("-f", "--format", choices=("tree", "summary"), default="tree", help="what to print")
    parser.add_argument("--rank", type=int, default=0, metavar="R", help="the rank whose tree is printed (default 0)")
    parser.add_argument("--depth", type=int, metavar="N", help="collapse module calls nested deeper than N")
    parser.add_argument("--ascii", action="store_true", default=None, help="ASCII only")
    parser.add_argument("--debug", action="store_true", help="show the full traceback on errors")
    return parser


def merge(opts: argparse.Namespace, show: Callable[[str], None]) -> int:
    try:
        ranks = torchatlas.merge(opts.graphs)
    except ValueError as e:
        raise SpecError(str(e).removeprefix("torchatlas: ")) from None
    return write_ranks(ranks, opts, opts.format, show)
