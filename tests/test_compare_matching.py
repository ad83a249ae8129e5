"""torchatlas.compare across real differences between two runs: a quantized copy (int8 weights
dequantized in forward, before a linear or a matmul) and renamed modules. Each lines up, names
the op where the numbers part, and lists what has no partner with a reason that says what it is."""

from __future__ import annotations

import copy
import re
import warnings

import torch
from torch import nn
from torch.nn import functional as F

import torchatlas


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(6, 16), nn.Linear(16, 16), nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc3(torch.tanh(self.fc2(torch.tanh(self.fc1(x)))))


def _int8(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row symmetric int8: the weight's codes and scales."""
    scale = weight.detach().abs().amax(dim=1, keepdim=True) / 127
    return torch.round(weight.detach() / scale).to(torch.int8), scale


class Int8Linear(nn.Module):
    """A quantized copy of a Linear: int8 weight and scales as buffers, dequantized in forward."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        codes, scale = _int8(linear.weight)
        self.register_buffer("qweight", codes)
        self.register_buffer("scale", scale)
        self.bias = nn.Parameter(linear.bias.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.qweight.to(torch.float32) * self.scale, self.bias)


class Int8Matmul(Int8Linear):
    """The same, computed as a matmul and an add: other ops than the Linear's."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ (self.qweight.float() * self.scale).t() + self.bias


class QuantizedTensorLinear(nn.Module):
    """A torch quantized tensor (qint8, per channel), ``dequantize()`` before the linear."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        _, scale = _int8(linear.weight)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # quantized tensors are deprecated, and still made
            self.qweight = torch.quantize_per_channel(
                linear.weight.detach(), scale.reshape(-1).double(), torch.zeros(scale.numel(), dtype=torch.long), 0, torch.qint8)
        self.bias = nn.Parameter(linear.bias.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.qweight.dequantize(), self.bias)


def _mlp() -> tuple[Mlp, torch.Tensor]:
    torch.manual_seed(0)
    return Mlp().eval(), torch.randn(5, 6)


def _path(c: torchatlas.Comparison, node_id: str) -> str:
    return c.graph.ir.scope(c.graph.ir.node(node_id).scope).path


def _quantized(kind: type[nn.Module]) -> tuple[torchatlas.Comparison, float]:
    """fp32 against a copy with fc2 quantized, and the eager error of fc2's output."""
    model, x = _mlp()
    quantized = copy.deepcopy(model)
    quantized.fc2 = kind(model.fc2)
    with torch.no_grad():
        c = torchatlas.compare((model, (x,)), (quantized, (x,)), atol=1e-4, rtol=1e-3, labels=["fp32", "int8"])
        hidden = torch.tanh(model.fc1(x))
        error = (quantized.fc2(hidden) - model.fc2(hidden)).abs().max().item()
    return c, error


def test_a_dequantize_before_the_linear_lines_up_and_the_first_divergence_is_that_linear() -> None:
    c, error = _quantized(Int8Linear)
    run = c.runs[0]
    assert _path(c, c.first_divergence.id) == "fc2"
    assert [op.status for op in run.ops.values()] == ["equal", "equal", "diverges", "inherits", "inherits"]
    assert all(op.matched_by == "diff" for op in run.ops.values())
    assert run.ops[c.first_divergence.id].errors.max_abs == error  # every element sampled: the eager error
    # the dequantize is listed, run 1's, with what it is: a weight made from the int8 codes and scales
    assert [(u.run, u.label) for u in run.unmatched] == [(1, "fc2 (to)"), (1, "fc2 (mul)")]
    assert all(u.reason.startswith("prepares a weight from fc2.qweight") for u in run.unmatched)
    assert "fc2.qweight, fc2.scale alone" in run.unmatched[1].reason and "fp32 reads its weights as they are" in run.unmatched[1].reason
    assert "unmatched: 2" in str(c) and "fc2 (Linear)  5×16 → 5×16  [error" in c.tree(ascii=False)


def test_a_dequantize_then_matmul_is_compared_where_the_linear_ends() -> None:
    c, error = _quantized(Int8Matmul)
    run = c.runs[0]
    first = run.ops[c.first_divergence.id]
    assert _path(c, first.node) == "fc2"
    assert c.graphs[1].ir.node(first.other).target == "torch.Tensor.__add__"  # the Linear's output: the add's
    assert [op.status for op in run.ops.values()] == ["equal", "equal", "diverges", "inherits", "inherits"]
    assert abs(first.errors.max_abs - error) <= 1e-6  # matmul + add rounds apart from linear's addmm
    reasons = {u.label: u.reason for u in run.unmatched}
    assert set(reasons) == {"fc2 (float)", "fc2 (mul)", "fc2 (t)", "fc2 (matmul)"}
    assert all(reasons[k].startswith("prepares a weight from fc2.qweight") for k in ("fc2 (float)", "fc2 (mul)", "fc2 (t)"))
    assert re.fullmatch(r"a step fp32 computes in other ops; compared where it ends, at fc2 \(add\) \[n\d+\]", reasons["fc2 (matmul)"])


def test_a_torch_quantized_tensor_dequantized_in_forward_lines_up() -> None:
    c, error = _quantized(QuantizedTensorLinear)
    run = c.runs[0]
    assert _path(c, c.first_divergence.id) == "fc2"
    assert run.ops[c.first_divergence.id].errors.max_abs == error
    assert [op.status for op in run.ops.values()] == ["equal", "equal", "diverges", "inherits", "inherits"]
    assert [(u.run, u.label) for u in run.unmatched] == [(1, "fc2 (dequantize)")]
    assert run.unmatched[0].reason.startswith("prepares a weight from fc2.qweight alone")


# -- renamed modules ----------------------------------------------------------------------


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm, self.up, self.down = nn.LayerNorm(8), nn.Linear(8, 16), nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.relu(self.up(self.norm(x))))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks, self.head = nn.ModuleList([Block() for _ in range(3)]), nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


class RenamedBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln, self.fc_in, self.fc_out = nn.LayerNorm(8), nn.Linear(8, 16), nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc_out(torch.relu(self.fc_in(self.ln(x))))


class RenamedNet(nn.Module):
    """Net's refactor: every submodule under another name, the blocks in a Sequential."""

    def __init__(self) -> None:
        super().__init__()
        self.layers, self.lm_head = nn.Sequential(*[RenamedBlock() for _ in range(3)]), nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.layers(x))


_NEW_NAMES = (("blocks", "layers"), ("norm", "ln"), ("up", "fc_in"), ("down", "fc_out"), ("head", "lm_head"))


def _renamed() -> tuple[Net, RenamedNet, torch.Tensor]:
    torch.manual_seed(0)
    model, renamed = Net().eval(), RenamedNet().eval()
    state = {}
    for key, value in model.state_dict().items():
        for old, new in _NEW_NAMES:
            key = key.replace(old, new)
        state[key] = value
    renamed.load_state_dict(state)
    return model, renamed, torch.randn(4, 8)


def test_renamed_modules_line_up_op_for_op_and_are_equal() -> None:
    model, renamed, x = _renamed()
    c = torchatlas.compare((model, (x,)), (renamed, (x,)))
    assert not c.diverged and not c.runs[0].unmatched, str(c)
    assert {op.status for op in c.runs[0].ops.values()} == {"equal"}
    assert len(c.runs[0].ops) == len(list(c.graph.ir.ops()))
    # each op's partner ran in the renamed module
    b = c.graphs[1].ir
    pairs = {_path(c, op.node): b.scope(b.node(op.other).scope).path for op in c.runs[0].ops.values()}
    assert pairs["blocks.1.down"] == "layers.1.fc_out" and pairs["head"] == "lm_head"


def test_a_nudged_renamed_layer_diverges_there_and_no_fold_hides_it() -> None:
    model, renamed, x = _renamed()
    with torch.no_grad():
        renamed.layers[1].fc_out.weight[0] += 0.1
    c = torchatlas.compare((model, (x,)), (renamed, (x,)))
    first = c.first_divergence
    assert _path(c, first.id) == "blocks.1.down"
    assert c.graphs[1].ir.scope(c.graphs[1].ir.node(c.runs[0].ops[first.id].other).scope).path == "layers.1.fc_out"
    ops = list(c.runs[0].ops.values())
    at = [op.node for op in ops].index(first.id)
    assert {op.status for op in ops[:at]} == {"equal"} and {op.status for op in ops[at + 1:]} == {"inherits"}
    # blocks.0–2 would fold behind blocks.0, which is equal: the tree lists each block instead
    tree = c.tree(ascii=False)
    assert "blocks.0–2" not in tree and tree.count("✗ diverges here") == 1
    lines = tree.splitlines()  # the tree names a call below its caller: blocks.1, then its down
    block = next(k for k, line in enumerate(lines) if "blocks.1 (Block)" in line)
    assert next(line for line in lines[block:] if "down (Linear)" in line).endswith(", ✗ diverges here]")
    assert "blocks.0–2" in c.tree(ascii=False, fold_repeats=True)  # asked for, the fold is there
    assert "blocks.1" in c.summary(format="text") and "blocks.0–2" not in c.summary(format="text")


def test_a_divergence_in_the_first_of_the_repeats_keeps_the_fold() -> None:
    model, renamed, x = _renamed()
    with torch.no_grad():
        renamed.layers[0].fc_out.weight[0] += 0.1
    c = torchatlas.compare((model, (x,)), (renamed, (x,)))
    assert _path(c, c.first_divergence.id) == "blocks.0.down"
    assert "blocks.0–2 (Block) ×3" in c.tree(ascii=False)
