"""The fidelity corpus (``bench/corpus``): every model traces with outputs identical to
eager, every module call is on the data path, and where torch.export gives an oracle the
leaf-module data flow agrees with it (``bench/corpus/_oracle.py``). A model whose export
fails has no oracle and must still trace; a disagreement for a reason of export's own
must be named by the harness, never passed silently. The whole corpus is slow; a few
cases run by default.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import fidelity  # noqa: E402
from corpus import CASES  # noqa: E402
from corpus._oracle import Verdict, check  # noqa: E402

FAST = {
    "edge:issue_example", "edge:passthrough_in_tuple", "edge:split_second_output", "edge:max_indices",
    "edge:embedding_max_norm_twice", "edge:buffer_written_then_read", "edge:shape_only_reads",
    "edge:torchscript_function", "edge:compiled_submodule", "hf:bert",
}
# Export fails on these (a plain dataclass output, .data on a parameter, a PackedSequence,
# data-dependent guards and None handling in three encoder-decoders): no oracle, so they
# are held to tracing with identical outputs and every module call on the data path.
NO_ORACLE = {
    "edge:returns_dataclass", "edge:weight_data_write", "edge:lstm_packed_sequence",
    "hf:led", "hf:longt5", "hf:switch_transformers",
}

# Eager (and the trace) runs the fused encoder-layer kernel here, export its unfused path.
NAMED = {
    "edge:transformer_encoder_layer": "export runs the unfused path of what eager ran as torch._transformer_encoder_layer_fwd",
    "edge:sizes_python_read": "export carries the values Python read (item, tolist) into the ops they size as edges",
    "edge:cycles_under_no_grad": "export wraps regions in higher-order ops (wrap_with_set_grad_enabled) whose ops lose",
}


def test_the_corpus_is_as_big_as_promised() -> None:
    assert sum(n.startswith("hf:") for n in CASES) >= 60
    assert sum(n.startswith("edge:") for n in CASES) >= 30


def test_the_whole_corpus_holds_every_transformers_model_type_twice() -> None:
    from corpus import corpus_cases
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    every = corpus_cases()
    for kind in MODEL_MAPPING_NAMES:
        assert f"hf:{kind}" in every and f"hf:{kind}+outputs" in every
    assert set(CASES) <= set(every)
    assert {"timm:hrnet_w18_small", "timm:vitamin_small_224", "diffusers:DiT"} <= set(every)  # the zoo too


class DroppedLast(nn.Module):
    """DeBERTa's embeddings in small: the Dropout's result is stored, returned and read on."""

    def __init__(self) -> None:
        super().__init__()
        self.pre, self.drop, self.post = nn.Linear(2, 2), nn.Dropout(0.1), nn.Linear(2, 2)

    def embed(self, x):
        h = self.pre(x)
        h = self.drop(h)
        return h

    def forward(self, x):
        return self.post(self.embed(x))


@pytest.mark.filterwarnings("ignore")
def test_the_oracle_sees_who_reads_a_pass_through(monkeypatch: pytest.MonkeyPatch) -> None:
    """Export runs with the Dropout cloning: a reader sent to the op before it is caught."""
    from torchatlas._capture._passthrough import PassThroughs

    model = DroppedLast().eval()
    assert check("dropped", model, (torch.randn(1, 2),), {}).status == "agrees"
    monkeypatch.setattr(PassThroughs, "_reads_through", lambda self, *a: False)
    monkeypatch.setattr(PassThroughs, "_reads_before", lambda self, *a: True)
    verdict = check("dropped", model, (torch.randn(1, 2),), {})
    assert verdict.status == "disagrees" and "'drop'" in verdict.detail
    assert isinstance(model.drop, nn.Dropout)  # the clone is swapped back


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=() if n in FAST else pytest.mark.slow) for n in CASES]
)
def test_model_agrees_with_export(name: str) -> None:
    verdict = fidelity.run(name)
    if name in NAMED:
        assert verdict.status == "named" and verdict.detail.startswith(NAMED[name])
        return
    expected = "no-oracle" if name in NO_ORACLE else "agrees"
    assert (verdict.status, verdict.detail if verdict.status != expected else "") == (expected, "")


class Swapped(nn.Module):
    """Reads ``b`` where export would see ``a``: the oracle must say so."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = nn.Linear(2, 2), nn.Linear(2, 2), nn.Linear(2, 2)

    def forward(self, x):
        return self.c(self.a(x)) + self.b(x)


def test_the_oracle_catches_a_wrong_edge(monkeypatch: pytest.MonkeyPatch) -> None:
    import corpus._oracle as oracle

    real = oracle.captured_graph

    def rewired(ir, leaves):  # c's op now reads b's output instead of a's
        nodes, leaf_of, inputs_of = real(ir, leaves)
        node_of = {leaf_of(n): n for n in nodes if leaf_of(n) is not None}
        fake = {node_of[("c", 0)]: [node_of[("b", 0)]]}
        return nodes, leaf_of, lambda n: fake.get(n) or inputs_of(n)

    monkeypatch.setattr(oracle, "captured_graph", rewired)
    verdict = check("swapped", Swapped(), (torch.randn(1, 2),), {})
    assert verdict.status == "disagrees" and "('c', 0)" in verdict.detail


def test_the_score_line_counts_named_and_missing_oracles_apart() -> None:
    line = fidelity.score_line([
        Verdict("a", "agrees"), Verdict("b", "named", "why"), Verdict("c", "no-oracle", "export fails"),
        Verdict("d", "disagrees", "x"),
    ])
    assert line.startswith("fidelity: 1/2 models with an oracle agree with torch.export (50%); 1 disagree for a named")
    assert "1 have no oracle" in line


def test_one_score_line_per_corpus_then_the_total_and_skips_counted_apart(tmp_path: Path, capsys) -> None:
    verdicts = [Verdict("hf:a", "agrees"), Verdict("hf:b", "skipped", "its eager forward refuses"),
                Verdict("edge:c", "disagrees", "x")]
    lines = fidelity.score_lines(verdicts)
    assert [line.split(":")[0] for line in lines] == ["fidelity[edge]", "fidelity[hf]", "fidelity"]
    assert lines[1].startswith("fidelity[hf]: 1/1 models") and "1 skipped" in lines[1]
    saved = tmp_path / "part.jsonl"
    saved.write_text("".join(
        f'{{"name": "{v.name}", "status": "{v.status}", "detail": "{v.detail}"}}\n' for v in verdicts
    ))
    assert fidelity.main(["--tally", str(saved)]) == 1  # edge:c disagrees
    out = capsys.readouterr().out
    assert "disagrees  edge:c: x" in out and out.rstrip().endswith(lines[-1])


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore")
def test_a_flatten_that_export_files_under_its_reader_is_named_not_passed() -> None:
    """timm's MobileNetV3 head: export's decompositions file ``flatten``'s one view under the
    ``classifier`` that reads it. The reference names that; it never calls it agreement."""
    pytest.importorskip("timm")
    from corpus import corpus_cases

    verdict = fidelity.run("timm:mobilenetv3_small_050", corpus_cases())
    assert verdict.status == "named"
    assert verdict.detail.startswith("export files the view op of a call that ran only views (nn.Flatten)")


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore")
def test_leaf_calls_export_files_under_a_module_above_are_named_not_passed() -> None:
    """Reformer's reversible layers (an autograd.Function, run under no_grad: a higher-order op
    too): export's module stacks stop at the layers and the encoder after them, so their leaf
    calls are missing there. Named only because seeing through those
    calls on both sides makes the flows agree; never called agreement."""
    pytest.importorskip("transformers")
    from corpus import corpus_cases

    verdict = fidelity.run("hf:reformer", corpus_cases())
    assert verdict.status == "named"
    assert "export's module stack stops short of leaf calls that ran" in verdict.detail.split(" (leaf calls")[0]


def test_shrunk_latent_attention_and_dual_encoders_run_after_repair():
    """DeepSeek-V3's latent-attention sizes are made consistent with the shrunk width, and a
    dual encoder gets its text and image together: both used to be skipped as refusing inputs."""
    from corpus.hf_all import hf_builder

    _, _, deepseek = hf_builder("deepseek_v3", outputs=False)()
    _, _, align = hf_builder("align", outputs=False)()
    assert "input_ids" in deepseek
    assert {"input_ids", "pixel_values"} <= set(align)


def test_forecasters_routers_and_language_adapters_run_with_the_corpus_inputs():
    """A forecaster gets past values as long as its context plus the lags it reads back, with
    the time features it trains on; a router of the shrunk experts picks from one group
    (DeepSeek-V2's default config even picks None experts); ESM gets a padding id and X-MOD a
    language. All of them used to be skipped as refusing the corpus's inputs."""
    from corpus.hf_all import hf_builder

    _, _, informer = hf_builder("informer", outputs=False)()
    _, _, patchtst = hf_builder("patchtst", outputs=False)()
    router, _, _ = hf_builder("deepseek_v2", outputs=False)()
    esm, _, _ = hf_builder("esm", outputs=False)()
    _, _, xmod = hf_builder("xmod", outputs=False)()
    assert informer["past_values"].shape == (1, 16 + 7)  # its context, and lags back to 7 steps
    assert informer["future_values"].shape == (1, 4)
    assert informer["past_time_features"].shape[:2] == informer["past_values"].shape
    assert patchtst["past_values"].shape == (1, 32, 1)
    assert router.config.num_experts_per_tok == 2 and router.config.n_group in (None, 1)
    assert esm.config.pad_token_id == 1
    assert xmod["lang_ids"].tolist() == [0]


def test_hybrid_widths_rotary_sections_and_detector_queries_are_made_consistent():
    """Zamba's shared attention is twice the shrunk width, GLM-4V-MoE's rotary sections add up
    to half of the half of each head it rotates, RT-DETR picks fewer queries than a small image
    has anchors, and BLIP-2's Q-Former attends to the shrunk vision tower, its queries in the
    places its prompt holds for them: each of these types used to be skipped."""
    from corpus.hf_all import hf_builder

    zamba, _, _ = hf_builder("zamba", outputs=False)()
    glm, _, _ = hf_builder("glm4v_moe_text", outputs=False)()
    detector, _, _ = hf_builder("rt_detr", outputs=False)()
    blip, _, prompt = hf_builder("blip-2", outputs=False)()
    assert zamba.config.attention_hidden_size == 2 * zamba.config.hidden_size
    assert blip.config.qformer_config.encoder_hidden_size == blip.config.vision_config.hidden_size
    assert (prompt["input_ids"] == blip.config.image_token_id).sum() == blip.config.num_query_tokens
    assert sum(glm.config.rope_parameters["mrope_section"]) == 4  # 16-wide heads, half rotated
    assert detector.config.num_queries == 8


def test_a_config_that_validates_its_layers_is_rebuilt_from_the_shrunk_sizes():
    """Gemma 4 checks its layer types and key-value sharing as its config is made, so setting
    the shrunk sizes on the default config fails: the config is made anew from them, with one
    layer of each type."""
    from corpus.hf_all import hf_builder

    gemma, _, inputs = hf_builder("gemma4_text", outputs=False)()
    assert gemma.config.num_hidden_layers == 2 and gemma.config.hidden_size == 64
    assert sorted(gemma.config.layer_types) == ["full_attention", "sliding_attention"]
    assert gemma.config.num_kv_shared_layers == 0 and "input_ids" in inputs
