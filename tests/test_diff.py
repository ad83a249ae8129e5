"""Diff of two graphs: added/removed calls, changed shapes, parameters and FLOPs, renamed modules."""

from __future__ import annotations

import pytest
from _passes_builder import IRBuilder, linear_layer

from torchatlas._passes import GraphDiff, ScopeChange, diff


def _mlp(out_features: int = 4, head: str = "head", extra: bool = False):
    b = IRBuilder("m.MLP")
    x = b.input((2, 4))
    enc = b.scope("enc", "m.Encoder")
    h = linear_layer(b, x, "enc.fc", 4, 8, parent=enc)
    b.returns(enc, h)
    y = linear_layer(b, h, head, 8, out_features)
    if extra:
        y = linear_layer(b, y, "extra", out_features, out_features)
    b.output(y)
    return b.build()


def _changes(d: GraphDiff) -> set[tuple[str, str, str, str]]:
    return {(c.scope, c.field, c.before, c.after) for c in d.changed}


def test_identical_graphs_have_no_differences():
    d = diff(_mlp(), _mlp())
    assert not d
    assert str(d) == "no differences"


def test_changed_layer_reports_shapes_params_and_flops_where_it_changed():
    d = diff(_mlp(4), _mlp(6))
    assert d.added == [] and d.removed == []
    changes = _changes(d)
    assert ("head (Linear)", "output shapes", ((2, 4),), ((2, 6),)) in changes
    assert ("head (Linear)", "parameters", 36, 54) in changes
    assert ("head (Linear)", "FLOPs", 128, 192) in changes
    assert ("<root> (MLP)", "output shapes", ((2, 4),), ((2, 6),)) in changes
    # a call containing the change says how its totals moved
    assert ("<root> (MLP)", "parameters", 76, 94) in changes
    assert ("head (Linear)", "parameter shapes", "weight 4×8, bias 4", "weight 6×8, bias 6") in changes
    assert {(c.field, c.before, c.after) for c in d.totals} == {("parameters", 76, 94), ("FLOPs", 256, 320)}
    assert not any(c.scope.startswith("enc") for c in d.changed)


def test_a_change_holds_numbers_and_every_output_says_the_same_words():
    """The records carry the values (ints, shapes); the words are made once, from them."""
    import json

    d = diff(_mlp(4), _mlp(6))
    params = next(c for c in d.changed if c.scope == "head (Linear)" and c.field == "parameters")
    assert (params.before, params.after) == (36, 54) and type(params.before) is int
    assert params.words == "params 36 → 54"
    assert "~ head (Linear): params 36 → 54" in str(d).splitlines()
    head_line = next(line for line in d.tree().splitlines() if "head (Linear)" in line)
    assert "params 36 → 54" in head_line
    head = next(c for c in d.calls if c.label == "head (Linear)")
    assert head.before is not None and head.before["parameters"] == 36 and head.before["output shapes"] == ((2, 4),)
    doc = json.loads(json.dumps(d.to_dict()))
    row = next(r for r in doc["changed"] if r["scope"] == "head (Linear)" and r["field"] == "parameters")
    assert (row["before"], row["after"]) == (36, 54)
    assert next(s for s in d.graph.scopes if s.path == "head").meta["diff_note"] == "params 36 → 54"


def test_added_and_removed_calls():
    d = diff(_mlp(extra=False), _mlp(extra=True))
    assert d.added == ["extra (Linear)"] and d.removed == []
    back = diff(_mlp(extra=True), _mlp(extra=False))
    assert back.removed == ["extra (Linear)"] and back.added == []


def test_renamed_module_is_matched_by_structure():
    d = diff(_mlp(head="head"), _mlp(head="classifier"))
    assert d.added == [] and d.removed == []
    assert _changes(d) == {("classifier (Linear)", "path", "head (Linear)", "classifier (Linear)")}


def test_text_and_markdown_forms():
    d = diff(_mlp(4, extra=False), _mlp(6, extra=True))
    text = str(d).splitlines()
    assert "+ extra (Linear)" in text
    assert "~ head (Linear): params 36 → 54" in text  # as diff.tree() writes it
    assert any(line.startswith("= total params ") for line in text)
    md = d.to_markdown()
    assert "| module call | what | before | after |" in md
    assert r"| head (Linear) | parameters | 36 | 54 |" in md
    assert d.to_dict()["added"] == ["extra (Linear)"]


def test_hostile_names_are_escaped():
    d = GraphDiff(added=["x\x1b[31m|<b>"], changed=[ScopeChange("a|b", "parameters", 1, 2)])
    assert "\x1b" not in str(d)
    md = d.to_markdown()
    assert "<b>" not in md and r"a\|b" in md


def test_real_model_with_one_layer_changed():
    torch = pytest.importorskip("torch")
    from torch import nn

    import torchatlas

    def model(width: int) -> nn.Module:
        return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, width), nn.Tanh())

    x = torch.randn(3, 16)
    a, b = torchatlas.trace(model(8), (x,)).ir, torchatlas.trace(model(12), (x,)).ir
    d = diff(a, b)
    changes = _changes(d)
    assert ("2 (Linear)", "parameters", 32 * 8 + 8, 32 * 12 + 12) in changes
    assert ("2 (Linear)", "FLOPs", 2 * 3 * 32 * 8, 2 * 3 * 32 * 12) in changes
    assert ("3 (Tanh)", "input shapes", ((3, 8),), ((3, 12),)) in changes
    assert not any(c.scope.startswith("0 ") for c in d.changed)
