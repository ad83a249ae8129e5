"""The ``torchatlas`` command: trace a model (or open a saved graph) and write its views.

Exit codes: 0 success; 1 the model failed (import, build, or forward pass) or a file
could not be read or written; 2 the command line is wrong (bad option, missing file,
unknown name, malformed shape). Errors print one line (plus, for a failed forward
pass, the line naming where it failed); ``--debug`` prints the traceback as well.

torch (and transformers) are imported only once a command needs them, so ``--help`` is instant.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import errno
import functools
import re
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import torchatlas
from torchatlas import GraphvizNotFoundError, ViewerBundleMissing
from torchatlas._io import write_atomic
from torchatlas._terminal import status
from torchatlas._text import error_text, to_ascii, visible

from . import _models, _ranks
from ._parser import Parser, build_diff_parser, build_parser
from ._spec import ModelError, SpecError, no_status

if TYPE_CHECKING:
    from torchatlas import Graph


EXIT_MODEL_FAILED = 1
EXIT_USAGE = 2
EXIT_SAME, EXIT_DIFFERENT = 0, 1
"""``torchatlas diff``'s answer, as diff(1)'s: A and B compute the same (up to naming), or not."""
EXIT_NONFINITE = 3
"""--find-nan found a NaN or Inf: scripts and CI can stop on it."""


_SUFFIX_FORMATS = {
    ".txt": "tree",
    ".json": "json",
    ".gv": "dot",
    ".dot": "dot",
    ".svg": "svg",
    ".png": "png",
    ".pdf": "pdf",
    ".html": "html",
    ".htm": "html",
    ".mmd": "mermaid",
    ".graphml": "graphml",
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    # `diff` answers 0 (same) or 1 (different), as diff(1) does: any trouble is 2 there
    failed = EXIT_USAGE if argv[:1] == ["diff"] else EXIT_MODEL_FAILED
    try:
        if argv[:1] == ["diff"]:
            return _diff(build_diff_parser().parse_args(argv[1:]))
        if argv[:1] == ["merge"]:
            return _ranks.merge(_ranks.build_merge_parser(Parser).parse_args(argv[1:]), _show)
        if argv[:1] == ["compare"]:
            from ._compare import build_compare_parser, run_compare

            return run_compare(build_compare_parser().parse_args(argv[1:]))
        return _trace(build_parser().parse_args(argv))
    except SpecError as e:
        return _report(e, EXIT_USAGE, debug)
    except (ModelError, GraphvizNotFoundError, ViewerBundleMissing) as e:
        return _report(e, failed, debug)
    except _ForwardFailed as e:
        return _report(e, failed, debug, notes=e.notes)
    except OSError as e:  # reading a saved graph or writing output; the model's own are caught above
        return _report(e, failed, debug)
    except KeyboardInterrupt:
        return 130
    except Exception as e:
        # TraceError lives with capture (torch): it can only have been raised once capture was imported.
        if "torchatlas._capture" in sys.modules and isinstance(e, torchatlas.TraceError):
            return _report(e, failed, debug)
        raise


def _report(e: BaseException, code: int, debug: bool, notes: Sequence[str] = ()) -> int:
    if debug:
        traceback.print_exception(e.__cause__ or e)
    # Messages carry names and text from user code: escape control characters, keep one line each.
    message = visible(str(e).strip().removeprefix("torchatlas: "))
    _say(f"torchatlas: error: {message}")
    for note in notes:
        _say(visible(note))
    return code


def _print(stream: TextIO | None, text: str) -> None:
    """Write ``text``; a stream that cannot encode it (an ASCII-only terminal or pipe) gets the
    ASCII spelling the tree uses (arrows as ``->``, anything else escaped) instead of a crash.
    A closed stream (None: ``2>&-``) gets nothing."""
    if stream is None:
        return
    try:
        text.encode(getattr(stream, "encoding", None) or "utf-8")
    except (UnicodeEncodeError, LookupError):
        text = to_ascii(text)
    stream.write(text)


def _show(text: str) -> None:
    """Text on stdout."""
    _print(sys.stdout, text)


def _say(line: str) -> None:
    """One line on stderr."""
    _print(sys.stderr, line + "\n")


class _ForwardFailed(Exception):
    """The model raised during the traced forward pass."""

    def __init__(self, message: str, notes: Sequence[str]) -> None:
        super().__init__(message)
        self.notes = list(notes)


# -- torchatlas MODEL -------------------------------------------------------------


def _trace(opts: argparse.Namespace) -> int:
    if opts.depth is not None and opts.depth < 0:
        raise SpecError(f"--depth must be >= 0, not {opts.depth}")
    fmt = _choose_format(opts)
    if _models.is_saved_graph(opts.model):
        if (
            opts.input or opts.tokens or opts.decoder_tokens or opts.overrides or opts.device or opts.task
            or opts.tp or opts.fsdp or opts.pp or opts.ep or opts.rank is not None or opts.ranks is not None
        ):
            raise SpecError(
                "--input, --tokens, --decoder-tokens, --set, --task, --device, --tp, --fsdp, --rank and --ranks apply to "
                "models, not saved graphs"
            )
        graph = _models.open_saved(opts.model, trust_pickle=opts.trust_pickle)
    elif opts.ranks is not None:
        return _ranks.write_ranks(_ranks.trace_every_rank(opts, _prepared), opts, fmt, _show)
    else:
        with _models.sharded_world(opts.tp, opts.fsdp, opts.rank):
            graph = _trace_model(opts)
    if opts.sort and not any(isinstance(s.meta.get("time_us"), (int, float)) for s in graph.ir.scopes):
        raise SpecError("--sort time needs times: add --profile (or open a graph saved from a profiled trace)")
    found = 0
    if opts.find_nan:
        if not any("stats" in n.meta for n in graph.ir.ops()):  # a CI gate must not pass for want of values
            raise SpecError("--find-nan has no values to search: the graph was traced on meta, or saved without stats")
        # The answer is the command's output, unless a format is asked for as well.
        only_answer = not (opts.out_dir or opts.output or opts.format)
        _print(sys.stdout if only_answer else sys.stderr, _first_nonfinite_line(graph) + "\n")
        found = EXIT_NONFINITE if graph.first_nonfinite() is not None else 0
        if only_answer:
            return found
    if opts.out_dir:
        return _write_out_dir(graph, Path(opts.out_dir), opts) or found
    _write_format(graph, fmt, opts.output, opts)
    if opts.compile_breaks and fmt == "tree" and not opts.output:
        sys.stdout.write(_breaks_by_kind(graph))
    if opts.decisions:  # after the tree on stdout; beside a written file, the table alone
        _print(sys.stdout, ("\n" if fmt == "tree" and not opts.output else "") + graph.decisions(ascii=opts.ascii))
    return found


def _breaks_by_kind(graph: Graph) -> str:
    """``--compile-breaks``: the compiled graphs, and the breaks counted by kind."""
    kinds = collections.Counter(b.kind for b in graph.graph_breaks)
    graphs = graph.ir.meta.get("compile_graphs", 0)
    lines = [f"\ntorch.compile: {graphs} graph(s), {sum(n for k, n in kinds.items() if k != 'recompile')} graph break(s)"]
    lines += [f"  {n:>4}  {kind}" for kind, n in kinds.most_common()]
    return "\n".join(lines) + "\n"


def _choose_format(opts: argparse.Namespace) -> str:
    if opts.out_dir and (opts.output or opts.format):
        raise SpecError("--out-dir writes every format; leave out -o and --format")
    if opts.format:
        return opts.format
    if opts.output:
        suffix = Path(opts.output).suffix.lower()
        if suffix not in _SUFFIX_FORMATS:
            raise SpecError(f"cannot tell the format from {opts.output!r}; add --format")
        return _SUFFIX_FORMATS[suffix]
    return "tree"


def _trace_model(opts: argparse.Namespace) -> Graph:
    import torch

    with torch.random.fork_rng():  # the run's seed; a caller of main() keeps its own random state
        torch.manual_seed(opts.seed)
        return _trace_seeded(opts)


def _trace_seeded(opts: argparse.Namespace) -> Graph:
    model, inputs, spec = _prepared(opts)
    import torch

    if opts.compile_breaks and (opts.level != "python" or opts.backward):
        raise SpecError("--compile-breaks reports on the forward pass; leave out --level and --backward")
    if opts.profile and opts.level != "python":
        raise SpecError("--profile times Python-level ops; leave out --level")
    try:
        with torch.enable_grad() if opts.backward else torch.no_grad():
            if opts.compile_breaks:
                return torchatlas.compile_report(model, inputs.args, inputs.kwargs)
            return torchatlas.trace(
                model,
                inputs.args,
                inputs.kwargs,
                level=opts.level,
                backward=opts.backward,
                progress=opts.progress,
                stats=opts.stats or opts.find_nan,
                profile=opts.profile,
                fingerprint=getattr(opts, "fingerprint", False),  # set by `torchatlas compare`
            )
    except torchatlas.TraceError:
        raise
    except Exception as e:
        notes = [n for n in getattr(e, "__notes__", ()) if isinstance(n, str) and n.startswith("torchatlas:")]
        message = f"{spec} failed on {_models.describe_inputs(inputs)}: {error_text(e)}"
        raise _ForwardFailed(message, notes) from e


def _prepared(opts: argparse.Namespace, mesh: Any = None) -> tuple[Any, Any, str]:
    """(the model, built and sharded (on ``mesh`` where given), its inputs, its spec)."""
    overrides = _models.parse_overrides(opts.overrides)
    input_specs = [_models.parse_input(text) for text in opts.input]
    tokens = _models.parse_tokens(opts.tokens) if opts.tokens else None
    decoder_tokens = _models.parse_tokens(opts.decoder_tokens, "--decoder-tokens") if opts.decoder_tokens else None
    device = _models.parse_device(opts.device) if opts.device else None
    loaded = _models.load_model(
        opts.model,
        overrides=overrides,
        task=opts.task,
        device=device,
        has_inputs=bool(input_specs or tokens),
        status=functools.partial(status, enabled=True) if _interactive(opts) else no_status,
        warn=lambda text: _say(f"torchatlas: warning: {text}"),
    )
    import torch

    model = loaded.model
    if isinstance(model, torch.nn.Module) and not opts.train:
        model.eval()
    if opts.pp or opts.ep:
        made = _ranks.sharded_for_job(
            opts, loaded, model, mesh, lambda: _models.build_inputs(loaded, input_specs, tokens, device, None)
        )
        if made is not None:
            return made
    if opts.tp or opts.fsdp:
        if opts.fsdp and device is not None and torch.device(device).type == "meta":
            raise SpecError("--fsdp shards parameters that hold values: FSDP2 refuses the meta device; leave out --device meta")
        if not isinstance(model, torch.nn.Module):
            raise SpecError("--tp and --fsdp shard an nn.Module")
        _models.shard(model, opts.tp, opts.fsdp, loaded.spec, mesh)
    inputs = _models.build_inputs(loaded, input_specs, tokens, device, decoder_tokens)
    _models.check_signature(model, inputs, loaded.spec)
    return model, inputs, loaded.spec


def _interactive(opts: argparse.Namespace) -> bool:
    return opts.progress if opts.progress is not None else sys.stderr.isatty()


def _first_nonfinite_line(graph: Graph) -> str:
    """Where the first NaN or Inf appeared and what went into that op, in one line."""
    node = graph.first_nonfinite()
    if node is None:
        return "no NaN or Inf in any op's output"
    scope = graph.ir.scope(node.scope)
    where = f" at {node.source}" if node.source else ""
    inputs = "; ".join(
        f"{_value_name(graph.ir.node(ref))} {_stats_text(graph.ir.node(ref).meta.get('stats'), ref.slot)}"
        for ref in node.inputs
    )
    output = _stats_text(node.meta.get("stats"), 0)
    return visible(f"first NaN/Inf: {node.target} in {scope.label}{where}; output {output}; inputs: {inputs or 'none'}")


def _value_name(node: Any) -> str:
    """``x (torch.relu)``, ``fc.weight``, ``input``: what a reader recognises a value by."""
    if node.kind == "op":
        return f"{node.name} ({node.target})" if node.name else str(node.target)
    return getattr(node, "path", None) or node.name or node.kind


def _stats_text(stats: Any, slot: int) -> str:
    if not isinstance(stats, list) or slot >= len(stats) or not isinstance(stats[slot], dict):
        return "no stats"
    values = stats[slot]
    shown = [f"{key}={values[key]:.4g}" for key in ("min", "max", "mean") if isinstance(values.get(key), (int, float))]
    shown += [f"{key}={values[key]}" for key in ("nan", "inf") if values.get(key)]
    return " ".join(shown) or "no stats"


def _view_options(fmt: str, opts: argparse.Namespace) -> dict[str, Any]:
    """The command line's view flags that this format takes; writing every format (``--out-dir``),
    those it cannot honour (Model Explorer's ``--depth``) are left to the formats that can."""
    options = torchatlas.FORMATS[fmt].options
    fields = {f.name for f in dataclasses.fields(options)}
    if opts.out_dir:
        fields -= set(getattr(options, "UNHONOURED", {}))
    # the view options every output shares (--depth, --no-fold): the diagram and the page take them too
    chosen = {"depth": opts.depth, "ascii": opts.ascii, "fold_repeats": opts.fold}
    if fmt == "summary":
        chosen["sort"] = opts.sort
    taken = {k: v for k, v in chosen.items() if k in fields and v is not None}
    try:
        options(**taken)
    except ValueError as e:  # a flag this format cannot honour: one line, as a wrong flag
        raise SpecError(f"--format {fmt}: {e}") from None
    return taken


def _text(graph: Graph, fmt: str, opts: argparse.Namespace) -> str:
    """A text format as the terminal shows it (the tree and summary pick ASCII, width and colour)."""
    options = _view_options(fmt, opts)
    if fmt == "tree":
        return str(graph.tree(**options))
    if fmt == "summary":
        return str(graph.summary(**options, wide=opts.wide))
    return str(graph.view(fmt, **options))


def _write_format(graph: Graph, fmt: str, output: str | None, opts: argparse.Namespace) -> None:
    renderer = torchatlas.FORMATS[fmt]
    if sys.stdout is None and output in (None, "-") and (renderer.text or output == "-"):
        raise OSError(errno.EBADF, "standard output is closed; write to a file with -o")
    if renderer.text and output in (None, "-"):
        _print(sys.stdout, _with_newline(_text(graph, fmt, opts)))
        return
    if output == "-":  # a picture or a page to a pipe: `torchatlas m --format png -o - | display`
        made = graph.view(fmt, **_view_options(fmt, opts))
        sys.stdout.flush()
        sys.stdout.buffer.write(made.encode("utf-8") if isinstance(made, str) else made)
        sys.stdout.buffer.flush()
        return
    path = output if output else Path(f"{_file_stem(graph)}.{fmt}")  # as given: `out/` names a folder
    _write(graph, fmt, path, opts)


def _write(graph: Graph, fmt: str, path: str | Path, opts: argparse.Namespace) -> None:
    if torchatlas.FORMATS[fmt].text:
        write_atomic(path, _with_newline(str(graph.view(fmt, **_view_options(fmt, opts)))))
    else:
        graph.view(fmt, path, **_view_options(fmt, opts))
    _wrote(path)


def _write_out_dir(graph: Graph, out_dir: Path, opts: argparse.Namespace) -> int:
    """Every format into ``out_dir``; one that cannot be made is named, and the rest still written.
    A missing tool (Graphviz, the viewer bundle) is a note; any other failure makes the exit code 1."""
    out_dir.mkdir(parents=True, exist_ok=True)
    missing: list[str] = []
    failed = False
    for fmt, renderer in torchatlas.FORMATS.items():
        path = out_dir / renderer.file_name
        try:
            _write(graph, fmt, path, opts)
        except GraphvizNotFoundError:
            missing.append(f"{path.name} (Graphviz 'dot' is not installed)")
        except ViewerBundleMissing as e:
            missing.append(f"{path.name} ({visible(str(e))})")
        except Exception as e:  # one format's failure must not cost the others
            if opts.debug:
                traceback.print_exception(e)
            first_line = (str(e).strip().splitlines() or [""])[0]
            missing.append(f"{path.name} ({type(e).__name__}: {visible(first_line)})")
            failed = True
    if missing:
        _say(f"torchatlas: not written: {'; '.join(missing)}")
    return EXIT_MODEL_FAILED if failed else 0


def _with_newline(text: str) -> str:
    return text if text.endswith("\n") else text + "\n"


def _file_stem(graph: Graph) -> str:
    """A safe default file name from the model's class name (which comes from user code)."""
    name = str(graph.ir.meta.get("model") or "graph").rsplit(".", 1)[-1]
    return re.sub(r"[^A-Za-z0-9_-]", "_", name)[:64] or "graph"


def _wrote(path: str | Path) -> None:
    _say(f"torchatlas: wrote {visible(str(path))}")  # a path may hold a newline or ESC


# -- torchatlas diff A B ----------------------------------------------------------


def _diff(opts: argparse.Namespace) -> int:
    before, after = _diff_side(opts.before, opts), _diff_side(opts.after, opts)
    result = torchatlas.diff(before, after)
    suffixes = {".html": "html", ".htm": "html", ".json": "json", ".md": "markdown"}
    fmt = opts.format or suffixes.get(Path(opts.output or "").suffix.lower(), "text")
    tree = result.tree() + "".join(f"\n= total {t.field}: {t.before} → {t.after}" for t in result.totals)
    tree += "\n" + ("A and B compute the same (up to naming)" if result.equal else "A and B differ")
    if fmt == "html":
        text = str(result.to_html(title=f"{Path(opts.before).name} → {Path(opts.after).name}"))
    elif fmt == "json":
        import json

        text = json.dumps(result.to_dict(), indent=1)
    elif fmt == "markdown":
        text = result.to_markdown()
    elif fmt == "summary":
        text = result.summary()
    elif fmt == "list":
        text = str(result)
    else:
        text = tree
    if opts.output and opts.output != "-":
        if fmt == "html":  # the page is for looking around; the tree says what changed at once
            _print(sys.stdout, _with_newline(tree))
        _wrote(write_atomic(opts.output, _with_newline(text)))
    else:
        _print(sys.stdout, _with_newline(text))
    return EXIT_SAME if result.equal else EXIT_DIFFERENT


def _diff_side(spec: str, opts: argparse.Namespace) -> Graph:
    """A saved graph, or a model spec traced on its default inputs."""
    if _models.is_saved_graph(spec):
        return _models.open_saved(spec, trust_pickle=opts.trust_pickle)
    return _trace_model(build_parser().parse_args([spec]))
