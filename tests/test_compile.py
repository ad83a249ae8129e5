"""compile_report: dynamo's graphs and breaks laid over the eager graph.

Each model of ``_compile_models`` breaks where its ``# BREAK`` comments say; the number of
graphs is checked against ``torch._dynamo.explain`` run on the same model.
"""

from __future__ import annotations

import json

import _compile_models as models
import pytest
import torch
import torch._dynamo as dynamo

import torchatlas
from torchatlas import GraphFormatError

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _report(cls: type, **kwargs):
    torch.manual_seed(0)
    model = cls()
    x = torch.randn(2, 8)
    graph = torchatlas.compile_report(model, (x,), **kwargs)
    return model, x, graph


def _explained(model, x) -> tuple[int, int]:
    out = dynamo.explain(model)(x)
    return out.graph_count, len(out.break_reasons)


def _breaks(graph) -> list:
    return [b for b in graph.graph_breaks if b.kind != "recompile"]


@pytest.mark.parametrize(
    "cls, kind",
    [
        (models.PrintInForward, "print/logging"),
        (models.ItemControlFlow, ".item()/.tolist()"),
        (models.UnsupportedBuiltin, "unsupported call"),
        (models.DataDependentBranch, "data-dependent"),
        (models.DynamicShapeOp, "dynamic shape guard"),
    ],
)
def test_one_break_each(cls: type, kind: str) -> None:
    model, x, graph = _report(cls)
    breaks = graph.graph_breaks
    assert graph.ir.meta["compile_graphs"] == 2
    assert (graph.ir.meta["compile_graphs"], len(breaks)) == _explained(model, x)
    assert [b.kind for b in breaks] == [kind]
    (line,) = models.break_lines(cls)
    assert breaks[0].source is not None and breaks[0].source.line == line
    assert breaks[0].source.file.endswith("_compile_models.py")
    assert breaks[0].scope == graph.ir.scopes[0].id  # in the model's own forward
    regions = [n.meta["compile_region"] for n in graph.ir.ops()]
    assert regions[0] == 0 and regions[-1] == 1
    assert regions == sorted(r for r in regions if r is not None) or None in regions
    resumed = graph.ir.node(breaks[0].node)
    assert resumed.meta["compile_region"] in (1, None)  # the first op after the break: next graph, or eager
    assert all(n.source is None or n.source.line <= line for n in graph.ir.ops() if n.meta["compile_region"] == 0)


def test_no_break_is_one_region_over_every_op() -> None:
    model, x, graph = _report(models.NoBreak)
    assert graph.graph_breaks == []
    assert graph.ir.meta["compile_graphs"] == 1 == _explained(model, x)[0]
    assert {n.meta["compile_region"] for n in graph.ir.ops()} == {0}
    assert "✂" not in graph.tree()


def test_break_inside_a_submodule() -> None:
    """A print in a block breaks the outer frame at the call and the block's own frame: dynamo's count."""
    model, x, graph = _report(models.TwoBreaks)
    assert (graph.ir.meta["compile_graphs"], len(graph.graph_breaks)) == _explained(model, x)
    print_line, item_line = models.break_lines(models.Block) + models.break_lines(models.TwoBreaks)
    assert [(b.kind, b.source.line) for b in graph.graph_breaks] == [
        ("print/logging", print_line), ("print/logging", print_line), (".item()/.tolist()", item_line)
    ]
    paths = [graph.ir.scope(b.scope).path for b in graph.graph_breaks]
    assert paths == ["", "block", ""]
    block_ops = [n for n in graph.ir.ops() if graph.ir.scope(n.scope).path.startswith("block")]
    assert len({n.meta["compile_region"] for n in block_ops}) == 2  # the block's frame split in two


def test_tree_summary_and_document_show_the_breaks(tmp_path) -> None:
    _, _, graph = _report(models.TwoBreaks)
    tree = graph.tree()
    assert tree.count("✂ graph break:") == 3
    assert "✂ graph break: .item() leaves the graph — Dynamo does not support tracing `Tensor.item()`" in tree
    lines = tree.splitlines()
    item_mark = next(i for i, line in enumerate(lines) if "Tensor.item()" in line)
    assert "truediv" in lines[item_mark + 1]  # marked just before the op execution went on with
    summary = graph.summary(format="text")
    header, _, root_row, *_ = summary.splitlines()
    assert header.rstrip().endswith("Graph breaks") and root_row.rstrip().endswith("3")
    assert "Graph breaks" not in torchatlas.trace(models.NoBreak(), torch.randn(2, 8)).summary(format="text")
    loaded = torchatlas.load(graph.save(tmp_path / "g.json"))
    assert loaded.graph_breaks == graph.graph_breaks
    assert [n.meta["compile_region"] for n in loaded.ir.ops()] == [n.meta["compile_region"] for n in graph.ir.ops()]
    assert loaded.tree() == tree


def test_a_forged_break_is_refused() -> None:
    _, _, graph = _report(models.PrintInForward)
    doc = graph.to_dict()
    doc["meta"]["graph_breaks"][0]["scope"] = "s999"
    with pytest.raises(GraphFormatError, match=r"graph_breaks\[0\]\.scope"):
        torchatlas.GraphIR.from_dict(json.loads(json.dumps(doc)))
    doc["meta"]["graph_breaks"][0].update(scope=None, node=17)
    with pytest.raises(GraphFormatError, match=r"graph_breaks\[0\]\.node"):
        torchatlas.GraphIR.from_dict(doc)


def test_recompile_on_a_second_input_set() -> None:
    torch.manual_seed(0)
    model = models.PrintInForward()
    graph = torchatlas.compile_report(model, torch.randn(2, 8), more_args=[torch.randn(5, 8)])
    recompiles = [b for b in graph.graph_breaks if b.kind == "recompile"]
    assert recompiles and all(b.call == 1 for b in recompiles)
    assert "size mismatch" in recompiles[0].reason
    assert recompiles[0].source is not None and recompiles[0].source.code.startswith("def forward")
    assert [b.kind for b in graph.graph_breaks if b.call == 0] == ["print/logging"]
    assert graph.ir.meta["compile_graphs"] > 2  # compiled again for the new shape


def test_dynamo_state_and_config_are_restored() -> None:
    import logging

    model = models.ItemControlFlow()
    level = logging.getLogger("torch._dynamo").level
    with dynamo.config.patch(capture_scalar_outputs=True):
        before = dynamo.config.get_config_copy()
        graph = torchatlas.compile_report(model, torch.randn(2, 8))
        assert dynamo.config.get_config_copy() == before
    # The user's config was honoured: .item() is captured, so that break is gone.
    assert ".item()/.tolist()" not in [b.kind for b in graph.graph_breaks]
    assert not dynamo.config.capture_scalar_outputs
    assert logging.getLogger("torch._dynamo").level == level
    assert torch.compiler.is_compiling() is False
    # Caches were cleared: compiling again afterwards compiles from scratch and still works.
    compiled = torch.compile(models.NoBreak(), backend="eager")
    assert compiled(torch.randn(2, 8)).shape == (2, 4)
    dynamo.reset()


def test_the_trace_itself_is_the_eager_trace() -> None:
    torch.manual_seed(0)
    model = models.TwoBreaks()
    x = torch.randn(2, 8)
    plain = torchatlas.trace(model, x)
    report = torchatlas.compile_report(model, x)
    assert [(n.target, n.scope, n.source) for n in plain.ir.nodes] == [(n.target, n.scope, n.source) for n in report.ir.nodes]
    again = torchatlas.trace(model, x)
    assert "compile_region" not in next(again.ir.ops()).meta


def test_blocks_in_a_loop_recompile_per_instance() -> None:
    """The loop's frame cannot resume after a break, so dynamo runs it eagerly; each block
    instance compiles the block's frame again (a recompile inside the first call)."""
    torch.manual_seed(0)
    model = models.BlockLoop()
    x = torch.randn(2, 8)
    graph = torchatlas.compile_report(model, x)
    assert (graph.ir.meta["compile_graphs"], len(_breaks(graph))) == _explained(model, x)
    assert {b.kind for b in graph.graph_breaks} == {"print/logging", "recompile"}
    assert all(b.call == 0 for b in graph.graph_breaks)
    ops = list(graph.ir.ops())
    assert ops[0].meta["compile_region"] is None and ops[-1].meta["compile_region"] is None  # the loop's own ops
    per_block = [
        [n.meta["compile_region"] for n in ops if graph.ir.scope(n.scope).path.startswith(f"blocks.{i}")] for i in range(3)
    ]
    assert all(None not in regions and len(set(regions)) == 2 for regions in per_block)


def test_a_compiled_model_is_reported_from_its_eager_module() -> None:
    torch.manual_seed(0)
    model = models.PrintInForward()
    compiled = torch.compile(model, backend="eager")
    graph = torchatlas.compile_report(compiled, torch.randn(2, 8))
    assert [b.kind for b in graph.graph_breaks] == ["print/logging"]


@pytest.mark.slow
def test_gpt2_graph_count_matches_explain() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config()  # GPT-2 small: 12 layers, 768 wide; random weights
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).eval()
    ids = torch.randint(0, config.vocab_size, (1, 16))
    with torch.no_grad():
        graph = torchatlas.compile_report(model, (), {"input_ids": ids})
        explained = dynamo.explain(model)(input_ids=ids)
    assert graph.ir.meta["compile_graphs"] == explained.graph_count
    assert len(_breaks(graph)) == len(explained.break_reasons)
    regions = [n.meta["compile_region"] for n in graph.ir.ops()]
    assert sum(r is not None for r in regions) > 0.9 * len(regions)  # nearly every op lies in a compiled graph
    dynamo.reset()


def test_cli_compile_breaks(tmp_path, capsys) -> None:
    from torchatlas._cli import main

    spec = f"{models.__file__}:TwoBreaks"
    assert main([spec, "--input", "2,8", "--compile-breaks"]) == 0
    out = capsys.readouterr().out
    assert out.count("✂ graph break:") == 3
    assert "torch.compile: 5 graph(s), 3 graph break(s)" in out
    assert "   2  print/logging" in out and "   1  .item()/.tolist()" in out


def test_diagram_and_page_data_show_regions_and_breaks() -> None:
    from torchatlas._render._html import viewer_document
    from torchatlas._view import COMPILE_REGIONS, GRAPH_BREAK

    _, _, graph = _report(models.TwoBreaks)
    dot = graph.to_dot()
    for region in range(graph.ir.meta["compile_graphs"]):
        assert f'color="{COMPILE_REGIONS[region]}", penwidth=2.4' in dot
    break_edges = [line for line in dot.splitlines() if "->" in line and GRAPH_BREAK in line]
    assert break_edges and all("✂" in line for line in break_edges)
    assert "graph break" in dot  # the legend
    assert GRAPH_BREAK not in torchatlas.trace(models.NoBreak(), torch.randn(2, 8)).to_dot()
    page = viewer_document(graph.ir)
    ops = [(n, d) for n, d in zip(graph.ir.nodes, page["nodes"]) if n.kind == "op"]
    assert [d["cr"] for _, d in ops] == [-1 if n.meta["compile_region"] is None else n.meta["compile_region"] for n, _ in ops]
    assert [b["kind"] for b in page["compile"]["breaks"]] == [b.kind for b in graph.graph_breaks]
    assert page["compile"]["breaks"][-1]["n"] == [n.id for n in graph.ir.nodes].index(graph.graph_breaks[-1].node)
    assert page["scopes"][0]["gb"] == 3
    page_html = graph.to_html()
    assert "✂ torch.compile: 5 graph(s), 3 graph break(s)" in page_html and page_html.count("<li><b>") == 3
    plain = torchatlas.trace(models.NoBreak(), torch.randn(2, 8))  # (the page quotes the calling line)
    assert "<details class=" not in plain.to_html()


def test_dynamic_shapes_need_no_recompile() -> None:
    torch.manual_seed(0)
    graph = torchatlas.compile_report(models.NoBreak(), torch.randn(2, 8), dynamic=True, more_args=[torch.randn(5, 8)])
    assert graph.graph_breaks == [] and graph.ir.meta["compile_graphs"] == 1


def test_failures_are_one_line_errors() -> None:
    with pytest.raises(torchatlas.TraceError, match=r"^torchatlas: torch.compile failed on .*NoBreak: .*no-such-backend"):
        torchatlas.compile_report(models.NoBreak(), torch.randn(2, 8), backend="no-such-backend")
    with pytest.raises(RuntimeError, match="mat1 and mat2"):  # the model's own error, as trace raises it
        torchatlas.compile_report(models.NoBreak(), torch.randn(2, 3))


def test_alignment_without_torch() -> None:
    """The lining up alone, on a hand-made graph: dynamo's ops by source line, in run order."""
    from torchatlas._capture._regions import CompiledGraph, CompileFacts, annotate
    from torchatlas._ir import GraphIR, Node, Scope, Source

    # 12: eager (the .item() that broke graph 0); 99: an op dynamo folded, inside graph 1
    lines = [10, 10, 11, 12, 13, 99, 13, 14]
    nodes = [Node(f"n{i}", "op", "s0", target="t", source=Source("m.py", line)) for i, line in enumerate(lines)]
    ir = GraphIR([Scope("s0", None, "", "M", 0)], nodes)
    facts = CompileFacts(
        graphs=[
            CompiledGraph([("m.py", 10), ("m.py", 10), ("m.py", 11)], "Unsupported Tensor.item() call", True, [("m.py", 12, "x.item()")], 0),
            CompiledGraph([("m.py", 13), None, ("m.py", 13)], "return_value", False, [], 0),
            CompiledGraph([("m.py", 14)], "return_value", False, [], 0),
        ],
        runs=[(0, 0), (0, 1), (0, 2)],
    )
    out = annotate(ir, facts)
    assert [n.meta["compile_region"] for n in out.ops()] == [0, 0, 0, None, 1, 1, 1, 2]
    (brk,) = out.graph_breaks
    assert (brk.kind, brk.source.line, brk.node, brk.scope, brk.graph) == (".item()/.tolist()", 12, "n3", "s0", 0)


def test_alignment_of_repeated_layers_with_ops_dropped_and_added() -> None:
    """Every line repeats once per layer: the ops must still pair up locally, not across layers."""
    from torchatlas._capture._regions import CompiledGraph, CompileFacts, annotate
    from torchatlas._ir import GraphIR, Node, Scope, Source

    lines = [line for _ in range(40) for line in range(50)]
    nodes = [Node(f"n{i}", "op", "s0", target="t", source=Source("m.py", line)) for i, line in enumerate(lines)]
    ir = GraphIR([Scope("s0", None, "", "M", 0)], nodes)
    keys = [("m.py", line) for line in lines]
    dynamo_ops = []  # dynamo folds every 7th op and adds one of its own every 11th
    for i, key in enumerate(keys[:1000]):
        dynamo_ops += ([key] if i % 7 else []) + ([("m.py", 9000 + i)] if i % 11 == 0 else [])
    facts = CompileFacts(
        graphs=[
            CompiledGraph(dynamo_ops, "Failed to trace builtin operator `print`", True, [("m.py", 49, "print()")], 0),
            CompiledGraph(keys[1010:], "return_value", False, [], 0),
        ],
        runs=[(0, 0), (0, 1)],
    )
    regions = [n.meta["compile_region"] for n in annotate(ir, facts).ops()]
    assert regions[:1000].count(0) >= 999  # at most the folded op at the graph's very end is lost
    assert regions[1000:1010] == [None] * 10  # eager between the graphs
    assert regions[1010:] == [1] * 990
    (brk,) = annotate(ir, facts).graph_breaks
    assert brk.node == "n1000" and brk.kind == "print/logging"


def test_a_break_at_an_op_no_op_reads_stays_in_the_tree() -> None:
    _, _, graph = _report(models.BreakAtAnUnusedOp)
    (brk,) = _breaks(graph)
    # execution went on at nonzero, which no op reads: Python read its size, a count of values
    node = graph.ir.node(brk.node)
    assert [r.how for r in node.python_reads] == ["count"] and not node.meta["dead"] and not node.meta["size_only"]
    lines = graph.tree(ascii=False).splitlines()
    cut = next(i for i, line in enumerate(lines) if "✂ graph break" in line)
    assert "nonzero" in lines[cut + 1] and "⇢ size @ _compile_models.py:" in lines[cut + 1]  # just before its op
