"""Forward and backward at the ATen level, tied together, and the activations autograd saves."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import torch
from _capture_helpers import load_coolcnn, wiring
from _fx_compare import make_fx_wiring
from torch import nn

import torchatlas
from torchatlas._capture import TraceError, capture
from torchatlas._capture._backward import default_loss
from torchatlas._ir import GraphIR
from torchatlas._render._html import viewer_document


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def backward(model, *args, loss_fn=None) -> GraphIR:
    return capture(model, args, {}, level="backward", loss_fn=loss_fn).ir


def reference(model: nn.Module, x: torch.Tensor, ir: GraphIR):
    """make_fx of forward, the default loss and ``torch.autograd.grad`` over the parameters."""
    params = [p for p in model.parameters() if p.requires_grad]
    inputs = [n.path for n in ir.nodes if n.kind == "input"]
    return make_fx_wiring(lambda x: torch.autograd.grad(default_loss(model(x)), params), (x,), model, inputs)


@pytest.mark.parametrize("name", ["mlp", "coolcnn"])
def test_forward_and_backward_equal_make_fx(name):
    if name == "mlp":
        model, x = mlp(), torch.randn(3, 4)
    else:
        coolcnn = load_coolcnn()
        torch.manual_seed(0)
        model, x = coolcnn.CoolCNN(), coolcnn.example_input()
    ir = backward(model, x)
    assert wiring(ir) == reference(model, x, ir)
    assert any(n.meta["phase"] == "backward" for n in ir.ops())


def test_phases_are_contiguous_and_backward_ops_name_what_they_differentiate():
    ir = backward(mlp(), torch.randn(3, 4))
    phases = [n.meta["phase"] for n in ir.ops()]
    first_backward = phases.index("backward")
    assert set(phases[:first_backward]) == {"forward"} and set(phases[first_backward:]) == {"backward"}
    ops = list(ir.ops())
    # Backward starts from the loss: ones_like(sum) then expand (SumBackward0).
    assert [n.target for n in ops[first_backward:first_backward + 2]] == ["aten.ones_like.default", "aten.expand.default"]
    for node in ops[first_backward + 1:]:
        forward = ir.node(node.meta["grad_of"])
        assert forward.meta["phase"] == "forward"
        assert node.scope == forward.scope  # backward ops sit in the module of their forward op
    relu = next(n for n in ops if n.target == "aten.relu.default")
    threshold = next(n for n in ops if n.target == "aten.threshold_backward.default")
    assert threshold.meta["grad_of"] == relu.id
    assert ir.scope(threshold.scope).path == "1"


def test_saved_from_names_the_forward_op_whose_saved_tensor_is_read():
    ir = backward(mlp(), torch.randn(3, 4))
    ops = list(ir.ops())
    first_addmm = next(n for n in ops if n.target == "aten.addmm.default")
    # The weight gradient of layer 0 is grad.t() @ x: it reads x, which addmm saved.
    reads_x = [n for n in ops if n.meta["phase"] == "backward" and "n0" in {r.node for r in n.inputs}]
    assert [n.target for n in reads_x] == ["aten.mm.default"]
    assert reads_x[0].meta["saved_from"] == [first_addmm.id]
    # Ops that only read gradients have no saved_from.
    ones = next(n for n in ops if n.target == "aten.ones_like.default")
    assert "saved_from" not in ones.meta


def test_saved_activation_bytes_per_module():
    ir = backward(mlp(), torch.randn(3, 4))
    scope = {s.path: s.id for s in ir.scopes}
    # Linear 0 saves its input (3x4 floats); ReLU saves its output (3x8), which Linear 2
    # saves as well and is counted once; weights are parameters, not activations.
    assert ir.meta["saved_activations"] == {scope["0"]: 3 * 4 * 4, scope["1"]: 3 * 8 * 4}
    assert ir.meta["saved_activation_bytes"] == 3 * 4 * 4 + 3 * 8 * 4
    relu = next(n for n in ir.ops() if n.target == "aten.relu.default")
    assert relu.meta["saved_for_backward"] == [{"shape": [3, 8], "dtype": "float32", "bytes": 96, "node": relu.id}]


def test_gradients_are_outputs_and_the_model_is_left_untouched():
    model = mlp()
    ir = backward(model, torch.randn(3, 4))
    grads = {n.path: n for n in ir.nodes if n.kind == "output" and n.path.startswith("grad")}
    assert set(grads) == {"grad['0.weight']", "grad['0.bias']", "grad['2.weight']", "grad['2.bias']"}
    assert grads["grad['0.weight']"].outputs[0].shape == (8, 4)
    assert all(ir.node(g.inputs[0]).meta["phase"] == "backward" for g in grads.values())
    assert all(p.grad is None for p in model.parameters())
    assert ir.meta["backward"] is True and ir.meta["level"] == "aten"
    assert GraphIR.from_dict(ir.to_dict()).meta["saved_activations"] == ir.meta["saved_activations"]


def test_custom_loss_and_input_gradients():
    x = torch.randn(3, 4, requires_grad=True)
    ir = backward(mlp(), x, loss_fn=lambda out: (out ** 2).mean())
    targets = [n.target for n in ir.ops() if n.meta["phase"] == "forward"]
    assert targets[-2:] == ["aten.pow.Tensor_Scalar", "aten.mean.default"]
    assert "grad['args[0]']" in {n.path for n in ir.nodes if n.kind == "output"}


def test_nothing_to_differentiate_is_a_clear_error():
    model = mlp().requires_grad_(False)
    with pytest.raises(ValueError, match="no floating-point output requires grad"):
        backward(model, torch.randn(3, 4))
    with pytest.raises(TraceError, match="loss does not require grad"):
        backward(model, torch.randn(3, 4), loss_fn=lambda out: out.sum())


def _mlp_backward() -> torchatlas.Graph:
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    return torchatlas.trace(model, torch.randn(3, 4), backward=True)


def test_tree_keeps_the_forward_graph_and_lists_backward_apart():
    text = _mlp_backward().tree(ascii=False)
    forward, backward = text.split("◀ backward", 1)
    assert "threshold_backward" not in forward and "ones_like" not in forward
    assert "(Linear)  3×4 → 3×8" in forward  # the forward call's shapes, no gradient among its inputs
    assert "◀ 2 (Linear)  ← saved: 2.addmm" in backward and "threshold_backward" in backward


def test_diagram_draws_backward_ops_in_their_own_dashed_part():
    dot = _mlp_backward().to_dot()
    body = dot.split('subgraph "cluster_s_backward"', 1)
    assert len(body) == 2, "no backward cluster"
    forward_part, backward_part = body
    assert "threshold_backward" in backward_part and "threshold_backward" not in forward_part
    assert "dashed" in backward_part.split("\n", 2)[1]  # the part's own border style
    # its own region: no edge runs back into the forward graph for each saved tensor (ResNet-18's
    # depth-2 diagram took 41 s with them; bench/bench_backward.py)
    assert not [line for line in dot.splitlines() if "->" in line and "#8e44ad" in line]


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz 'dot' is not installed")
@pytest.mark.graphviz
def test_rendered_diagram_is_the_dot_text_drawn_with_its_dashed_backward_part() -> None:
    graph = _mlp_backward()
    svg = graph.render(format="svg").decode()
    assert svg == subprocess.run(["dot", "-Tsvg"], input=graph.to_dot().encode(), capture_output=True, check=True).stdout.decode()
    backward_part = svg.split("<title>cluster_s_backward</title>", 1)
    assert len(backward_part) == 2, "no backward part in the drawing"
    assert 'stroke="#8e44ad" stroke-dasharray' in backward_part[1]  # dashed, in the backward colour
    assert "threshold_backward" in backward_part[1] and "threshold_backward" not in backward_part[0]


def test_the_page_sets_the_backward_part_apart_as_the_diagram_does() -> None:
    graph = _mlp_backward()
    page = viewer_document(graph.ir)
    scopes = page["scopes"]
    part = [i for i, s in enumerate(scopes) if s.get("bw")]
    assert [scopes[i]["path"] for i in part] == ["backward", "backward.(loss)", "backward.2", "backward.1", "backward.0"]  # as the tree names the seed gradient and the loss's ops
    assert scopes[part[0]]["p"] == 0 and all(scopes[i]["p"] == part[0] for i in part[1:])
    ops = [(n, d) for n, d in zip(graph.ir.nodes, page["nodes"], strict=True) if n.kind == "op"]
    assert [d["s"] in part for _, d in ops] == [n.meta["phase"] == "backward" for n, _ in ops]
    names = page["names"]
    threshold = next(n for n in page["nodes"] if "op" in n and names[n["op"]] == "threshold_backward")
    assert scopes[threshold["s"]]["path"] == "backward.1"
    assert not any(scopes[n["s"]].get("bw") for n in page["nodes"] if "op" in n and names[n["op"]] == "relu")


def test_model_explorer_sets_the_backward_part_apart_too() -> None:
    graph = _mlp_backward()
    doc = graph.to_model_explorer()
    nodes = {n["label"]: n["namespace"] for n in doc["graphs"][0]["nodes"]}
    assert nodes["threshold_backward"] == "backward/1" and not nodes["relu"].startswith("backward")


def test_the_tree_names_the_models_own_ops_apart_from_the_loss() -> None:
    class ReluBetween(torch.nn.Module):  # relu runs in the model's own call, between two Linears
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)

        def forward(self, x):
            return self.b(torch.relu(self.a(x)))

    tree = torchatlas.trace(ReluBetween(), torch.randn(2, 4), backward=True).tree(ascii=False)
    groups = [line.strip(" │├└─") for line in tree.splitlines() if "◀" in line and "backward (" not in line]
    assert groups[0] == "◀ (loss)"
    assert "◀ <root> (ReluBetween)  ← saved: relu" in groups
    assert groups.count("◀ (loss)") == 1


def test_what_keeps_a_backward_pass_from_running_is_said_in_one_line() -> None:
    with torch.no_grad(), pytest.raises(TraceError, match=r"gradients, which are off here \(torch.no_grad"):
        backward(mlp(), torch.randn(3, 4))

    with pytest.raises(TraceError, match="^torchatlas: loss_fn failed on the model's output: IndexError: too many indices") as failed:
        backward(mlp(), torch.randn(3, 4), loss_fn=lambda out: out["logits"].sum())
    assert not getattr(failed.value, "__notes__", None)  # not "forward failed at ...": forward ran

    class Checkpointed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 2)

        def forward(self, x):
            return self.b(torch.utils.checkpoint.checkpoint(self.a, x, use_reentrant=True))

    with pytest.raises(TraceError, match=r"checkpoint\(use_reentrant=True\).*use use_reentrant=False"):
        backward(Checkpointed(), torch.randn(4, 8, requires_grad=True))
    assert torchatlas.trace(Checkpointed(), torch.randn(4, 8)).ir  # forward alone traces


def test_the_loss_gradient_is_named_alike_in_the_tree_the_diagram_and_the_page() -> None:
    graph = _mlp_backward()
    assert "◀ (loss)" in graph.tree(ascii=False)
    assert "<B>(loss)</B>" in graph.to_dot()
    assert "(loss)" in [s["nm"] for s in viewer_document(graph.ir)["scopes"] if s.get("bw")]
