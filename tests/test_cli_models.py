"""The command line on every kind of model it offers: each ``hf:`` task family, encoder-decoder
and speech inputs, module specs from the current folder, fast builds, --find-nan, and output
on streams that only take ASCII."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from _cli_helpers import error_lines, run_cli

import torchatlas
from torchatlas._cli import EXIT_MODEL_FAILED, EXIT_NONFINITE, EXIT_USAGE, _hf, _models
from torchatlas._cli import _main as _cli
from torchatlas._cli._spec import HF_TASKS
from torchatlas._render import _html

transformers = pytest.importorskip("transformers")


def sets(**values: object) -> list[str]:
    return [arg for key, value in values.items() for arg in ("--set", f"{key}={value}")]


TINY_DECODER = sets(num_hidden_layers=1, hidden_size=64, intermediate_size=128, num_attention_heads=4, vocab_size=1000)
TINY_LLAMA = [*TINY_DECODER, *sets(num_key_value_heads=4)]
TINY_T5 = sets(num_layers=1, num_decoder_layers=1, d_model=64, d_ff=128, num_heads=4, d_kv=16, vocab_size=1000)
TINY_BART = sets(
    encoder_layers=1, decoder_layers=1, d_model=64, encoder_ffn_dim=128, decoder_ffn_dim=128,
    encoder_attention_heads=4, decoder_attention_heads=4, vocab_size=1000,
)  # fmt: skip
TINY_WHISPER = sets(
    encoder_layers=1, decoder_layers=1, d_model=64, encoder_ffn_dim=128, decoder_ffn_dim=128,
    encoder_attention_heads=4, decoder_attention_heads=4, num_mel_bins=16, max_source_positions=32,
)  # fmt: skip
TINY_VIT = sets(num_hidden_layers=1, hidden_size=64, intermediate_size=128, num_attention_heads=4, image_size=32, patch_size=8)
TINY_MAMBA = sets(num_hidden_layers=1, hidden_size=64, state_size=8, vocab_size=1000)

# (task, spec, arguments, the root line of the tree: class, inputs -> outputs)
TASK_FAMILIES = [
    ("base", "hf:bart", [*TINY_BART, "--tokens", "1,8"], "BartModel  (1x8 int64, 1x8 int64) -> (1x8x64, 1x8x64)"),
    ("causal-lm", "hf:llama/causal-lm", [*TINY_LLAMA, "--tokens", "1,8"], "LlamaForCausalLM  1x8 int64 -> 1x8x1000"),
    ("masked-lm", "hf:bert/masked-lm", [*TINY_DECODER, "--tokens", "1,8"], "BertForMaskedLM  1x8 int64 -> 1x8x1000"),
    ("seq2seq-lm", "hf:t5/seq2seq-lm", [*TINY_T5, "--tokens", "1,8"], "T5ForConditionalGeneration  (1x8 int64, 1x8 int64) -> (1x8x1000, 1x8x64)"),
    ("speech-seq2seq", "hf:whisper/speech-seq2seq", TINY_WHISPER, "WhisperForConditionalGeneration  (1x16x64, 1x16 int64) -> (1x16x51865, 1x32x64)"),
    ("image-classification", "hf:vit/image-classification", TINY_VIT, "ViTForImageClassification  1x3x32x32 -> 1x2"),
    ("sequence-classification", "hf:bert/sequence-classification", [*TINY_DECODER, "--tokens", "1,8"], "BertForSequenceClassification  1x8 int64 -> 1x2"),
    ("token-classification", "hf:bert/token-classification", [*TINY_DECODER, "--tokens", "1,8"], "BertForTokenClassification  1x8 int64 -> 1x8x2"),
    ("question-answering", "hf:bert/question-answering", [*TINY_DECODER, "--tokens", "1,8"], "BertForQuestionAnswering  1x8 int64 -> (1x8, 1x8)"),
    ("causal-lm", "hf:mamba/causal-lm", [*TINY_MAMBA, "--tokens", "1,8"], "MambaForCausalLM  1x8 int64 -> 1x8x1000"),
]  # fmt: skip


def test_every_task_in_help_has_a_cli_test():
    assert {task for task, *_ in TASK_FAMILIES} == set(HF_TASKS)
    parser_help = re.sub(r"-\s+", "-", _cli.build_parser().format_help())  # undo wrapping at hyphens
    assert all(task in parser_help for task in HF_TASKS)


@pytest.mark.slow
@pytest.mark.parametrize(("task", "spec", "args", "root"), TASK_FAMILIES, ids=[t[1] for t in TASK_FAMILIES])
def test_each_task_family_traces_from_the_command_line(capsys, task, spec, args, root):
    code, out, err = run_cli(capsys, spec, *args, "--ascii", "--depth", "1")
    assert code == 0, err
    assert out.splitlines()[0] == root


def test_the_full_size_encoder_decoders_trace_on_meta(capsys):
    for spec, args in (("hf:t5", ["--tokens", "1,16"]), ("hf:whisper", [])):
        code, out, err = run_cli(capsys, spec, *args, "--device", "meta", "--ascii", "--depth", "1")
        assert code == 0, err
        assert "decoder" in out


def test_decoder_inputs_start_with_the_decoder_start_token_and_follow_decoder_tokens():
    t5 = _models.load_model("hf:t5", overrides=_overrides(TINY_T5))
    inputs = _models.build_inputs(t5, [], (2, 8), decoder_tokens=(2, 5))
    assert inputs.kwargs["input_ids"].shape == (2, 8)
    decoder = inputs.kwargs["decoder_input_ids"]
    assert decoder.shape == (2, 5) and (decoder[:, 0] == 0).all()  # T5 starts its decoder with the pad token
    whisper = _models.load_model("hf:whisper", overrides=_overrides(TINY_WHISPER))
    inputs = _models.build_inputs(whisper, [], None)
    config = whisper.model.config
    assert inputs.kwargs["input_features"].shape == (1, config.num_mel_bins, 2 * config.max_source_positions)
    assert (inputs.kwargs["decoder_input_ids"][:, 0] == config.decoder_start_token_id).all()


def test_decoder_tokens_on_a_decoder_only_model_is_a_usage_error(capsys):
    code, _, err = run_cli(capsys, "hf:llama", *TINY_LLAMA, "--tokens", "1,8", "--decoder-tokens", "1,4")
    assert code == EXIT_USAGE and len(error_lines(err)) == 1 and "--decoder-tokens" in err


def test_a_text_and_image_model_gets_both_and_nested_config_fields_can_be_set(capsys):
    tiny = sets(**{
        f"{part}_config.{key}": value
        for part in ("text", "vision")
        for key, value in (("num_hidden_layers", 1), ("hidden_size", 32), ("intermediate_size", 64), ("num_attention_heads", 4))
    }, **{"vision_config.image_size": 32, "vision_config.patch_size": 8, "projection_dim": 16})  # fmt: skip
    code, out, err = run_cli(capsys, "hf:clip", *tiny, "--tokens", "1,8", "--ascii", "--depth", "1")
    assert code == 0, err
    assert out.splitlines()[0].startswith("CLIPModel  (1x8 int64, 1x3x32x32) -> ")
    code, _, err = run_cli(capsys, "hf:clip", "--set", "vision_config.num_hiden_layers=1", "--tokens", "1,8")
    assert code == EXIT_USAGE
    assert error_lines(err) == [
        "torchatlas: error: --set vision_config.num_hiden_layers: the clip config has no such field; "
        "did you mean 'vision_config.num_hidden_layers'?"
    ]


def _overrides(args: list[str]) -> dict[str, object]:
    return _models.parse_overrides(args[1::2])


# -- building --------------------------------------------------------------------


def test_a_missing_tokens_option_is_reported_before_the_model_is_built(capsys, monkeypatch):
    built = []
    monkeypatch.setattr(_hf, "_build_structure", lambda *a: built.append(a))
    code, _, err = run_cli(capsys, "hf:llama")
    assert code == EXIT_USAGE and built == []
    assert error_lines(err) == ["torchatlas: error: hf:llama reads token ids: add --tokens BATCH,SEQ (e.g. --tokens 1,16) or --input B,S:int64"]


def test_the_build_says_what_it_builds_with_its_parameter_count():
    shown: list[str] = []

    def status(text: str):
        shown.append(text)
        return torch.no_grad()  # any context manager

    loaded = _models.load_model("hf:llama/causal-lm", overrides=_overrides(TINY_LLAMA), has_inputs=True, status=status)
    count = sum(p.numel() for p in loaded.model.parameters())
    assert f"building hf:llama/causal-lm ({count / 1e3:.1f}K params)…" in shown


def test_a_build_bigger_than_free_memory_is_warned_about_first(capsys, monkeypatch):
    monkeypatch.setattr(_hf, "available_memory", lambda device: 1000)
    code, _, err = run_cli(capsys, "hf:llama", *TINY_LLAMA, "--tokens", "1,8", "--format", "json")
    assert code == 0
    (warning,) = [line for line in err.splitlines() if "warning" in line]
    assert "more than the 0.98 KiB this machine has free" in warning and "--device meta" in warning


def test_a_build_without_init_has_real_buffers_tied_weights_and_finite_random_parameters():
    overrides = {**_overrides(TINY_LLAMA), "tie_word_embeddings": True}
    fast = _models.load_model("hf:llama/causal-lm", overrides=overrides).model
    config = transformers.AutoConfig.for_model("llama", **overrides)
    slow = transformers.AutoModelForCausalLM.from_config(config)
    assert fast.lm_head.weight is fast.model.embed_tokens.weight
    assert dict(slow.named_buffers()).keys() == dict(fast.named_buffers()).keys()
    for name, buffer in slow.named_buffers():
        assert torch.equal(buffer, dict(fast.named_buffers())[name]), name
    assert [(n, p.shape) for n, p in slow.named_parameters()] == [(n, p.shape) for n, p in fast.named_parameters()]
    for name, param in fast.named_parameters():
        assert param.device.type == "cpu" and torch.isfinite(param).all(), name
    weight = fast.model.layers[0].mlp.up_proj.weight
    assert 0.01 < weight.std().item() < 0.03 and weight.unique().numel() > 1000
    assert torch.isfinite(fast(torch.randint(0, 1000, (1, 8))).logits).all()


# -- specs -----------------------------------------------------------------------


def test_a_module_spec_is_found_in_the_current_folder_as_with_python_m(capsys, tmp_path, monkeypatch):
    package = tmp_path / "mypkg_cli_test"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "models.py").write_text(
        "import torch\n\ndef build_net():\n    return torch.nn.Linear(3, 2)\n\ndef example_input():\n    return torch.ones(1, 3)\n"
    )
    monkeypatch.chdir(tmp_path)
    path_before = list(sys.path)
    code, out, err = run_cli(capsys, "mypkg_cli_test.models:build_net", "--ascii")
    assert code == 0, err
    assert out.startswith("Linear  1x3 -> 1x2") and sys.path == path_before
    script = Path(sys.executable).parent / "torchatlas"
    if script.exists():  # the installed command's sys.path[0] is its bin folder, not the current one
        done = subprocess.run([str(script), "mypkg_cli_test.models:build_net", "--ascii"], cwd=tmp_path, capture_output=True, text=True)
        assert done.returncode == 0 and done.stdout.startswith("Linear"), done.stderr


# -- output ----------------------------------------------------------------------


def test_out_dir_without_the_viewer_bundle_writes_the_rest_and_names_what_it_could_not(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(_html, "BUNDLE_DIR", tmp_path / "no-bundle")
    code, _, err = run_cli(capsys, "--out-dir", str(tmp_path / "out"))
    assert code == 0
    written = {p.name for p in (tmp_path / "out").iterdir()}
    assert {"tree.txt", "graph.json", "summary.txt", "graph.dot", "model_explorer.json"} <= written
    assert "graph.html" not in written
    (note,) = [line for line in err.splitlines() if "not written" in line]
    assert "graph.html" in note and "npm ci && npm run build" in note
    code, _, err = run_cli(capsys, "-o", str(tmp_path / "page.html"))
    assert code == EXIT_MODEL_FAILED and len(error_lines(err)) == 1 and "npm run build" in err


def test_a_view_flag_a_format_cannot_honour_is_refused_alone_and_left_to_the_others_in_out_dir(capsys, tmp_path):
    code, _, err = run_cli(capsys, "-f", "model-explorer", "--depth", "1")
    assert code != 0 and error_lines(err) == [next(line for line in err.splitlines() if "cannot honour depth=1" in line)]
    code, _, err = run_cli(capsys, "--out-dir", str(tmp_path / "out"), "--depth", "1")
    assert code == 0 and "cannot honour" not in err
    doc = json.loads((tmp_path / "out" / "model_explorer.json").read_text())
    assert "initial_conv" in {n["namespace"] for n in doc["graphs"][0]["nodes"]}
    assert "conv2d" not in (tmp_path / "out" / "tree.txt").read_text()  # --depth 1 still reaches the tree


def test_out_dir_goes_on_past_a_failing_format_and_fails_at_the_end(capsys, tmp_path, monkeypatch):
    view = torchatlas.Graph.view

    def broken_summary(self, fmt, *args, **kwargs):
        if fmt == "summary":
            raise RuntimeError("summary broke")
        return view(self, fmt, *args, **kwargs)

    monkeypatch.setattr(torchatlas.Graph, "view", broken_summary)
    code, _, err = run_cli(capsys, "--out-dir", str(tmp_path))
    assert code == EXIT_MODEL_FAILED and "Traceback" not in err
    assert (tmp_path / "graph.json").is_file() and (tmp_path / "graph.html").is_file()
    assert "summary.txt (RuntimeError: summary broke)" in err


@pytest.mark.parametrize("argv", [["--format", "summary"], ["--format", "dot"], ["--format", "tree"], ["diff"]])
def test_ascii_only_stdout_gets_every_format_without_a_traceback(tmp_path, argv):
    env = {**os.environ, "PYTHONIOENCODING": "ascii", "LANG": "C", "LC_ALL": "C"}
    if argv == ["diff"]:
        before, after = tmp_path / "a.json", tmp_path / "b.json"
        torchatlas.trace(torch.nn.Linear(3, 4), torch.ones(2, 3)).save(before)
        torchatlas.trace(torch.nn.Linear(3, 5), torch.ones(2, 3)).save(after)
        argv = ["diff", str(before), str(after)]
    done = subprocess.run([sys.executable, "-m", "torchatlas", *argv], env=env, capture_output=True, cwd=tmp_path)
    assert done.returncode == (1 if argv[0] == "diff" else 0) and b"Traceback" not in done.stderr, done.stderr.decode(errors="replace")
    text = done.stdout.decode("ascii")
    assert ("2x4 -> 2x5" in text) if argv[0] == "diff" else ("1x3x32x32" in text)


def test_find_nan_names_the_first_nonfinite_op_its_module_line_and_inputs(capsys, tmp_path):
    model = tmp_path / "nan_model.py"
    model.write_text(textwrap.dedent("""
        import torch
        from torch import nn

        class Norm(nn.Module):
            def forward(self, x):
                return x / x.sum(dim=-1, keepdim=True).clamp(max=0)

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(4, 4)
                self.norm = Norm()

            def forward(self, x):
                return self.norm(torch.relu(self.fc(x))).exp()

        def example_input():
            return torch.ones(2, 4)
    """))
    code, out, err = run_cli(capsys, f"{model}:Net", "--find-nan")
    assert code == EXIT_NONFINITE, err  # found one: a script or CI job can stop on it
    (line,) = out.splitlines()
    assert line.startswith("first NaN/Inf: torch.Tensor.__truediv__ in norm (Norm) at ")
    assert "nan_model.py:7; output " in line
    assert re.search(r"inputs: torch\.relu min=\S+ max=\S+ mean=\S+; torch\.Tensor\.clamp min=0 max=0 mean=0$", line)
    code, out, _ = run_cli(capsys, "--find-nan")
    assert code == 0 and out == "no NaN or Inf in any op's output\n"
    code, out, err = run_cli(capsys, f"{model}:Net", "--find-nan", "--format", "json")
    assert json.loads(out)["format"] == "torchatlas-graph" and "first NaN/Inf" in err and code == EXIT_NONFINITE
    code, out, err = run_cli(capsys, f"{model}:Net", "--find-nan", "--device", "meta")
    assert code == EXIT_USAGE and not out  # nothing searched is no pass
    assert err == "torchatlas: error: --find-nan has no values to search: the graph was traced on meta, or saved without stats\n"
    code, _, err = run_cli(capsys, f"{model}:Net", "--profile", "--level", "aten")
    assert code == EXIT_USAGE and "--profile times Python-level ops" in err


def test_help_does_not_import_torch():
    probe = "import sys\nfrom torchatlas._cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\nprint('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip().endswith("False"), done.stderr


def test_diff_names_the_modules_when_only_the_class_module_differs():
    def net(module: str) -> torch.nn.Module:
        cls = type("CoolNet", (torch.nn.Linear,), {"__module__": module})
        return cls(3, 4)

    a = torchatlas.trace(net("first.models"), torch.ones(1, 3))
    b = torchatlas.trace(net("second.models"), torch.ones(1, 3))
    assert "class first.models.CoolNet → second.models.CoolNet" in str(torchatlas.diff(a, b))


def test_show_on_a_machine_without_a_browser_says_where_the_page_is(capsys, monkeypatch):
    pytest.importorskip("webbrowser")
    if not (_html.BUNDLE_DIR / "viewer.js").is_file():
        pytest.skip("viewer bundle not built")
    monkeypatch.setattr("webbrowser.open", lambda url: False)
    path = torchatlas.trace(torch.nn.Linear(2, 2), torch.ones(1, 2)).show()
    assert path.is_file() and f"the viewer page is {path}" in capsys.readouterr().err


def test_the_example_file_is_the_bundled_example(capsys):
    """examples/coolcnn.py writes the model out for readers; it must stay the one `torchatlas` traces."""
    example = Path(__file__).resolve().parent.parent / "examples" / "coolcnn.py"
    code, from_file, err = run_cli(capsys, f"{example}:CoolCNN", "--format", "json")
    assert code == 0, err
    code, bundled, _ = run_cli(capsys, "--format", "json")

    def structure(doc: str) -> list[object]:
        parsed = json.loads(doc)
        scopes = [(s["path"], s["class"].rsplit(".", 1)[-1]) for s in parsed["scopes"]]
        return [scopes, [(n["kind"], n.get("target"), n["inputs"], n.get("outputs")) for n in parsed["nodes"]]]

    assert structure(from_file) == structure(bundled)


def test_encoder_and_decoder_tokens_of_two_batch_sizes_are_a_usage_error(capsys):
    code, _, err = run_cli(capsys, "hf:t5", *TINY_T5, "--tokens", "1,8", "--decoder-tokens", "2,4")
    assert code == EXIT_USAGE and error_lines(err) == [
        "torchatlas: error: --tokens and --decoder-tokens must have one batch size, not 1 and 2"
    ]
