"""The command line answers bad input in one line: a model spec that does not exist or
does not construct, inputs whose shape or dtype do not fit, a broken graph file."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
from _capture_helpers import load_coolcnn
from _cli_helpers import run_cli as _run

import torchatlas

cli = pytest.importorskip("torchatlas._cli", reason="the CLI (torchatlas._cli) is not written yet")
from torchatlas._cli._main import build_parser  # noqa: E402

USER_MODEL = '''
import torch
from torch import nn


class Breaks(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(4, 4)

    def forward(self, x):
        return self.body(x).view(3, -1)  # VIEW


class WontBuild(nn.Module):
    def __init__(self):
        super().__init__()
        raise RuntimeError("needs a config file")


class Unprintable(Exception):
    def __str__(self):
        raise ValueError("no message for you")


class RaisesUnprintable(nn.Module):
    def forward(self, x):
        raise Unprintable()


class RaisesTupleNotes(nn.Module):
    def forward(self, x):
        error = RuntimeError("tuple notes")
        error.__notes__ = ("the model's own note",)
        raise error
'''


@pytest.fixture
def user_file(tmp_path: Path) -> Path:
    path = tmp_path / "user_model.py"
    path.write_text(textwrap.dedent(USER_MODEL), encoding="utf-8")
    return path


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str]]:
    code = cli.main(list(argv))
    lines = capsys.readouterr().err.splitlines()
    assert not any("Traceback" in line for line in lines), lines
    assert lines and lines[0].startswith("torchatlas: error: "), lines
    return code, lines


@pytest.mark.parametrize(
    "argv, code, expected",
    [
        (["no_such_file.py:Model"], 2, "not found"),
        (["torchatlas._example:NoSuchModel"], 2, "NoSuchModel"),
        (["no_such_package_xyz.models:Model"], 2, "no_such_package_xyz"),
        (["--input", "1,x,3"], 2, "not a shape"),
        (["--input", "1,3,32,32:float99"], 2, "float99"),
        (["--input=-1,3,32,32"], 2, "-1"),
        (["--input", "99999999999999999999999"], 2, "too large"),
        (["--input", "9223372036854775807,9223372036854775807"], 2, "cannot be allocated"),
        (["--input", "99999999999999,3,32,32"], 2, "cannot be allocated"),
    ],
    ids=["missing-file", "missing-class", "missing-package", "bad-shape", "bad-dtype", "negative-size",
         "size-too-large", "size-overflows", "too-big-to-allocate"],
)
def test_cli_bad_spec_is_one_line(capsys: pytest.CaptureFixture[str], argv: list[str], code: int, expected: str) -> None:
    got, lines = run_cli(capsys, *argv)
    assert got == code and len(lines) == 1 and expected in lines[0]


def test_cli_model_that_does_not_construct(capsys: pytest.CaptureFixture[str], user_file: Path) -> None:
    code, lines = run_cli(capsys, f"{user_file}:WontBuild")
    assert code == 1 and len(lines) == 1 and "needs a config file" in lines[0]


@pytest.mark.parametrize("spec", ["1,4:int64", "2,5"], ids=["dtype", "shape"])
def test_cli_inputs_that_do_not_fit_name_where(capsys: pytest.CaptureFixture[str], user_file: Path, spec: str) -> None:
    code, lines = run_cli(capsys, f"{user_file}:Breaks", "--input", spec)
    shape, _, dtype = spec.partition(":")
    assert code == 1 and len(lines) == 2
    assert f"{dtype or 'float32'}[{shape}]" in lines[0] and "Breaks" in lines[0]
    assert lines[1].startswith("torchatlas: forward failed at torch.nn.functional.linear in module 'body' (Linear)")
    assert f"{user_file}:" in lines[1]


@pytest.mark.parametrize("model, message", [
    ("RaisesUnprintable", "Unprintable (its message could not be read)"),
    ("RaisesTupleNotes", "RuntimeError: tuple notes"),
])
def test_cli_model_exception_that_will_not_print_is_one_line(
    capsys: pytest.CaptureFixture[str], user_file: Path, model: str, message: str
) -> None:
    code, lines = run_cli(capsys, f"{user_file}:{model}", "--input", "2")
    assert code == 1 and lines[0].endswith(message) and len(lines) <= 2


def test_cli_bundled_example_failure_names_its_source_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, lines = run_cli(capsys, "--input", "1,3,5,5")
    assert code == 1 and "_example.py:" in lines[-1]


def test_cli_truncated_graph_file_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cool = load_coolcnn()
    text = torchatlas.trace(cool.CoolCNN(), cool.example_input()).to_json()
    path = tmp_path / "cut.json"
    path.write_text(text[: len(text) // 2], encoding="utf-8")
    code, lines = run_cli(capsys, str(path))
    assert code == 2 and len(lines) == 1 and "cut.json" in lines[0] and "truncated" in lines[0]


def test_python_dash_m_entry_point_reports_one_line(user_file: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "torchatlas", f"{user_file}:Breaks", "--input", "2,5"],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 1 and done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 2 and lines[0].startswith("torchatlas: error: ") and "Traceback" not in done.stderr


def _archive(tmp_path: Path, name: str, change) -> Path:
    """A ``torch.export.save`` archive with its members passed through ``change(name, data)``
    (``None`` drops the member)."""
    import zipfile

    import torch

    clean = tmp_path / "clean.pt2"
    if not clean.exists():
        torch.export.save(torch.export.export(torch.nn.ReLU(), (torch.ones(2),)), clean)
    path = tmp_path / name
    with zipfile.ZipFile(clean) as source, zipfile.ZipFile(path, "w") as target:
        for member in source.namelist():
            data = change(member, source.read(member))
            if data is not None:
                target.writestr(member, data)
    return path


@pytest.mark.parametrize("drop, trust, expected", [
    ("model.json", [], "is missing"),  # read as data: the program's JSON is the one member needed
    ("sample_inputs", ["--trust-pickle"], "PytorchStreamReader failed locating file"),  # torch logs, then raises
    ("model.json", ["--trust"], "holds no exported program"),  # torch says "check the warnings above"
])
def test_cli_corrupt_pt2_is_one_line_without_torch_warnings(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, drop: str, trust: list[str], expected: str
) -> None:
    path = _archive(tmp_path, "corrupt.pt2", lambda member, data: None if drop in member else data)
    code, lines = run_cli(capsys, *trust, str(path))
    assert code == 2 and len(lines) == 1 and expected in lines[0] and str(path) in lines[0]


def test_cli_reads_a_pt2_without_sample_inputs_as_data(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Read as data, a program needs neither its sample inputs nor its weights."""
    path = _archive(tmp_path, "light.pt2", lambda member, data: None if "/data/" in member else data)
    code = cli.main([str(path)])
    out, err = capsys.readouterr()
    assert code == 0 and err == "" and "relu" in out


def test_cli_trusted_legacy_pt2_is_one_line_without_torch_warnings(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The pre-2.7 layout makes torch warn "This version of file is deprecated" before failing."""
    import zipfile

    path = tmp_path / "legacy.pt2"
    with zipfile.ZipFile(path, "w") as archive:
        for member, data in [("version", "8.1"), ("serialized_exported_program.json", "{}"),
                             ("serialized_state_dict.json", "{}"), ("serialized_constants.json", "{}")]:
            archive.writestr(member, data)
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        code, lines = run_cli(capsys, "--trust-pickle", str(path))
    assert code == 2 and len(lines) == 1 and "not a torch.export program" in lines[0]
    assert [str(w.message) for w in warned] == []


# -- issue 28: the CLI's low items ----------------------------------------------


def test_cli_html_to_stdout_is_the_page() -> None:
    done = subprocess.run([sys.executable, "-m", "torchatlas", "--format", "html", "-o", "-"], capture_output=True)
    if b"viewer bundle is missing" in done.stderr:
        pytest.skip("the HTML viewer bundle is not built")
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.lstrip().lower().startswith(b"<!doctype html") and b"TypeError" not in done.stderr


def test_cli_set_with_json_nested_too_deep_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, lines = run_cli(capsys, "--set", "layers=" + "[" * 60_000 + "]" * 60_000)
    assert code == 2 and lines == ["torchatlas: error: --set 'layers': its JSON value is nested too deeply"]


def test_cli_wrote_line_shows_a_hostile_path_escaped(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    name = "graph\n\x1b[31mred\x1b[0m\u202e.json"
    code = cli.main(["--format", "json", "-o", str(tmp_path / name)])
    lines = capsys.readouterr().err.splitlines()
    assert code == 0 and (tmp_path / name).exists()
    assert lines == [f"torchatlas: wrote {tmp_path}/graph\\n\\x1b[31mred\\x1b[0m\\u202e.json"]


def test_random_inputs_are_the_same_every_run_unless_the_seed_changes(capsys: pytest.CaptureFixture[str]) -> None:
    def stats(*seed: str) -> str:
        code, out, _ = _run(capsys, "--input", "2,3,32,32", "--stats", "--format", "summary", "--wide", *seed)
        assert code == 0
        return out

    assert stats() == stats() == stats("--seed", "0") != stats("--seed", "1")
    assert "--seed N" in " ".join(build_parser().format_help().split())


def test_model_explorer_is_written_without_a_folding_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "--format", "model-explorer", "-o", str(tmp_path / "me.json"))
    assert code == 0, err
    assert (tmp_path / "me.json").read_text().startswith("{")


@pytest.mark.parametrize("closed, fmt", [(1, "tree"), (1, "summary"), (2, "json")])
def test_a_closed_stdout_or_stderr_is_no_traceback(tmp_path: Path, closed: int, fmt: str) -> None:
    import os

    import torch

    graph = torchatlas.trace(torch.nn.Linear(2, 2), torch.randn(1, 2)).save(tmp_path / "g.json")
    output = ["-o", str(tmp_path / "out.json")] if closed == 2 else []
    env = {**os.environ, "PYTHONPATH": str(Path(torchatlas.__file__).parents[1])}
    done = subprocess.run(
        [sys.executable, "-m", "torchatlas", str(graph), "--format", fmt, *output],
        stdout=subprocess.PIPE if closed == 2 else None, stderr=subprocess.PIPE if closed == 1 else None,
        text=True, env=env, preexec_fn=lambda: os.close(closed),
    )
    if closed == 1:
        assert "Traceback" not in done.stderr and done.returncode == 1
        assert done.stderr.strip() == "torchatlas: error: [Errno 9] standard output is closed; write to a file with -o"
    else:
        assert done.returncode == 0 and (tmp_path / "out.json").exists()


def test_a_rank_count_past_what_torch_takes_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "--tp", "99999999999999999999")
    assert code == 2 and err.strip().startswith("torchatlas: error: --tp needs a number of ranks from 1 to 65,536")


_LLAMA = ["hf:llama", "--tokens", "1,8", "--set", "num_hidden_layers=1", "--set", "hidden_size=64", "--set",
          "intermediate_size=128", "--set", "num_attention_heads=4", "--set", "num_key_value_heads=2", "--set", "vocab_size=100"]


@pytest.mark.parametrize(
    "extra, says",
    [(["--fsdp", "2", "--device", "meta"], "FSDP2 refuses the meta device"),
     (["--tp", "8", "--device", "meta"], "num_attention_heads=4, which 8 ranks cannot share evenly")],
    ids=["fsdp-on-meta", "tp-past-the-heads"],
)
def test_a_sharding_the_cli_cannot_do_is_a_usage_error_not_the_models_failure(
    capsys: pytest.CaptureFixture[str], extra: list[str], says: str
) -> None:
    pytest.importorskip("transformers")
    code, _, err = _run(capsys, *_LLAMA, *extra)
    assert code == 2 and says in err and "forward failed" not in err
