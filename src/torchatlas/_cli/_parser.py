"""The command line's grammar: the parsers of ``torchatlas``, ``torchatlas diff`` and the options
every subcommand shares. argparse only, so ``--help`` imports no torch."""

from __future__ import annotations

import argparse
from typing import NoReturn

import torchatlas

from . import _ranks
from ._spec import HF_TASKS, SpecError

DEFAULT_SPEC = "torchatlas._example:CoolCNN"
"""What ``torchatlas`` with no model traces: the bundled CoolCNN example."""

class Parser(argparse.ArgumentParser):
    """argparse that raises instead of printing usage and exiting, so every error is one line."""

    def error(self, message: str) -> NoReturn:
        raise SpecError(f"{message} (see `{self.prog} --help`)")


def common_output_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-o", "--output", metavar="FILE", help="write here instead of stdout (atomically for files; - is stdout)"
    )
    parser.add_argument(
        "--trust",
        "--trust-pickle",
        dest="trust_pickle",
        action="store_true",
        help="open a .pt2 with torch.export.load, which unpickles, evaluates and loads code from the file "
        "(only for files you trust as code); without it a .pt2 is read as data",
    )
    parser.add_argument("--debug", action="store_true", help="show the full traceback on errors")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="torchatlas",
        description="Trace a PyTorch model's forward pass and show its computation graph. "
        "With no MODEL, traces the bundled CoolCNN example. `torchatlas diff A B` compares two graphs (saved, or model specs); "
        "`torchatlas compare A B [C…]` finds the op where their numbers part.",
    )
    parser.add_argument(
        "model",
        nargs="?",
        default=DEFAULT_SPEC,
        metavar="MODEL",
        help="path/to/file.py:Name, package.module:Name, hf:<model_type>[/<task>], or a saved graph.json / program.pt2",
    )
    parser.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="SHAPE[:DTYPE]",
        help="a random input tensor, e.g. 1,3,32,32 or 1,128:int64 (repeat for more)",
    )
    parser.add_argument("--tokens", metavar="BATCH,SEQ", help="random token ids in [0, vocab) passed as input_ids=")
    parser.add_argument(
        "--decoder-tokens",
        metavar="BATCH,SEQ",
        help="hf: encoder-decoder models: decoder_input_ids of this size (default: the --tokens size, or 16 "
        "tokens), starting with the config's decoder_start_token_id",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        dest="overrides",
        metavar="KEY=VALUE",
        help="hf: config override, e.g. num_hidden_layers=2 or vision_config.num_hidden_layers=1 (repeatable)",
    )
    parser.add_argument(
        "--task",
        choices=list(HF_TASKS),
        metavar="TASK",
        help=f"hf: which head to build: {', '.join(HF_TASKS)} (default: base)",
    )
    parser.add_argument("--device", help="build and run the model here, e.g. cpu, cuda, meta (no memory, shapes only)")
    parser.add_argument(
        "--tp", type=int, metavar="N",
        help="tensor parallelism over N ranks (fake process group, one process): q/k/v/gate/up split by "
        "columns, o/down by rows; add --device meta for big models",
    )
    parser.add_argument(
        "--fsdp", type=int, metavar="N",
        help="FSDP2 over N ranks: each decoder layer and the root (with --tp: a 2-D dp×tp mesh)",
    )
    _ranks.add_job_arguments(parser)
    parser.add_argument(
        "--seed", type=_seed, default=0, metavar="N",
        help="seed torch's random numbers before the model's weights and the random inputs are made "
        "(default 0: every run draws the same values, so data-dependent branches take the same path)",
    )
    parser.add_argument("--rank", type=int, metavar="R", help="with --tp/--fsdp: trace what rank R runs (default 0)")
    parser.add_argument(
        "--ranks", type=int, nargs="?", const=0, metavar="N",
        help="trace every rank of --tp/--fsdp (or N ranks of a model that makes its own collectives) and check "
        "that their collectives line up: a predicted hang is reported and exits 1",
    )
    parser.add_argument("--train", action="store_true", help="trace in training mode (default: eval mode)")
    parser.add_argument(
        "--level", choices=("python", "aten"), default="python",
        help="record torch calls as written (python) or the ops that reach the ATen dispatcher (aten)",
    )
    parser.add_argument(
        "--backward", action="store_true",
        help="also run backward (of the sum of the outputs) and record its ATen ops",
    )
    parser.add_argument(
        "--compile-breaks", action="store_true",
        help="where torch.compile breaks the graph: the tree marks each break, then a table of breaks by kind",
    )
    parser.add_argument(
        "-f", "--format", choices=list(torchatlas.FORMATS), help="output format (default: from -o's suffix, else tree)"
    )
    parser.add_argument("--depth", type=int, metavar="N", help="collapse module calls nested deeper than N")
    parser.add_argument("--ascii", action="store_true", default=None, help="draw the tree with ASCII only")
    parser.add_argument(
        "--no-fold", dest="fold", action="store_false", default=None,
        help="list or draw every call of a run of identical layers (default: one 'layers.0–79 ×80', as its first member)",
    )
    parser.add_argument("--wide", action="store_true", help="summary: every column, whatever the terminal's width")
    parser.add_argument(
        "--profile", action="store_true",
        help="time each op and module call in untraced passes after the trace: the summary gets Time and %% Time columns (on CUDA also CUDA time)",
    )
    parser.add_argument(
        "--stats", action="store_const", const=True, default=False,
        help="record value statistics: NaN/Inf marks in the tree and diagram, output ranges in the summary",
    )
    parser.add_argument(
        "--stats-sample", dest="stats", action="store_const", const="sample",
        help="--stats, with outputs over 65,536 elements measured on a strided sample (faster on big models)",
    )
    parser.add_argument("--sort", choices=("time",), help="summary: every call, flat, hottest first (with --profile)")
    parser.add_argument(
        "--out-dir", metavar="DIR", help="write every format into DIR (tree.txt, graph.json, graph.svg, graph.html...)"
    )
    parser.add_argument(
        "--find-nan",
        action="store_true",
        help="trace with value statistics and print where the first NaN or Inf appeared (op, module, file:line) "
        "and the statistics of that op's inputs",
    )
    parser.add_argument(
        "--decisions",
        action="store_true",
        help="after the tree, list every place Python read a tensor's value (if, while, break, .item()) "
        "with its line and which ways it went",
    )
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a spinner while building and a live op counter while tracing (default: when stderr is a terminal)",
    )
    common_output_options(parser)
    return parser


def build_diff_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="torchatlas diff",
        description="What changed between two graphs, op by op: each a saved graph (.json, .pt2) or a model "
        "spec traced on its default inputs. Prints the merged call tree (+ added, - removed, ~ changed).",
    )
    parser.add_argument("before", metavar="A")
    parser.add_argument("after", metavar="B")
    parser.add_argument(
        "-f", "--format", choices=["text", "summary", "list", "json", "markdown", "html"], default=None,
        help="text: the merged tree; summary: the calls that differ with before → after numbers; list: one line "
        "a change (default: from -o's suffix (.html, .json, .md), else text)",
    )
    common_output_options(parser)
    return parser


def _seed(text: str) -> int:
    try:
        seed = int(text)
    except ValueError:
        seed = -1
    if not 0 <= seed < 2**63:
        raise argparse.ArgumentTypeError(f"a seed is an integer from 0 to 2**63-1, not {text[:40]!r}")
    return seed
