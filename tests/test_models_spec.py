"""Model specs and input building for the command line (torchatlas._cli._models)."""

from __future__ import annotations

import sys
import textwrap

import pytest
import torch

from torchatlas._cli import _models
from torchatlas._cli._models import InputSpec
from torchatlas._cli._spec import ModelError, SpecError

MODEL_FILE = """
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        return torch.relu(self.fc(x))

class Helper(nn.Module):
    def forward(self, x):
        return x

def make_net():
    return Net()

def broken():
    raise ValueError("cannot build this one")

def example_input():
    return torch.randn(2, 8)

NOT_A_MODEL = 3
"""


@pytest.fixture
def model_file(tmp_path):
    path = tmp_path / "mymodels.py"
    path.write_text(textwrap.dedent(MODEL_FILE))
    return path


# -- values from the command line --------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1,3,32,32", InputSpec((1, 3, 32, 32))),
        ("1x128:int64", InputSpec((1, 128), torch.int64)),
        ("4: bfloat16", InputSpec((4,), torch.bfloat16)),
    ],
)
def test_parse_input_reads_shape_and_dtype(text, expected):
    assert _models.parse_input(text) == expected


@pytest.mark.parametrize("text", ["1,a", "1,-3", "", "1,2:float99"])
def test_parse_input_rejects_malformed_values_naming_them(text):
    with pytest.raises(SpecError, match="--input"):
        _models.parse_input(text)


def test_parse_tokens_needs_batch_and_length():
    assert _models.parse_tokens("2,16") == (2, 16)
    with pytest.raises(SpecError, match="BATCH,SEQ_LEN"):
        _models.parse_tokens("16")


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("2", 2),
        ("0.5", 0.5),
        ("true", True),
        ("False", False),
        ("[1, 2]", [1, 2]),
        ('{"type": "linear"}', {"type": "linear"}),
        ("null", None),
        ("eager", "eager"),
    ],
)
def test_override_values_are_typed(text, value):
    assert _models.parse_overrides([f"key={text}"]) == {"key": value}


def test_override_without_equals_is_a_spec_error():
    with pytest.raises(SpecError, match="KEY=VALUE"):
        _models.parse_overrides(["num_hidden_layers"])


# -- file and module specs ------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "parts"),
    [
        ("models/net.py:Net", ("models/net.py", "Net")),
        ("pkg.mod:make", ("pkg.mod", "make")),
        ("net.py", ("net.py", "")),
        ("C:\\models\\net.py", ("C:\\models\\net.py", "")),
        ("C:\\models\\net.py:Net", ("C:\\models\\net.py", "Net")),
    ],
)
def test_a_colon_inside_a_windows_path_is_not_the_name_separator(spec, parts):
    assert _models._split_spec(spec) == parts


def test_file_spec_instantiates_the_class_and_finds_example_input(model_file):
    loaded = _models.load_model(f"{model_file}:Net")
    assert type(loaded.model).__name__ == "Net"
    inputs = _models.build_inputs(loaded, [], None)
    assert [tuple(a.shape) for a in inputs.args] == [(2, 8)]


def test_file_spec_calls_a_factory(model_file):
    loaded = _models.load_model(f"{model_file}:make_net")
    assert type(loaded.model).__name__ == "Net"


def test_file_spec_without_name_needs_one_when_the_file_has_several_models(model_file):
    with pytest.raises(SpecError, match="Helper, Net"):
        _models.load_model(str(model_file))


def test_file_spec_without_name_takes_the_only_model_class(tmp_path):
    path = tmp_path / "single.py"
    path.write_text("from torch import nn\nclass Only(nn.Module):\n    def forward(self, x):\n        return x * 2\n")
    assert type(_models.load_model(str(path)).model).__name__ == "Only"


def test_file_can_import_its_siblings(tmp_path):
    (tmp_path / "blocks_for_spec_test.py").write_text("from torch import nn\nBlock = nn.Linear\n")
    (tmp_path / "main_model.py").write_text(
        "from torch import nn\nfrom blocks_for_spec_test import Block\n"
        "class M(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.b = Block(2, 2)\n"
    )
    try:
        assert type(_models.load_model(f"{tmp_path / 'main_model.py'}:M").model.b).__name__ == "Linear"
        assert str(tmp_path) not in sys.path
    finally:
        sys.modules.pop("blocks_for_spec_test", None)


def test_missing_file_is_a_spec_error_naming_it(tmp_path):
    with pytest.raises(SpecError, match="model file not found: .*nothere.py"):
        _models.load_model(f"{tmp_path / 'nothere.py'}:Net")


def test_unknown_name_suggests_the_close_one(model_file):
    with pytest.raises(SpecError, match="did you mean 'Net'"):
        _models.load_model(f"{model_file}:Nett")


def test_a_non_callable_name_is_a_spec_error(model_file):
    with pytest.raises(SpecError, match="not a model class"):
        _models.load_model(f"{model_file}:NOT_A_MODEL")


def test_a_failing_constructor_is_a_model_error_naming_spec_and_line(model_file):
    with pytest.raises(
        ModelError, match=r"building .*:broken failed: ValueError: cannot build this one \(.*mymodels.py:\d+\)"
    ):
        _models.load_model(f"{model_file}:broken")


def test_a_file_that_fails_to_import_is_a_model_error(tmp_path):
    path = tmp_path / "crashes.py"
    path.write_text("x = 1 / 0\n")
    with pytest.raises(ModelError, match=r"importing .*crashes.py failed: ZeroDivisionError"):
        _models.load_model(f"{path}:X")


def test_module_spec_and_missing_module():
    loaded = _models.load_model("torchatlas._example:CoolCNN")
    assert type(loaded.model).__name__ == "CoolCNN"
    assert loaded.example_input is not None
    with pytest.raises(SpecError, match="no module named 'no_such_package_xyz'"):
        _models.load_model("no_such_package_xyz.models:Net")


def test_set_applies_only_to_hf_specs(model_file):
    with pytest.raises(SpecError, match="hf: specs only"):
        _models.load_model(f"{model_file}:Net", overrides={"hidden_size": 4})


def test_device_meta_moves_file_models(model_file):
    loaded = _models.load_model(f"{model_file}:Net", device="meta")
    assert loaded.model.fc.weight.is_meta
    inputs = _models.build_inputs(loaded, [InputSpec((3, 8))], None, "meta")
    assert inputs.args[0].is_meta and inputs.args[0].shape == (3, 8)


# -- inputs ------------------------------------------------------------------------------


def test_integer_inputs_stay_below_the_vocabulary():
    model = torch.nn.Embedding(7, 2)
    model.config = type("Config", (), {"vocab_size": 7})()
    loaded = _models.LoadedModel(model, "emb")
    inputs = _models.build_inputs(loaded, [InputSpec((4, 50), torch.int64)], (2, 50))
    assert int(inputs.args[0].max()) < 7 and int(inputs.kwargs["input_ids"].max()) < 7
    assert inputs.kwargs["input_ids"].shape == (2, 50) and inputs.kwargs["input_ids"].dtype == torch.int64


def test_tokens_need_a_vocabulary(model_file):
    loaded = _models.load_model(f"{model_file}:Net")
    with pytest.raises(SpecError, match="--tokens needs a model with config.vocab_size"):
        _models.build_inputs(loaded, [], (1, 4))


def test_no_inputs_and_no_example_input_is_a_spec_error():
    loaded = _models.LoadedModel(torch.nn.Linear(2, 2), "lin")
    with pytest.raises(SpecError, match="lin has no example_input"):
        _models.build_inputs(loaded, [], None)


def test_example_input_dict_becomes_keyword_arguments():
    loaded = _models.LoadedModel(torch.nn.Identity(), "id", example_input=lambda: {"input": torch.ones(2)})
    inputs = _models.build_inputs(loaded, [], None)
    assert inputs.args == () and list(inputs.kwargs) == ["input"]


def test_signature_check_names_the_inputs():
    inputs = _models.Inputs((torch.ones(1, 2), torch.ones(3)))
    with pytest.raises(ModelError, match=r"lin cannot take args\[0\] float32\[1,2\], args\[1\] float32\[3\]"):
        _models.check_signature(torch.nn.Linear(2, 2), inputs, "lin")


# -- hf: specs ---------------------------------------------------------------------------

TINY_LLAMA = {
    "num_hidden_layers": 1,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "vocab_size": 100,
}


def test_hf_spec_builds_from_config_with_overrides_and_task():
    pytest.importorskip("transformers")
    loaded = _models.load_model("hf:llama/causal-lm", overrides=TINY_LLAMA, device="meta")
    assert type(loaded.model).__name__ == "LlamaForCausalLM"
    assert loaded.model.config.hidden_size == 32 and loaded.model.config.num_hidden_layers == 1
    assert next(loaded.model.parameters()).is_meta


def test_hf_spec_errors_name_the_problem():
    pytest.importorskip("transformers")
    with pytest.raises(SpecError, match="no model type 'lama'.*llama"):
        _models.load_model("hf:lama")
    with pytest.raises(SpecError, match="did you mean 'hidden_size'"):
        _models.load_model("hf:llama", overrides={"hiden_size": 4})
    with pytest.raises(SpecError, match="unknown task 'nonsense'"):
        _models.load_model("hf:llama/nonsense")
    with pytest.raises(SpecError, match="--task says 'masked-lm'"):
        _models.load_model("hf:llama/causal-lm", task="masked-lm")


def test_hf_attn_implementation_is_accepted_though_configs_have_no_such_attribute():
    pytest.importorskip("transformers")
    loaded = _models.load_model("hf:llama", overrides={**TINY_LLAMA, "attn_implementation": "eager"}, device="meta")
    assert loaded.model.config._attn_implementation == "eager"
