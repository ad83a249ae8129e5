"""Each registry takes a new entry in one line: a renderer (``_render.RENDERERS``) and a pass
(``_passes._analyze.PASSES``) need one new module and one registration, and then every
entry point offers them."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from _cli_helpers import run_cli
from torch import nn

import torchatlas
from torchatlas._passes import _analyze
from torchatlas._passes._common import MetaUpdate, Pass
from torchatlas._render import RENDERERS, Renderer


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x))


@dataclass(frozen=True)
class OpCountOptions:
    prefix: str = "ops:"


def op_count(ir: torchatlas.GraphIR, options: OpCountOptions) -> str:
    return f"{options.prefix} {sum(1 for _ in ir.ops())}"


def test_a_new_renderer_is_one_registration_away(monkeypatch: pytest.MonkeyPatch, tmp_path, capsys) -> None:
    monkeypatch.setitem(RENDERERS, "opcount", Renderer(op_count, OpCountOptions, "opcount.txt"))
    graph = torchatlas.trace(Tiny(), torch.randn(1, 4))
    assert graph.view("opcount") == "ops: 2"
    assert graph.view("opcount", prefix="n =") == "n = 2"
    assert graph.view("opcount", tmp_path / "count.txt").read_text() == "ops: 2"
    model = tmp_path / "tiny.py"
    model.write_text(
        "import torch\nfrom torch import nn\n\n\nclass Tiny(nn.Module):\n    def __init__(self):\n"
        "        super().__init__()\n        self.fc = nn.Linear(4, 2)\n\n    def forward(self, x):\n"
        "        return torch.relu(self.fc(x))\n"
    )
    code, out, _ = run_cli(capsys, f"{model}:Tiny", "--input", "1,4", "--format", "opcount")
    assert (code, out) == (0, "ops: 2\n")
    code, _, _ = run_cli(capsys, f"{model}:Tiny", "--input", "1,4", "--out-dir", str(tmp_path / "all"))
    assert code == 0 and (tmp_path / "all" / "opcount.txt").read_text() == "ops: 2\n"


def test_a_format_whose_own_option_is_called_format_takes_it_through_view() -> None:
    graph = torchatlas.trace(Tiny(), torch.randn(1, 4))
    assert graph.view("summary", format="markdown") == graph.summary(format="markdown")
    assert graph.view("summary", format="markdown").startswith("|")


def _count_relus(ir: torchatlas.GraphIR) -> MetaUpdate:
    return MetaUpdate(graph={"relu_count": sum(1 for n in ir.ops() if n.target == "torch.relu")})


def test_a_new_pass_is_one_registration_away(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    relus = Pass("relu_count", _count_relus, graph_keys=frozenset({"relu_count"}))
    monkeypatch.setattr(_analyze, "PASSES", (*_analyze.PASSES, relus))
    graph = torchatlas.trace(Tiny(), torch.randn(1, 4))
    assert graph.ir.meta["relu_count"] == 1
    # A saved result is not trusted: loading drops it, and the pass computes it again.
    path = graph.save(tmp_path / "g.json")
    forged = path.read_text().replace('"relu_count": 1', '"relu_count": 99')
    path.write_text(forged)
    loaded = torchatlas.load(path)
    assert loaded._captured.meta.get("relu_count") is None
    assert loaded.ir.meta["relu_count"] == 1


def test_a_new_capture_level_is_one_registration_away(monkeypatch: pytest.MonkeyPatch) -> None:
    from torchatlas import _capture

    class CallCounter:
        """A level that adds a listener: how many module calls the forward pass made."""

        def __init__(self, meta: dict) -> None:
            self.meta = meta

        def scope_entered(self, index: int, module: object, args: tuple, kwargs: dict) -> None:
            self.meta["module_calls"] = self.meta.get("module_calls", 0) + 1

        def scope_exited(self, index: int, module: object, output: object) -> None:
            pass

    def counting(session: _capture.Session) -> None:
        session.tracker.listeners.append(CallCounter(session.result[0].meta))

    monkeypatch.setitem(_capture.LEVELS, "counting", counting)
    graph = torchatlas.trace(Tiny(), torch.randn(1, 4), level="counting")
    assert graph.ir.meta["module_calls"] == 2 and [n.target for n in graph.ir.ops()] == [
        "torch.nn.functional.linear", "torch.relu"
    ]
