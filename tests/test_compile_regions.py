"""compile_report tells the truth: a forward dynamo compiled whole is one region over every
op, however the ops' source lines read, but for the ops only eager code ran, which no compiled
graph holds (torch._dynamo.explain's graphs are the ground truth); the region count is ``torch._dynamo.explain``'s
graph count; break reasons come in plain words first, dynamo's after, cut at a word."""

from __future__ import annotations

import _compile_models as models
import pytest
import torch
import torch._dynamo as dynamo
from torch import nn

import torchatlas
from torchatlas._capture._regions import CompiledGraph, CompileFacts, annotate
from torchatlas._ir import GraphBreak, GraphIR, Node, Scope, Source
from torchatlas._ops import op_name
from torchatlas._view._breaks import break_label, dynamo_words, plain_reason

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


class UserModule(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 8)
        self.b = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.a(x))
        return self.b(h) * 2 + x


def _gpt2() -> tuple[nn.Module, dict]:
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=100, n_positions=32)
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(config).eval(), {"input_ids": torch.randint(0, 100, (1, 8))}


def _regions(graph) -> list[int | None]:
    return [n.meta["compile_region"] for n in graph.ir.ops()]


@pytest.mark.parametrize(
    "make",
    [
        lambda: (nn.Sequential(nn.Linear(4, 4), nn.ReLU()), (torch.randn(2, 4),), {}),
        lambda: (UserModule(), (torch.randn(2, 4),), {}),
        lambda: (*_gpt2()[:1], (), _gpt2()[1]),
    ],
    ids=["sequential", "user-module", "gpt2-2-layers"],
)
def test_a_break_free_model_is_one_region_over_every_op(make) -> None:
    torch.manual_seed(0)
    model, args, kwargs = make()
    with torch.no_grad():
        graph = torchatlas.compile_report(model, args, kwargs)
        explained = dynamo.explain(model)(*args, **kwargs)
    dynamo.reset()
    regions = _regions(graph)
    assert explained.graph_count == 1 and not explained.break_reasons
    assert regions and set(regions) == {0}  # every op, the same integer region
    assert graph.ir.meta["compile_graphs"] == explained.graph_count == len(set(regions))
    assert graph.graph_breaks == [] and "✂" not in graph.tree()


@pytest.mark.parametrize("cls", [models.PrintInForward, models.ItemControlFlow, models.TwoBreaks, models.DataDependentBranch])
def test_the_region_count_is_explains_graph_count(cls: type) -> None:
    torch.manual_seed(0)
    model, x = cls(), torch.randn(2, 8)
    graph = torchatlas.compile_report(model, x)
    explained = dynamo.explain(model)(x)
    dynamo.reset()
    regions = _regions(graph)
    assert graph.ir.meta["compile_graphs"] == explained.graph_count == len({r for r in regions if r is not None})
    assert regions[0] == 0  # the forward's first op ran in the first graph


def test_ops_with_torchs_source_line_up_by_name_and_order() -> None:
    """Without lines on either side (ops of torch.nn modules), names in order place them."""
    names = ["linear", "relu", "linear", "getrefcount_is_not_an_op", "linear", "relu"]
    targets = ["torch.nn.functional.linear", "torch.relu", "torch.nn.functional.linear", "torch.Tensor.__add__",
               "torch.nn.functional.linear", "torch.relu"]
    nodes = [Node(f"n{i}", "op", "s0", target=t) for i, t in enumerate(targets)]
    ir = GraphIR([Scope("s0", None, "", "M", 0)], nodes)
    facts = CompileFacts(
        graphs=[
            CompiledGraph([None, None, None], "Unsupported", True, [("m.py", 3, "x = x + f(x)")], 0, names=names[:3]),
            CompiledGraph([None, None], "return_value", False, [], 0, names=names[4:]),
        ],
        runs=[(0, 0), (0, 1)],
    )
    out = annotate(ir, facts)
    assert [n.meta["compile_region"] for n in out.ops()] == [0, 0, 0, None, 1, 1]


class EagerOnlyAround(nn.Module):
    """Ops that run only eagerly, before the first compiled op and between two of them."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not torch.compiler.is_compiling():
            x = x - 1
        x = self.a(x)
        if not torch.compiler.is_compiling():
            x = x * 2 + 1
        return self.b(x).relu()


def _explained_op_names(model: nn.Module, args: tuple = (), kwargs: dict | None = None) -> tuple[int, list[str]]:
    from torchatlas._capture._compile import _op_name

    explained = dynamo.explain(model)(*args, **(kwargs or {}))
    dynamo.reset()
    ops = [n for gm in explained.graphs for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module")]
    return explained.graph_count, [_op_name(n) for n in ops]


def test_ops_only_eager_code_ran_are_in_no_region_of_a_break_free_forward() -> None:
    torch.manual_seed(0)
    model, x = EagerOnlyAround().eval(), torch.randn(2, 8)
    count, compiled = _explained_op_names(model, (x,))
    graph = torchatlas.compile_report(model, x)
    placed = [(op_name(n.target), n.meta["compile_region"]) for n in graph.ir.ops()]
    assert count == 1 and compiled == ["linear", "linear", "relu"]
    assert placed == [("sub", None), ("linear", 0), ("mul", None), ("add", None), ("linear", 0), ("relu", 0)]
    assert [name for name, region in placed if region is not None] == compiled  # exactly what the graph holds


def test_llamas_eager_padding_mask_check_is_in_no_region() -> None:
    """transformers checks the mask for padding only when not tracing (masking_utils.py); the
    compiled graph builds the mask instead. The check's ops ran in no compiled graph."""
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                      num_key_value_heads=2, vocab_size=100)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    kwargs = {"input_ids": torch.randint(0, 100, (1, 8)), "attention_mask": torch.ones(1, 8, dtype=torch.long)}
    with torch.no_grad():
        count, compiled = _explained_op_names(model, (), kwargs)
        graph = torchatlas.compile_report(model, (), kwargs)
    eager = [n for n in graph.ir.ops() if n.meta["compile_region"] is None]
    assert count == 1 and eager, "the padding check ran eagerly"
    assert all(n.source is not None and n.source.file.endswith("masking_utils.py") for n in eager)
    assert {op_name(n.target) for n in eager} - set(compiled), "an eager-only op dynamo's graph has no op of"
    assert {n.meta["compile_region"] for n in graph.ir.ops()} == {0, None}


def _break(kind: str, reason: str, code: str = "", line: int = 12) -> GraphBreak:
    return GraphBreak(kind, reason, Source("/x/chatty.py", line, code), "s0", None, 0, 0)


@pytest.mark.parametrize(
    "brk, plain",
    [
        (_break("data-dependent", "generic_jump TensorVariable()", "if h.norm() > 5:"),
         "branch on a tensor value (if at chatty.py:12)"),
        (_break("data-dependent", "generic_jump TensorVariable()", "while h.sum() > 0:"),
         "branch on a tensor value (while at chatty.py:12)"),
        (_break("print/logging", "Failed\n  Explanation: Dynamo does not know how to trace builtin operator `print`",
                'print("hi")'), "print() in forward"),
        (_break(".item()/.tolist()", "Unsupported Tensor.item() call", "s = h.mean().item()"), ".item() leaves the graph"),
        (_break("unsupported call", "Failed\n  Explanation: Dynamo does not know how to trace the builtin `sys.getrefcount.`"),
         "unsupported call to sys.getrefcount"),
    ],
)
def test_break_reasons_in_plain_words_first(brk: GraphBreak, plain: str) -> None:
    assert plain_reason(brk) == plain
    assert break_label(brk).startswith(f"✂ graph break: {plain} — ")


def test_dynamos_words_are_never_cut_mid_word() -> None:
    long = "Explanation: " + " ".join(["abcdefghij"] * 30)
    words = dynamo_words(_break("unsupported call", long), limit=50)
    assert words.endswith("…") and len(words) <= 50
    assert all(w == "abcdefghij" for w in words[:-1].split())
