"""`torchatlas compare A B [C…]`: the report, the outputs, and exit 1 when a run diverges."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from _cli_helpers import error_lines, run_cli

import torchatlas

MODELS = '''
import torch

class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(4, 8), torch.nn.Linear(8, 2)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))

class Nudged(Mlp):
    def __init__(self):
        super().__init__()
        with torch.no_grad():
            self.fc2.weight += 0.01
'''


@pytest.fixture
def models(tmp_path: Path) -> Path:
    path = tmp_path / "models.py"
    path.write_text(MODELS)
    return path


def test_the_same_model_twice_exits_0(models: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "compare", f"{models}:Mlp", f"{models}:Mlp", "--input", "3,4")
    assert code == 0, out
    assert "b: no op past the tolerance" in out and "3 equal" in out


def test_a_nudged_weight_exits_1_naming_the_linear_and_writes_the_page(
    models: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = tmp_path / "cmp.html"
    code, out, err = run_cli(capsys, "compare", f"{models}:Mlp", f"{models}:Nudged", "--input", "3,4", "-o", str(page))
    assert code == 1
    assert "first divergence at fc2 (linear)" in out
    assert page.is_file() and "ov:error" in page.read_text() and "wrote" in err


def test_three_runs_autocast_json_and_saved_graphs(models: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    torch.manual_seed(0)
    from importlib.util import module_from_spec, spec_from_file_location

    spec = spec_from_file_location("cmp_models", models)
    module = module_from_spec(spec)
    spec.loader.exec_module(module)
    saved = torchatlas.trace(module.Mlp(), torch.randn(3, 4), fingerprint=True).save(tmp_path / "a.json")
    code, out, _ = run_cli(capsys, "compare", str(saved), str(saved), "-f", "json")
    assert code == 0 and json.loads(out)["diverged"] is False
    code, out, _ = run_cli(
        capsys, "compare", f"{models}:Mlp", f"{models}:Mlp", f"{models}:Mlp", "--input", "3,4", "--autocast", "3=bfloat16",
        "--labels", "fp32,again,bf16", "-f", "tree",
    )
    assert code == 1  # bf16 is off past the default float32 tolerance
    assert "error: again" in out and "error: bf16" in out and "✗ diverges here" in out


def test_bad_command_lines_are_one_line_errors(models: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "compare", f"{models}:Mlp")
    assert code == 2 and "two runs or more" in error_lines(err)[0]
    code, _, err = run_cli(capsys, "compare", f"{models}:Mlp", f"{models}:Mlp", "--autocast", "5=bfloat16")
    assert code == 2 and "--autocast" in error_lines(err)[0] and len(error_lines(err)) == 1
    code, _, err = run_cli(capsys, "compare", f"{models}:Mlp", f"{models}:Mlp", "--labels", "x")
    assert code == 2 and "--labels" in error_lines(err)[0]
