"""``torchatlas compare A B [C…]``: runs of a model lined up op by op; exit 1 where one diverges.

Each run is a model spec (traced with fingerprints on the same inputs, each built and fed
from the same seed, so two specs of one model get the same random weights and inputs) or a
graph saved from ``trace(fingerprint=True)``. ``--autocast 2=bfloat16`` runs the second
run under ``torch.autocast``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path
from typing import Any

import torchatlas
from torchatlas._io import write_atomic

from . import _main, _models, _parser
from ._spec import SpecError

EXIT_DIVERGED = 1
"""An op of some run is off past the tolerance while its inputs were within: a CI gate."""
SEED = 0


def build_compare_parser() -> argparse.ArgumentParser:
    parser = _parser.Parser(
        prog="torchatlas compare",
        description="Run a model two or more ways and find the op where their numbers part: each run a model "
        "spec (traced on the same inputs) or a graph saved with fingerprints. Prints the first divergence; exits 1 "
        "when any op of a run is off past the tolerance while its inputs were within.",
    )
    parser.add_argument("runs", nargs="+", metavar="RUN", help="model spec, or a graph.json saved from trace(fingerprint=True)")
    parser.add_argument("--input", action="append", default=[], metavar="SHAPE[:DTYPE]", help="as for `torchatlas MODEL`")
    parser.add_argument("--tokens", metavar="BATCH,SEQ", help="random token ids passed as input_ids=")
    parser.add_argument("--set", action="append", default=[], dest="overrides", metavar="KEY=VALUE", help="hf: config override")
    parser.add_argument("--task", metavar="TASK", help="hf: which head to build")
    parser.add_argument("--device", help="build and run every model here")
    parser.add_argument(
        "--autocast", action="append", default=[], metavar="N=DTYPE",
        help="run the N-th run (1 is the first) under torch.autocast with this dtype, e.g. 2=bfloat16 (repeatable)",
    )
    parser.add_argument("--atol", type=float, default=1e-5, help="absolute tolerance (default 1e-5)")
    parser.add_argument("--rtol", type=float, default=1.3e-6, help="relative tolerance (default 1.3e-6)")
    parser.add_argument("--metric", choices=["max_abs", "max_rel", "cosine"], default="max_abs", help="the error drawn")
    parser.add_argument("--labels", metavar="A,B,…", help="names of the runs (default a, b, c…)")
    parser.add_argument(
        "-f", "--format", choices=["text", "tree", "summary", "json", "html"], default=None,
        help="text: the report; tree/summary: the first run's, with each op's error; json: every op's numbers; "
        "html: the page filled by error (default: from -o's suffix, else text)",
    )
    _parser.common_output_options(parser)
    return parser


def run_compare(opts: argparse.Namespace) -> int:
    if len(opts.runs) < 2:
        raise SpecError("torchatlas compare needs two runs or more")
    labels = opts.labels.split(",") if opts.labels else None
    if labels is not None and len(labels) != len(opts.runs):
        raise SpecError(f"--labels names {len(labels)} runs, but {len(opts.runs)} were given")
    autocast = _autocast(opts.autocast, len(opts.runs))
    graphs = [_run(spec, k, autocast.get(k), opts) for k, spec in enumerate(opts.runs)]
    try:
        result = torchatlas.compare(*graphs, atol=opts.atol, rtol=opts.rtol, metric=opts.metric, labels=labels)
    except ValueError as e:
        raise SpecError(str(e)) from None
    suffixes = {".html": "html", ".htm": "html", ".json": "json", ".txt": "text"}
    fmt = opts.format or suffixes.get(Path(opts.output or "").suffix.lower(), "text")
    report = str(result)
    text = {
        "html": lambda: str(result.to_html(title="torchatlas compare: " + " vs ".join(Path(s).name for s in opts.runs))),
        "json": lambda: json.dumps(result.to_dict(), indent=1),
        "tree": lambda: str(result.tree()),
        "summary": lambda: str(result.summary(format="text")),
        "text": lambda: report,
    }[fmt]()
    if opts.output and opts.output != "-":
        if fmt != "text":  # the file is for looking around; the report says where at once
            _main._print(sys.stdout, _main._with_newline(report))
        _main._wrote(write_atomic(opts.output, _main._with_newline(text)))
    else:
        _main._print(sys.stdout, _main._with_newline(text))
    return EXIT_DIVERGED if result.diverged else 0


def _autocast(pairs: list[str], count: int) -> dict[int, str]:
    found: dict[int, str] = {}
    for pair in pairs:
        index, _, dtype = pair.partition("=")
        if not index.isdigit() or not 1 <= int(index) <= count or not dtype:
            raise SpecError(f"--autocast {pair!r}: expected N=DTYPE with N from 1 to {count}, e.g. 2=bfloat16")
        found[int(index) - 1] = dtype
    return found


def _run(spec: str, k: int, autocast: str | None, opts: argparse.Namespace) -> Any:
    """A saved graph, or the spec traced with fingerprints (under autocast if asked)."""
    if _models.is_saved_graph(spec):
        if autocast:
            raise SpecError(f"--autocast {k + 1}=…: run {k + 1} is a saved graph, already traced")
        return _models.open_saved(spec, trust_pickle=opts.trust_pickle)
    import torch

    args = [spec, *(a for text in opts.input for a in ("--input", text)), *(a for text in opts.overrides for a in ("--set", text))]
    args += [f"--{name}={value}" for name in ("tokens", "task", "device") if (value := getattr(opts, name))]
    trace_opts = _parser.build_parser().parse_args(args)
    trace_opts.fingerprint = True
    context: Any = contextlib.nullcontext()
    if autocast:
        dtype = getattr(torch, autocast, None)
        if not isinstance(dtype, torch.dtype):
            raise SpecError(f"--autocast {k + 1}={autocast}: not a torch dtype (bfloat16, float16)")
        context = torch.autocast(torch.device(opts.device or "cpu").type, dtype=dtype)
    torch.manual_seed(SEED)  # the same random weights and inputs for every run of one model
    with context:
        return _main._trace_model(trace_opts)
