"""The ``torchatlas`` command line, run in-process through ``main([...])`` and once as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from _cli_helpers import error_lines, run_cli

import torchatlas
from torchatlas import FORMATS
from torchatlas._cli import EXIT_MODEL_FAILED, EXIT_USAGE, main

NET_FILE = """
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        h = self.fc(x)
        return torch.relu(self.drop(h))

def example_input():
    return torch.randn(2, 8)
"""

TINY_LLAMA_SETS = [
    "--set", "num_hidden_layers=2", "--set", "hidden_size=64", "--set", "intermediate_size=128",
    "--set", "num_attention_heads=4", "--set", "num_key_value_heads=4", "--set", "vocab_size=1000",
]  # fmt: skip


@pytest.fixture
def net_file(tmp_path):
    path = tmp_path / "net.py"
    path.write_text(textwrap.dedent(NET_FILE))
    return path


def top_level_lines(tree: str) -> list[str]:
    """The lines directly under the root of an ASCII tree."""
    return [line[4:] for line in tree.splitlines()[1:] if line[:4] in ("|-- ", "`-- ")]


# -- the bundled example ---------------------------------------------------------


def test_no_arguments_prints_the_coolcnn_tree_with_two_branches_joining_at_the_add(capsys):
    code, out, err = run_cli(capsys, "--ascii")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("CoolCNN") and "1x3x32x32 -> 1x10" in lines[0]
    top = top_level_lines(out)
    add = next(i for i, line in enumerate(top) if line.startswith(("add", "x = add")) or " add (+)" in line)
    branches = [line for line in top[:add] if line.startswith("+ ")]
    assert len(branches) == 2
    for conv in ("initial_conv (Conv2d)", "parallel_conv (Conv2d)", "secondary_conv (Conv2d)", "output_layer (Linear)"):
        assert conv in out


def test_json_output_is_a_loadable_graph_of_coolcnn(capsys, tmp_path):
    code, out, _ = run_cli(capsys, "--format", "json")
    assert code == 0
    doc = json.loads(out)
    paths = [s["path"] for s in doc["scopes"]]
    assert paths[:3] == ["", "initial_conv", "max_pool"] and "parallel_conv" in paths
    # The add reads the outputs of both max_pool calls: the two paths join there.
    nodes = {n["id"]: n for n in doc["nodes"]}
    add = next(n for n in doc["nodes"] if n["kind"] == "op" and "add" in n["target"])
    pool_outputs = {o for s in doc["scopes"] if s["path"] == "max_pool" and s["call"] in (0, 1) for o in s["outputs"]}
    assert len(pool_outputs) == 2 and set(add["inputs"]) == pool_outputs
    assert all(nodes[i]["kind"] == "op" for i in add["inputs"])


def test_depth_collapses_module_calls(capsys):
    _, full, _ = run_cli(capsys, "--ascii")
    _, shallow, _ = run_cli(capsys, "--ascii", "--depth", "0")
    assert len(shallow.splitlines()) < len(full.splitlines())
    code, _, err = run_cli(capsys, "--depth", "-1")
    assert code == EXIT_USAGE and "--depth must be >= 0" in err


def test_output_file_is_written_and_format_follows_its_suffix(capsys, tmp_path):
    target = tmp_path / "sub" / "coolcnn.json"
    code, out, err = run_cli(capsys, "-o", str(target))
    assert code == 0 and out == ""
    assert f"wrote {target}" in err
    graph = torchatlas.load(target)
    assert graph.ir.meta["model"].endswith("CoolCNN")
    assert not [p for p in target.parent.iterdir() if p.name.endswith(".tmp")]


def test_a_saved_graph_prints_as_a_tree(capsys, tmp_path):
    saved = tmp_path / "g.json"
    run_cli(capsys, "-o", str(saved))
    code, out, _ = run_cli(capsys, str(saved), "--format", "tree", "--ascii")
    assert code == 0
    assert out.startswith("CoolCNN") and "parallel_conv (Conv2d)" in out
    code, _, err = run_cli(capsys, str(saved), "--input", "1,3")
    assert code == EXIT_USAGE and "not saved graphs" in err


def test_a_corrupt_saved_graph_is_a_one_line_error(capsys, tmp_path):
    saved = tmp_path / "broken.json"
    saved.write_text('{"format": "torchatlas", ')
    code, _, err = run_cli(capsys, str(saved))
    assert code == EXIT_USAGE
    assert error_lines(err) == [line for line in error_lines(err) if line.startswith("torchatlas: error:")]
    assert len(error_lines(err)) == 1 and "broken.json" in err


# -- file specs ------------------------------------------------------------------------


def test_file_spec_uses_its_example_input_in_eval_mode(capsys, net_file):
    code, out, err = run_cli(capsys, f"{net_file}:Net", "--ascii")
    assert code == 0, err
    assert out.splitlines()[0].startswith("Net") and "2x8 -> 2x4" in out.splitlines()[0]
    assert "fc (Linear)" in out
    code, trained, _ = run_cli(capsys, f"{net_file}:Net", "--format", "json", "--train")
    code, evaluated, _ = run_cli(capsys, f"{net_file}:Net", "--format", "json")

    def dropout_training_flags(doc: str) -> list[bool]:
        return [n["kwargs"]["training"] for n in json.loads(doc)["nodes"] if n.get("target") == "torch.nn.functional.dropout"]

    # Dropout is on the data path in both modes; only in training does it drop anything.
    assert dropout_training_flags(trained) == [True] and dropout_training_flags(evaluated) == [False]


def test_file_spec_with_explicit_input_shape(capsys, net_file):
    code, out, _ = run_cli(capsys, f"{net_file}:Net", "--input", "5,8", "--ascii")
    assert code == 0 and "5x8 -> 5x4" in out.splitlines()[0]


# -- transformers ------------------------------------------------------------------------


def test_hf_llama_on_meta_with_tokens(capsys):
    pytest.importorskip("transformers")
    code, out, err = run_cli(
        capsys, "hf:llama", *TINY_LLAMA_SETS, "--tokens", "1,16", "--device", "meta", "--format", "json"
    )
    assert code == 0, err
    doc = json.loads(out)
    assert doc["meta"]["model"].endswith("LlamaModel")
    inputs = [n for n in doc["nodes"] if n["kind"] == "input"]
    assert [n["path"] for n in inputs] == ["kwargs['input_ids']"]
    assert inputs[0]["outputs"][0]["shape"] == [1, 16] and inputs[0]["outputs"][0]["dtype"] == "int64"
    layers = [s["path"] for s in doc["scopes"] if s["class"].endswith("LlamaDecoderLayer")]
    assert layers == ["layers.0", "layers.1"]
    assert sum(1 for p in doc["meta"]["parameters"] if p["path"].endswith("q_proj.weight")) == 2


# -- errors: one line, no traceback, exit codes -------------------------------------------


@pytest.mark.parametrize(
    ("argv", "code", "needle"),
    [
        (["missing_dir/nothere.py:Net"], EXIT_USAGE, "model file not found: missing_dir/nothere.py"),
        (["{net}:Nett"], EXIT_USAGE, "has no 'Nett'; did you mean 'Net'?"),
        (["--input", "1,three"], EXIT_USAGE, "--input '1,three' is not a shape"),
        (["--input", "1,3:float99"], EXIT_USAGE, "unknown dtype 'float99'"),
        (["--no-such-option"], EXIT_USAGE, "unrecognized arguments: --no-such-option"),
        (["--format", "bmp"], EXIT_USAGE, "invalid choice: 'bmp'"),
        (["{net}:Net", "--set", "hidden_size=3"], EXIT_USAGE, "hf: specs only"),
        (["--device", "floppy"], EXIT_USAGE, "--device 'floppy' is not a device"),
        (
            ["--input", "1,3,32,32", "--input", "2"],
            EXIT_MODEL_FAILED,
            "cannot take args[0] float32[1,3,32,32], args[1] float32[2]",
        ),
    ],
)
def test_errors_are_one_line_with_the_right_exit_code(capsys, net_file, argv, code, needle):
    argv = [a.replace("{net}", str(net_file)) for a in argv]
    got, out, err = run_cli(capsys, *argv)
    assert got == code
    assert out == ""
    lines = error_lines(err)
    assert len(lines) == 1 and lines[0].startswith("torchatlas: error: ")
    assert needle in lines[0]
    assert "Traceback" not in err


def test_forward_failure_names_the_input_and_where_it_failed(capsys, net_file):
    code, out, err = run_cli(capsys, f"{net_file}:Net", "--input", "2,9")
    assert code == EXIT_MODEL_FAILED and out == ""
    first, where = error_lines(err)
    assert first.startswith("torchatlas: error: ") and "args[0] float32[2,9]" in first and "RuntimeError" in first
    assert where.startswith("torchatlas: forward failed at torch.nn.functional.linear in module 'fc' (Linear)")
    assert where.endswith(f"{net_file}:12")


def test_wrong_dtype_names_the_input(capsys, net_file):
    code, _, err = run_cli(capsys, f"{net_file}:Net", "--input", "2,8:int64")
    assert code == EXIT_MODEL_FAILED and "args[0] int64[2,8]" in err


def test_hostile_error_text_is_escaped_and_stays_on_one_line(capsys, tmp_path):
    path = tmp_path / "hostile.py"
    path.write_text(
        "from torch import nn\n"
        "class Evil(nn.Module):\n"
        "    def __init__(self):\n"
        "        raise ValueError('\\x1b[31mred\\nsecond line')\n"
    )
    code, _, err = run_cli(capsys, f"{path}:Evil")
    assert code == EXIT_MODEL_FAILED
    assert "\x1b" not in err and "\\x1b[31mred" in err
    assert len(error_lines(err)) == 1


def test_debug_shows_the_traceback(capsys):
    code, _, err = run_cli(capsys, "--input", "1,4,32,32", "--debug")
    assert code == EXIT_MODEL_FAILED
    assert "Traceback" in err and "torchatlas: error:" in err


def test_failing_constructor_is_a_model_failure(capsys, tmp_path):
    path = tmp_path / "bad.py"
    path.write_text(
        "from torch import nn\n"
        "class Bad(nn.Module):\n"
        "    def __init__(self):\n"
        "        raise ValueError('no weights here')\n"
    )
    code, _, err = run_cli(capsys, f"{path}:Bad")
    assert code == EXIT_MODEL_FAILED
    assert error_lines(err) == [
        f"torchatlas: error: building {path}:Bad failed: ValueError: no weights here ({path}:4)"
    ]


# -- formats the Graph renders (skipped until the Graph methods exist) --------------------


@pytest.mark.parametrize(("fmt", "method"), [("dot", "to_dot"), ("summary", "summary")])
def test_text_formats_print_to_stdout(capsys, fmt, method):
    if not hasattr(torchatlas.Graph, method):
        pytest.skip(f"Graph.{method} not wired yet")
    code, out, _ = run_cli(capsys, "--format", fmt)
    assert code == 0
    assert "initial_conv" in out
    if fmt == "dot":
        assert out.lstrip().startswith(("digraph", "strict digraph"))


@pytest.mark.parametrize(
    ("fmt", "magic"), [("svg", b"<svg"), ("png", b"\x89PNG"), ("pdf", b"%PDF"), ("html", b"<!DOCTYPE html>")]
)
def test_file_formats_write_the_named_file(capsys, tmp_path, fmt, magic):
    if not hasattr(torchatlas.Graph, "render" if fmt != "html" else "to_html"):
        pytest.skip("Graph.render/to_html not wired yet")
    target = tmp_path / f"out.{fmt}"
    code, out, err = run_cli(capsys, "-o", str(target))
    assert code == 0, err
    assert out == "" and magic in target.read_bytes()[:2048]


def test_out_dir_writes_every_format(capsys, tmp_path):
    if not all(hasattr(torchatlas.Graph, m) for m in ("render", "to_dot", "to_html", "summary")):
        pytest.skip("Graph.render/to_dot/to_html/summary not wired yet")
    code, out, err = run_cli(capsys, "--out-dir", str(tmp_path / "out"))
    assert code == 0, err
    written = {p.name for p in (tmp_path / "out").iterdir()}
    assert {"tree.txt", "graph.json", "graph.dot", "summary.txt", "graph.html"} <= written
    assert written <= {f.file_name for f in FORMATS.values()}
    assert torchatlas.load(tmp_path / "out" / "graph.json").ir.meta["model"].endswith("CoolCNN")


def test_an_unwritable_output_is_a_one_line_error(capsys, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    code, out, err = run_cli(capsys, "-o", str(blocker / "graph.json"))
    assert code == EXIT_MODEL_FAILED and out == ""
    lines = error_lines(err)
    assert len(lines) == 1 and lines[0].startswith("torchatlas: error: ") and str(blocker) in lines[0]


def test_out_dir_excludes_a_single_output(capsys, tmp_path):
    code, _, err = run_cli(capsys, "--out-dir", str(tmp_path), "-o", str(tmp_path / "x.json"))
    assert code == EXIT_USAGE and "--out-dir writes every format" in err


def test_diff_of_two_saved_graphs(capsys, tmp_path, net_file):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    run_cli(capsys, f"{net_file}:Net", "-o", str(a))
    run_cli(capsys, "-o", str(b))
    code, out, err = run_cli(capsys, "diff", str(a), str(b))
    assert code == 1, err  # they differ, as diff(1) says it
    assert "initial_conv" in out and out != "no differences\n"
    code, same, _ = run_cli(capsys, "diff", str(a), str(a), "--format", "json")
    assert code == 0
    same = json.loads(same)
    assert {k: same[k] for k in ("added", "removed", "changed", "totals")} == dict.fromkeys(
        ("added", "removed", "changed", "totals"), []
    )
    assert same["calls"] and {c["status"] for c in same["calls"]} == {"same"}


def test_diff_of_a_missing_file_is_a_usage_error(capsys, tmp_path):
    code, _, err = run_cli(capsys, "diff", str(tmp_path / "a.json"), str(tmp_path / "b.json"))
    assert code == EXIT_USAGE and error_lines(err) == [f"torchatlas: error: file not found: {tmp_path / 'a.json'}"]


# -- as a real process ---------------------------------------------------------------------


def test_python_dash_m_runs_the_example_and_fails_cleanly(tmp_path):
    def run(*args: str) -> subprocess.CompletedProcess:
        env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
        return subprocess.run(
            [sys.executable, "-m", "torchatlas", *args], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300
        )

    ok = run("--no-progress")
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith("CoolCNN") and "parallel_conv (Conv2d)" in ok.stdout
    bad = run("nothere.py:Net")
    assert bad.returncode == EXIT_USAGE
    assert bad.stderr.strip() == "torchatlas: error: model file not found: nothere.py (spec 'nothere.py:Net')"


# -- exported programs and progress ---------------------------------------------------------


def test_exported_program_opens_as_a_graph(capsys, tmp_path):
    if not hasattr(torchatlas, "from_export"):
        pytest.skip("torchatlas.from_export not wired yet")
    import torch

    from torchatlas._example import CoolCNN, example_input

    program = torch.export.export(CoolCNN().eval(), (example_input(),))
    path = tmp_path / "coolcnn.pt2"
    torch.export.save(program, path)
    code, out, err = run_cli(capsys, str(path), "--format", "json")
    assert code == 0, err
    assert any(n["kind"] == "op" for n in json.loads(out)["nodes"])


def test_a_file_that_is_not_an_exported_program_is_a_one_line_error(capsys, tmp_path):
    path = tmp_path / "junk.pt2"
    path.write_bytes(b"not a zip archive")
    code, _, err = run_cli(capsys, str(path))
    assert code == EXIT_USAGE
    lines = error_lines(err)
    assert len(lines) == 1 and lines[0].startswith(f"torchatlas: error: {path}: not a torch.export program")


@pytest.mark.parametrize(("flag", "expected"), [([], None), (["--progress"], True), (["--no-progress"], False)])
def test_progress_flag_reaches_the_trace(capsys, monkeypatch, flag, expected):
    seen = []
    real_trace = torchatlas.trace

    def recording_trace(*args, **kwargs):
        seen.append(kwargs.get("progress"))
        return real_trace(*args, **kwargs)

    monkeypatch.setattr(torchatlas, "trace", recording_trace)
    code, _, _ = run_cli(capsys, *flag)
    assert code == 0 and seen == [expected]


def test_aten_level_and_backward_from_the_command_line(tmp_path) -> None:
    out = tmp_path / "aten.json"
    assert main(["--level", "aten", "-o", str(out)]) == 0
    doc = json.loads(out.read_text())
    targets = {n.get("target") for n in doc["nodes"] if n["kind"] == "op"}
    assert "aten.convolution.default" in targets and "torch.conv2d" not in targets
    out = tmp_path / "backward.json"
    assert main(["--backward", "-o", str(out)]) == 0
    phases = {n.get("meta", {}).get("phase") for n in json.loads(out.read_text())["nodes"] if n["kind"] == "op"}
    assert phases == {"forward", "backward"}


def test_view_flags_reach_every_format_that_takes_them() -> None:
    """--depth and --no-fold are view options every output shares: the diagram and the page take them too."""
    from torchatlas._cli._main import _view_options, build_parser

    opts = build_parser().parse_args(["--depth", "1", "--no-fold"])
    for fmt in ("tree", "summary", "dot", "svg", "html"):
        assert {"depth": 1, "fold_repeats": False}.items() <= _view_options(fmt, opts).items(), fmt
    assert "fold_repeats" not in _view_options("json", opts)
