"""torchatlas.compare: known answers (a model against itself, a nudged weight, bf16 autocast,
export, reordered branches) and a property: perturb one op of a random model, compare names it."""

from __future__ import annotations

import copy
import hashlib
import json

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.overrides import TorchFunctionMode

import torchatlas


class Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2, self.fc3 = torch.nn.Linear(6, 16), torch.nn.Linear(16, 16), torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc3(torch.tanh(self.fc2(torch.tanh(self.fc1(x)))))


class Branches(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.left, self.right, self.out = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8), torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.left(x)) * torch.sigmoid(self.right(x)))


class BranchesReordered(Branches):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = torch.sigmoid(self.right(x))  # the right branch first
        return self.out(torch.relu(self.left(x)) * gate)


def _mlp() -> tuple[Mlp, torch.Tensor]:
    torch.manual_seed(0)
    return Mlp().eval(), torch.randn(5, 6)


def test_a_model_against_itself_has_no_divergence() -> None:
    model, x = _mlp()
    c = torchatlas.compare((model, (x,)), (model, (x,)))
    assert not c.diverged and c.first_divergence is None
    assert {op.status for op in c.runs[0].ops.values()} == {"equal"}
    assert not c.runs[0].unmatched
    assert "no op past the tolerance" in str(c)


def test_a_nudged_weight_diverges_at_its_linear_and_everything_after_inherits() -> None:
    model, x = _mlp()
    nudged = copy.deepcopy(model)
    with torch.no_grad():
        nudged.fc2.weight[3] += 0.05
    c = torchatlas.compare((model, (x,)), (nudged, (x,)))
    first = c.first_divergence
    assert first is not None and c.graph.ir.scope(first.scope).path == "fc2"
    ops = list(c.runs[0].ops.values())
    at = [op.node for op in ops].index(first.id)
    assert [op.status for op in ops[:at]] == ["equal"] * at  # fc1 and its tanh
    assert all(op.status == "inherits" and op.origin == first.id for op in ops[at + 1:])
    assert "inherits a difference from fc2 (linear)" in c.explain(ops[-1].node)
    assert c.diverged
    tree = c.tree(ascii=False)
    assert "fc2 (Linear)  5×16 → 5×16  [error " in tree and tree.count("✗ diverges here") == 1
    assert next(line for line in tree.splitlines() if "fc2 (Linear)" in line).endswith("✗ diverges here]")
    assert "inherits from fc2]" in next(line for line in tree.splitlines() if "fc3 (Linear)" in line)
    assert "error" in c.summary(format="text").splitlines()[0]
    # the errors are the eager ones: the sample holds every element of these small outputs
    with torch.no_grad():
        expected = (nudged(x) - model(x)).abs().max().item()
    assert ops[-1].errors.max_abs == pytest.approx(expected, rel=1e-6)


def test_three_runs_each_against_the_first() -> None:
    model, x = _mlp()
    late = copy.deepcopy(model)
    with torch.no_grad():
        late.fc3.bias[0] += 1.0
    c = torchatlas.compare((model, (x,)), (model, (x,)), (late, (x,)), labels=["ref", "same", "late"])
    assert [r.first_divergence for r in c.runs][0] is None
    assert c.graph.ir.scope(c.graph.ir.node(c.runs[1].first_divergence).scope).path == "fc3"
    assert set(c.graph.ir.meta["overlays"]) == {"error: same", "error: late", "divergence"}


def test_fp32_against_bf16_autocast_llama_diverges_first_at_an_op_run_in_bf16() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    ids = torch.randint(0, 128, (1, 16))
    with torch.no_grad():
        fp32 = torchatlas.trace(model, (ids,), fingerprint=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            bf16 = torchatlas.trace(model, (ids,), fingerprint=True)
    c = torchatlas.compare(fp32, bf16, rtol=1e-2, atol=1e-4, labels=["fp32", "bf16"])
    first = c.first_divergence
    assert first is not None
    partner = bf16.ir.node(c.runs[0].ops[first.id].other)
    assert partner.outputs[0].dtype == "bfloat16"
    assert first.outputs[0].dtype == "float32"
    # everything before it is within the tolerance, nothing was left unmatched
    before = [op for op in c.runs[0].ops.values() if int(op.node[1:]) < int(first.id[1:])]
    assert before and all(op.status in ("equal", "within") for op in before)
    assert not c.runs[0].unmatched
    assert "q_proj (Linear)" in next(line for line in c.tree(ascii=False).splitlines() if "✗ diverges here" in line)


def test_eager_against_its_export_is_equal() -> None:
    torch.manual_seed(0)
    model, x = Branches().eval(), torch.randn(3, 8)
    exported = torch.export.export(model, (x,)).module()
    c = torchatlas.compare((model, (x,)), (exported, (x,)))
    assert not c.diverged and not c.runs[0].unmatched, str(c)


def test_reordered_independent_branches_are_equal() -> None:
    torch.manual_seed(0)
    model, x = Branches().eval(), torch.randn(3, 8)
    reordered = BranchesReordered()
    reordered.load_state_dict(model.state_dict())
    c = torchatlas.compare((model, (x,)), (reordered, (x,)))
    assert not c.diverged and not c.runs[0].unmatched, str(c)
    assert all(op.status == "equal" for op in c.runs[0].ops.values())


def test_an_extra_op_in_one_run_is_listed_unmatched_with_a_reason_and_read_through() -> None:
    class Scaled(Mlp):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc3(torch.tanh(self.fc2(torch.tanh(self.fc1(x)) * 1.5)))

    model, x = _mlp()
    scaled = Scaled()
    scaled.load_state_dict(model.state_dict())
    c = torchatlas.compare((model, (x,)), (scaled, (x,)))
    assert [u.run for u in c.runs[0].unmatched] == [1]
    assert c.runs[0].unmatched[0].reason
    assert c.graph.ir.scope(c.first_divergence.scope).path == "fc2"


def test_keep_full_measures_the_path_to_the_divergence_whole() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64)).eval()
    x = torch.randn(32, 64)  # 2,048 elements per output: more than the sample
    nudged = copy.deepcopy(model)
    with torch.no_grad():
        nudged[2].weight[5, 7] += 1e-3
    sampled = torchatlas.compare((model, (x,)), (nudged, (x,)))
    whole = torchatlas.compare((model, (x,)), (nudged, (x,)), keep="full")
    with torch.no_grad():
        expected = (nudged(x) - model(x)).abs().max().item()
    first = whole.first_divergence
    assert first is not None and first.id == sampled.first_divergence.id
    assert whole.runs[0].ops[first.id].errors.max_abs == pytest.approx(expected, rel=1e-5)
    assert len(whole.graph.ir.node(first.id).meta["fingerprint"][0]["sample"]) == 2048
    none = torchatlas.compare((model, (x,)), (nudged, (x,)), keep="full", budget=0)
    assert len(none.graph.ir.node(first.id).meta["fingerprint"][0]["sample"]) == 1024


def test_a_metric_function_and_the_overlay_travel_with_the_graph(tmp_path) -> None:
    model, x = _mlp()
    nudged = copy.deepcopy(model)
    with torch.no_grad():
        nudged.fc1.bias += 0.1
    c = torchatlas.compare((model, (x,)), (nudged, (x,)), metric=lambda a, b: (a - b).abs().mean())
    assert all(op.errors.metric is not None for op in c.runs[0].ops.values())
    path = c.graph.save(tmp_path / "cmp.json")
    loaded = torchatlas.load(path)
    assert loaded.ir.meta["overlays"] == json.loads(json.dumps(c.graph.ir.meta["overlays"]))
    assert json.loads(json.dumps(c.to_dict()))["diverged"] is True


def test_bad_runs_are_refused_in_one_line() -> None:
    model, x = _mlp()
    with pytest.raises(ValueError, match="two runs or more"):
        torchatlas.compare((model, (x,)))
    with pytest.raises(ValueError, match="without fingerprints"):
        torchatlas.compare(torchatlas.trace(model, x), (model, (x,)))
    with pytest.raises(TypeError, match="run 1 must be"):
        torchatlas.compare((model, (x,)), model)
    with pytest.raises(ValueError, match="budget"):
        torchatlas.compare((model, (x,)), (model, (x,)), budget="lots")
    with pytest.raises(ValueError, match="keep='full' runs the models again"):
        g = torchatlas.trace(model, x, fingerprint=True)
        torchatlas.compare(g, g, keep="full")


# -- a property: perturb one op of a random model -------------------------------------------


class _Perturb(TorchFunctionMode):
    """Adds 0.5 to the output of the ``at``-th op that makes a new float tensor, and keeps its hash."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at, self.seen, self.digest = at, 0, None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = getattr(func, "__name__", "")
        fresh = isinstance(out, torch.Tensor) and out.is_floating_point() and not name.endswith("_") and not name.startswith("__i")
        if fresh and not any(isinstance(a, torch.Tensor) and a.untyped_storage().data_ptr() == out.untyped_storage().data_ptr() for a in args):
            if self.seen == self.at:
                out = out + 0.5
                self.digest = hashlib.blake2b(out.detach().contiguous().view(-1).view(torch.uint8).numpy().data, digest_size=8).hexdigest()
            self.seen += 1
        return out


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_perturbing_one_op_of_a_random_model_names_that_op_first(data) -> None:
    from _randmodels import build, programs

    model = build(data.draw(programs()))
    counting = _Perturb(-1)
    with torch.no_grad(), counting:
        model.module(*copy.deepcopy(model.args))  # the model may write into its inputs
    if counting.seen == 0:
        return
    perturb = _Perturb(data.draw(st.integers(0, counting.seen - 1)))
    with torch.no_grad():
        a = torchatlas.trace(model.module, copy.deepcopy(model.args), fingerprint=True)
        with perturb:
            b = torchatlas.trace(model.module, copy.deepcopy(model.args), fingerprint=True)
    perturbed = [n.id for n in b.ir.ops() if (n.meta.get("fingerprint") or [{}])[0].get("hash") == perturb.digest]
    c = torchatlas.compare(a, b)
    assert c.first_divergence is not None, (model.source, str(c))
    assert c.runs[0].ops[c.first_divergence.id].other in perturbed, (model.source, str(c))


def test_fingerprints_leave_the_thread_count_as_it_was_and_read_half_precision_right() -> None:
    from torchatlas._capture._fingerprints import fingerprint

    threads = torch.get_num_threads()
    model, x = _mlp()
    torchatlas.trace(model, x, fingerprint=True)
    assert torch.get_num_threads() == threads
    torch.manual_seed(0)
    for count in (1000, (1 << 20) + 5):  # one thread, then the pool
        values = torch.randn(count).to(torch.bfloat16)
        found = fingerprint(values)
        wide = values.double()
        assert (found["min"], found["max"]) == (wide.min().item(), wide.max().item())
        assert found["mean"] == pytest.approx(wide.mean().item(), abs=1e-5)
        assert found["norm"] == pytest.approx(wide.norm().item(), rel=1e-4)  # float32 sums
        assert torch.get_num_threads() == threads
