"""The diff as a CI gate and on tied weights: ``torchatlas diff A B`` exits 0 when A and B
compute the same and 1 when they differ (2 on trouble), as diff(1); a spec against itself
says nothing changed and names no internal module; an op one side lacks reads as a phrase;
a tied weight is one tensor on both sides of a diff (torch's own count is the truth)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

import torchatlas
from torchatlas._cli import main

SPEC = textwrap.dedent("""
    import torch
    from torch import nn


    def example_input():
        return torch.randn(2, 8)


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x):
            return self.fc(x) * 2


    class MoreNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x):
            return (self.fc(x) * 2) * x
""")


@pytest.fixture
def pair(tmp_path: Path) -> Path:
    path = tmp_path / "pair.py"
    path.write_text(SPEC)
    return path


def test_diff_exits_0_when_the_same_1_when_different_2_on_trouble(pair: Path, capsys) -> None:
    assert main(["diff", f"{pair}:Net", f"{pair}:Net"]) == 0
    same = capsys.readouterr().out
    assert main(["diff", f"{pair}:Net", f"{pair}:MoreNet"]) == 1
    different = capsys.readouterr().out
    assert same.rstrip().endswith("A and B compute the same (up to naming)")
    assert different.rstrip().endswith("A and B differ")
    assert main(["diff", f"{pair}:Net", f"{pair}:NoSuchNet"]) == 2
    assert main(["diff", f"{pair}:Net", str(pair.parent / "missing.json")]) == 2


def test_a_spec_against_itself_has_no_change_line_and_no_internal_module_name(pair: Path, capsys) -> None:
    assert main(["diff", f"{pair}:Net", f"{pair}:Net", "-f", "list"]) == 0
    assert capsys.readouterr().out == "no differences\n"
    assert main(["diff", f"{pair}:Net", f"{pair}:Net"]) == 0
    out = capsys.readouterr().out
    assert "~" not in out and "_torchatlas_model" not in out


def test_the_same_file_name_in_two_folders_compares_by_class_name(pair: Path, tmp_path: Path, capsys) -> None:
    """``diff old/model.py:Net new/model.py:Net``: the class is the same, the changed op shows."""
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "pair.py").write_text(SPEC.replace("* 2\n", "* 3\n", 1))
    assert main(["diff", f"{tmp_path / 'old' / 'pair.py'}:Net", f"{pair}:Net", "-f", "list"]) == 1
    assert capsys.readouterr().out.splitlines() == ["~ <root> (Net): op arguments mul(3) → mul(2)"]


def test_an_op_only_one_side_has_reads_as_a_phrase(pair: Path, capsys) -> None:
    x = torch.randn(2, 8)

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x):
            return self.fc(x) * 2

    class MoreNet(Net):
        def forward(self, x):
            return super().forward(x) * x

    torch.manual_seed(0)
    d = torchatlas.diff(torchatlas.trace(Net(), x), torchatlas.trace(MoreNet(), x))
    [added] = [c for c in d.changed if c.field == "op added"]
    assert (added.before, added.after) == ("—", "mul(2×8, 2×8): 2×8")  # the record keeps both sides
    assert added.words == "added op mul(2×8, 2×8): 2×8"
    assert "~ <root> (MoreNet): added op mul(2×8, 2×8): 2×8" in str(d).splitlines()
    assert "added op mul(2×8, 2×8): 2×8" in d.tree() and "— →" not in d.tree()
    reverse = torchatlas.diff(torchatlas.trace(MoreNet(), x), torchatlas.trace(Net(), x))
    assert "removed op mul(2×8, 2×8): 2×8" in reverse.tree()


class LM(nn.Module):
    def __init__(self, tied: bool = True) -> None:
        super().__init__()
        self.emb = nn.Embedding(50, 16)
        self.fc = nn.Linear(16, 16)
        self.head = nn.Linear(16, 50, bias=False)
        if tied:
            self.head.weight = self.emb.weight

    def forward(self, ids):
        return self.head(torch.relu(self.fc(self.emb(ids))))


def test_from_export_counts_a_tied_weight_once_and_equals_the_eager_trace() -> None:
    torch.manual_seed(0)
    model, ids = LM().eval(), torch.randint(0, 50, (2, 5))
    unique = sum(p.numel() for p in model.parameters())  # torch: the tied tensor once
    traced = torchatlas.trace(model, (ids,))
    exported = torchatlas.from_export(torch.export.export(model, (ids,)))
    assert traced.ir.meta["param_count"] == exported.ir.meta["param_count"] == unique == 1072
    assert exported.ir.meta["shared_param_count"] == 1
    d = torchatlas.diff(traced, exported)
    assert d.equal and d.changed == [] and not d.totals
    assert {n.status for n in d.nodes} <= {"same", "pass-through", "unread"}


def test_a_saved_pt2_read_as_data_counts_a_tied_weight_once(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model, ids = LM().eval(), torch.randint(0, 50, (2, 5))
    torch.export.save(torch.export.export(model, (ids,)), tmp_path / "lm.pt2")
    saved = torchatlas.from_export(tmp_path / "lm.pt2")  # the weights config says emb and head share one file
    assert saved.ir.meta["param_count"] == sum(p.numel() for p in model.parameters()) == 1072
    assert torchatlas.diff(torchatlas.trace(model, (ids,)), saved).equal


def test_untied_against_tied_says_what_is_tied_not_that_a_weight_is_gone() -> None:
    ids = torch.randint(0, 50, (2, 5))
    torch.manual_seed(0)
    untied = torchatlas.trace(LM(tied=False).eval(), (ids,))
    torch.manual_seed(0)
    tied = torchatlas.trace(LM().eval(), (ids,))
    d = torchatlas.diff(untied, tied)
    shapes = {c.scope: (c.before, c.after) for c in d.changed if c.field == "parameter shapes"}
    assert shapes == {
        "emb (Embedding)": ("weight 50×16", "weight 50×16 tied to head.weight"),
        "head (Linear)": ("weight 50×16", "weight 50×16 tied to emb.weight"),
    }
    assert [(t.field, t.before, t.after) for t in d.totals] == [("parameters", 1872, 1072)]


@pytest.mark.slow
def test_gpt2_against_its_export_has_no_parameter_change() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=100, n_positions=32)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).eval()
    kwargs = {"input_ids": torch.randint(0, 100, (1, 8)), "use_cache": False}
    traced = torchatlas.trace(model, kwargs=kwargs)
    with torch.no_grad():
        exported = torchatlas.from_export(torch.export.export(model, (), kwargs))
    assert traced.ir.meta["param_count"] == exported.ir.meta["param_count"] == sum(p.numel() for p in model.parameters())
    d = torchatlas.diff(traced, exported)
    assert not [c for c in d.changed if c.field in ("parameters", "parameter shapes")]
    assert not [c for c in d.changed if c.field == "data flow" and "wte" in c.before + c.after]
