"""The op table (``_ops.py``): one vocabulary that FLOP counting, colours and views all read."""

from __future__ import annotations

import pytest

from torchatlas._ops import CATEGORIES, KIND_CATEGORY, LEGEND, OPS, category, is_view, op_info, op_name, op_title
from torchatlas._passes._flops import RULES
from torchatlas._view import PALETTES

# The colour a FLOP rule's ops must have: a conv is never drawn as "other".
RULE_CATEGORIES = {
    "conv": {"compute"}, "conv_transpose": {"compute"}, "linear": {"compute"}, "matmul": {"compute"},
    "addmm": {"compute"}, "addbmm": {"compute"}, "dot": {"compute"}, "einsum": {"compute"},
    "attention": {"compute"}, "multi_head_attention": {"compute"}, "recurrent": {"compute"},
    "embedding": {"compute"}, "norm": {"normalization"}, "pool": {"reduction"}, "adaptive_pool": {"reduction"},
    "elementwise": {"elementwise"}, "dropout": {"elementwise"}, "alpha_dropout": {"elementwise"},
    "reduction": {"reduction"}, "free": {"shape", "elementwise", "reduction", "other"},
}


def test_every_flop_rule_is_implemented_and_every_rule_has_an_expected_colour() -> None:
    used = {info.flop_rule for info in OPS.values() if info.flop_rule is not None}
    assert used <= RULES
    assert RULES <= set(RULE_CATEGORIES)


def test_every_op_with_a_flop_rule_has_a_matching_colour_category() -> None:
    mismatched = {
        name: (info.flop_rule, info.category)
        for name, info in OPS.items()
        if info.category not in CATEGORIES
        or (info.flop_rule is not None and info.category not in RULE_CATEGORIES[info.flop_rule])
    }
    assert mismatched == {}


def test_every_kind_has_a_category_with_colours_and_a_legend_entry() -> None:
    assert set(KIND_CATEGORY.values()) <= set(CATEGORIES)
    assert [c for c, _ in LEGEND] == list(CATEGORIES)
    for palette in PALETTES.values():
        assert set(palette.fill) == set(palette.border) == set(CATEGORIES)


@pytest.mark.parametrize(
    ("python", "aten"),
    [
        ("torch.conv2d", "aten.convolution.default"),
        ("torch.nn.functional.linear", "aten.addmm.default"),
        ("torch.Tensor.__add__", "aten.add.Tensor"),
        ("torch.softmax", "aten._softmax.default"),
        ("torch.nn.functional.layer_norm", "aten.native_layer_norm.default"),
        ("torch.Tensor.view", "aten.view.default"),
        ("torch.nn.functional.embedding", "aten.embedding.default"),
    ],
)
def test_python_and_aten_spellings_of_an_op_share_a_category(python: str, aten: str) -> None:
    assert category(python, "op") == category(aten, "op") != "other"


@pytest.mark.parametrize(
    ("target", "name"),
    [
        ("torch.nn.functional.linear", "linear"),
        ("torch.Tensor.__iadd__", "add"),
        ("torch.Tensor.__rmatmul__", "matmul"),
        ("torch.relu_", "relu"),
        ("aten.add_.Tensor", "add"),
        ("aten._softmax.default", "_softmax"),
        (None, ""),
    ],
)
def test_op_name(target: str | None, name: str) -> None:
    assert op_name(target) == name


def test_views_alias_and_unknown_ops_are_unknown() -> None:
    assert is_view("torch.Tensor.transpose") and is_view("aten.view.default")
    assert not is_view("torch.Tensor.contiguous")
    assert op_info("torch.my_custom_op") is None and category("torch.my_custom_op", "op") == "other"


@pytest.mark.parametrize(
    ("target", "title"),
    [
        ("torch.Tensor.__add__", "add (+)"),
        ("torch.Tensor.__iadd__", "add (+=)"),
        ("torch.Tensor.__getitem__", "getitem ([])"),
        ("torch.Tensor.__neg__", "neg (-x)"),
        ("torch.conv2d", "conv2d"),
        ("aten.add.Tensor", "add"),
    ],
)
def test_an_op_has_one_title_with_the_operator_it_was_written_as(target: str, title: str) -> None:
    assert op_title(target) == title
