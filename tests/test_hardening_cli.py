"""The command line answers bad input in one line: a model spec that does not exist or
does not construct, inputs whose shape or dtype do not fit, a broken graph file."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from _capture_helpers import load_coolcnn

import torchatlas

cli = pytest.importorskip("torchatlas._cli", reason="the CLI (torchatlas._cli) is not written yet")

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
    ],
    ids=["missing-file", "missing-class", "missing-package", "bad-shape", "bad-dtype", "negative-size"],
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
