"""Decisions: where a tensor's value left the graph into Python (``if``, ``while``, ``assert``,
``break``, ``.item()``, a size), noted on the node that made it, and never called unused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from _decision_models import (
    CountedLoop,
    EarlyExit,
    Halve,
    ItemScale,
    Nested,
    NormGate,
    ShapeAssert,
    SizeOnly,
    Uneven,
    line_of,
)
from _passes_builder import IRBuilder
from hypothesis import given, settings
from hypothesis import strategies as st

import torchatlas
from torchatlas._ir import GraphFormatError, GraphIR
from torchatlas._passes import dead_code

HERE = "_decision_models.py"


def _reads(graph) -> list[tuple[str, str, object, str | None, int]]:
    """(op name, how, value, statement, line) of every read, in node order."""
    return [
        (n.target.rsplit(".", 1)[-1], r.how, r.value, r.statement, r.source.line)
        for n in graph.ir.nodes for r in n.python_reads
    ]


def early_exit() -> tuple[EarlyExit, torch.Tensor]:
    torch.manual_seed(0)
    return EarlyExit(), torch.randn(2, 8)


def _eager_decisions(model: EarlyExit, x: torch.Tensor) -> tuple[list[bool], bool]:
    """The break tests and the final ``if`` as eager PyTorch decides them for ``x``."""
    h, tests = x, []
    for _ in range(model.steps):
        new = model.step(h)
        delta, h = new - h, new
        tests.append(bool(delta.abs().mean() < 0.2))
        if tests[-1]:
            break
    return tests, bool(h.norm() > 5)


def test_an_early_exit_loop_notes_each_break_test_and_which_way_it_went():
    model, x = early_exit()
    tests, big = _eager_decisions(model, x)
    assert tests[-1] and len(tests) < model.steps  # the input makes the loop stop early
    graph = torchatlas.trace(model, (x,))
    brk, cond = line_of(EarlyExit, "if delta.abs()"), line_of(EarlyExit, "if h.norm()")
    reads = _reads(graph)
    expected = [("__lt__", "bool", t, "break", brk) for t in tests] + [("__gt__", "bool", big, "if", cond)]
    assert reads == expected
    # what decided, and what it read, is used
    assert not any(n.meta["dead"] for n in graph.ir.ops())
    assert graph.ir.meta["dead_op_count"] == 0
    tree = graph.tree(fold_repeats=False)
    assert "unused" not in tree
    assert tree.count(f"⇢ break @ {HERE}:{brk} (went on)") == len(tests) - 1
    assert tree.count(f"⇢ break @ {HERE}:{brk} (broke)") == 1
    assert f"gt (>) → scalar bool  ⇢ if @ {HERE}:{cond} ({'taken' if big else 'not taken'})" in tree


def test_the_python_reads_match_what_the_model_did_untraced():
    """Differential: the bool each read saw is the one eager PyTorch computes for the same input."""
    torch.manual_seed(1)
    model, x = Halve(), torch.randn(3, 4) * 4
    steps, h = [], x
    while (h.norm() > 1).item():
        steps.append(True)
        h = h / 2
    steps.append(False)
    graph = torchatlas.trace(model, (x,))
    reads = _reads(graph)
    assert [r[2] for r in reads] == steps
    assert {r[3] for r in reads} == {"while"} and {r[4] for r in reads} == {line_of(Halve, "while")}


@pytest.mark.parametrize("scale, taken", [(100.0, True), (0.001, False)])
def test_an_if_on_a_norm_says_taken_or_not(scale: float, taken: bool):
    torch.manual_seed(0)
    graph = torchatlas.trace(NormGate(), (torch.randn(2, 4) * scale,))
    line = line_of(NormGate, "if h.norm()")
    assert _reads(graph) == [("__gt__", "bool", taken, "if", line)]
    outcome = "taken" if taken else "not taken"
    assert f"⇢ if @ {HERE}:{line} ({outcome})" in graph.tree()
    assert "unused" not in graph.tree()


def test_an_item_into_a_float_is_used_and_shows_its_value():
    x = torch.tensor([[1.0, -4.0], [2.0, 0.5]])
    graph = torchatlas.trace(ItemScale(), (x,))
    line = line_of(ItemScale, ".item()")
    assert _reads(graph) == [("max", "item", 4.0, None, line)]
    assert f"⇢ .item() @ {HERE}:{line} (= 4)" in graph.tree()
    assert graph.ir.meta["dead_op_count"] == 0


def test_a_size_only_read_is_marked_size_only_not_unused():
    graph = torchatlas.trace(SizeOnly(), (torch.randn(2, 4),))
    total = next(n for n in graph.ir.ops() if n.target.endswith("sum"))
    assert [r.how for r in total.python_reads] == ["size"]
    assert total.meta["size_only"] and not total.meta["dead"]
    assert f"y = sum → 2  (size only @ {HERE}:{line_of(SizeOnly, 'reshape')})" in graph.tree()
    assert "unused" not in graph.tree()


def test_an_assert_on_a_shape_is_a_size_read():
    graph = torchatlas.trace(ShapeAssert(), (torch.randn(2, 4),))
    mul = next(n for n in graph.ir.ops() if "mul" in n.target)
    assert [(r.how, r.source.line) for r in mul.python_reads] == [("size", line_of(ShapeAssert, "assert"))]
    assert mul.meta["size_only"] and graph.ir.meta["dead_op_count"] == 0


def test_the_aten_level_marks_the_scalar_python_read():
    torch.manual_seed(0)
    graph = torchatlas.trace(NormGate(), (torch.randn(2, 4) * 100,), level="aten")
    line = line_of(NormGate, "if h.norm()")
    dense = [n for n in graph.ir.ops() if "_local_scalar_dense" in n.target]
    assert [(r.how, r.value, r.statement, r.source.line) for n in dense for r in n.python_reads] == [
        ("bool", True, "if", line)
    ]
    assert not any(graph.ir.node(r).meta["dead"] for n in dense for r in [n.id, *n.inputs])


def test_reads_round_trip_through_the_graph_document(tmp_path):
    model, x = early_exit()
    graph = torchatlas.trace(model, (x,))
    path = graph.save(tmp_path / "g.json")
    loaded = torchatlas.load(path)
    assert [n.python_reads for n in loaded.ir.nodes] == [n.python_reads for n in graph.ir.nodes]
    assert loaded.tree() == graph.tree()


@pytest.mark.parametrize(
    "read, message",
    [
        ({"as": "peek", "slot": 0}, "as must be one of"),
        ({"as": "bool", "statement": "unless"}, "statement must be null or one of"),
        ({"as": "bool", "slot": -1}, "slot must be a non-negative integer"),
        ({"as": "item", "value": "x"}, "value must be a finite number"),
        ({"as": "bool", "source": {"file": "m.py"}}, "source needs file and line"),
    ],
)
def test_a_malformed_read_is_a_format_error(read: dict, message: str):
    b = IRBuilder()
    x = b.input((4,))
    b.output(b.op("torch.relu", [x], (4,)))
    doc = b.build().to_dict()
    doc["nodes"][1].setdefault("meta", {})["reads"] = [read]
    with pytest.raises(GraphFormatError, match=message):
        GraphIR.from_dict(json.loads(json.dumps(doc)))


def test_dead_code_keeps_what_fed_a_decision_and_sizes_apart():
    b = IRBuilder()
    x = b.input((4,))
    norm = b.op("torch.norm", [x], ())
    gt = b.op("torch.Tensor.__gt__", [norm], (), dtype="bool")
    feeds_size = b.op("torch.relu", [x], (4,))
    sized = b.op("torch.sigmoid", [feeds_size], (4,))
    nothing = b.op("torch.tanh", [x], (4,))
    b.output(b.op("torch.exp", [x], (4,)))
    ir = b.build()
    reads = {gt: [{"as": "bool", "slot": 0, "value": True, "statement": "if", "source": None}],
             sized: [{"as": "size", "slot": 0, "value": None, "statement": None, "source": None}]}
    ir = ir.with_meta(nodes={k: {"reads": v} for k, v in reads.items()})
    ir = dead_code(ir)
    meta = {i: (ir.node(i).meta["dead"], ir.node(i).meta["size_only"]) for i in (norm, gt, feeds_size, sized, nothing)}
    assert meta == {norm: (False, False), gt: (False, False), feeds_size: (False, True), sized: (False, True),
                    nothing: (True, False)}
    assert ir.meta["dead_op_count"] == 1


def test_the_diagram_draws_a_diamond_joined_to_each_decision():
    model, x = early_exit()
    graph = torchatlas.trace(model, (x,))
    dot = graph.to_dot(depth=1, fold_repeats=False)  # every iteration drawn: a diamond on each break test
    deciders = [n.id for n in graph.ir.ops() if n.python_reads]
    for node_id in deciders:
        assert f'"d_{node_id}" [label=' in dot and f'"{node_id}" -> "d_{node_id}" [style=dotted' in dot
    assert dot.count("shape=diamond") == len(deciders)
    assert "break: broke" in dot and "unused" not in dot
    # the page's data carries the same marks
    from torchatlas._render._html import viewer_document

    marks = [text for d in viewer_document(graph.ir)["nodes"] for kind, text in d.get("mk", ()) if kind == "decision"]
    assert "◆ break: broke" in marks


def test_cli_decisions_lists_each_decision_point_with_its_line_and_outcomes(capsys):
    from torchatlas._cli import main

    spec = f"{Path(__file__).parent / HERE}:EarlyExit"
    torch.manual_seed(0)
    assert main([spec, "--input", "2,8", "--decisions"]) == 0
    out = capsys.readouterr().out
    tree, _, table = out.partition("\ndecisions: ")
    brk, cond = line_of(EarlyExit, "if delta.abs()"), line_of(EarlyExit, "if h.norm()")
    assert f"⇢ break @ {HERE}:{brk} (went on ×{len(_eager_decisions(*early_exit())[0]) - 1}, broke)" in tree
    rows = [line.split() for line in table.splitlines()[2:]]
    assert [row[:2] for row in rows] == [[f"{HERE}:{brk}", "break"], [f"{HERE}:{cond}", "if"]]
    assert "broke" in table.splitlines()[2] and table.startswith("2 place(s)")


def test_decisions_table_without_any_decision_says_so():
    graph = torchatlas.trace(SizeOnly(), (torch.randn(2, 4),))
    assert graph.decisions() == "decisions: no tensor value was read into Python (size only: 1 op(s))\n"
    assert "=>" in torchatlas.trace(NormGate(), (torch.randn(2, 4),)).tree(ascii=True)


def test_llamas_packed_position_check_is_a_decision_not_a_faded_column():
    """transformers checks whether position ids are packed (diff, ne, cumsum, eq, all, then a
    Python ``if``): those ops decided which mask ran, so the page draws none of them faded."""
    transformers = pytest.importorskip("transformers")
    from torchatlas._render._html import viewer_document

    config = transformers.LlamaConfig(
        num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=100,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    graph = torchatlas.trace(model, (), {"input_ids": torch.randint(0, 100, (1, 8)), "use_cache": False})
    ops = {n.id: n for n in graph.ir.ops()}
    (decider,) = [n for n in ops.values() if any(r.decision for r in n.python_reads)]
    (read,) = decider.python_reads
    assert (decider.target, read.how, read.statement, read.value) == ("torch.Tensor.all", "bool", "if", True)
    assert read.source.file.endswith("masking_utils.py")
    upstream = {"diff", "__ne__", "cumsum", "__eq__"}
    assert upstream <= {n.target.rsplit(".", 1)[-1] for n in ops.values()}
    assert graph.ir.meta["dead_op_count"] == 0
    page = viewer_document(graph.ir)
    drawn = [d for n, d in zip(graph.ir.nodes, page["nodes"]) if n.kind == "op"]
    assert not any(d.get("dead") for d in drawn)
    assert [text for d in drawn for kind, text in d.get("mk", ()) if kind == "decision"] == ["◆ if: taken"]


def _golden(text: str, **lines: int) -> str:
    return text.format(file=HERE, **lines)


def test_the_early_exit_tree_folds_the_loop_golden():
    model, x = early_exit()
    tests, big = _eager_decisions(model, x)
    graph = torchatlas.trace(model, (x,))
    expected = _golden(
        "EarlyExit  2×8 → 2×8\n"
        "├── step#0–{last} (Sequential) ×{n} of range(self.steps), broke at {file}:{brk}  2×8 → 2×8\n"
        "│   ├── 0 (Linear)  2×8 → 2×8\n"
        "│   └── 1 (Tanh)  2×8 → 2×8\n"
        "├── ┬ lt (<)\n"
        "│   ├── delta = sub (-) ×{n} → 2×8\n"
        "│   ├── abs ×{n} → 2×8\n"
        "│   ├── mean ×{n} → scalar\n"
        "│   └── lt (<) ×{n} → scalar bool  ⇢ break @ {file}:{brk} (went on ×{on}, broke)\n"
        "└── ┬ gt (>)\n"
        "    ├── norm → scalar\n"
        "    └── gt (>) → scalar bool  ⇢ if @ {file}:{cond} ({outcome})",
        n=len(tests), last=len(tests) - 1, on=len(tests) - 1, brk=line_of(EarlyExit, "if delta.abs()"), cond=line_of(EarlyExit, "if h.norm()"),
        outcome="taken" if big else "not taken",
    )
    assert graph.tree() == expected
    (group,) = graph.ir.meta["repeat_groups"]
    assert group["count"] == len(tests) and [len(ops) for ops in group["body"]] == [4] * len(tests)
    assert group["exit"]["source"]["line"] == line_of(EarlyExit, "if delta.abs()")
    assert group["exit"]["loop"] == {"line": line_of(EarlyExit, "for _ in"), "code": "for _ in range(self.steps):"}
    summary = graph.summary(format="text")
    assert f"step#0–{len(tests) - 1} (Sequential) ×{len(tests)} of range(self.steps), broke at {HERE}:" in summary
    dot = graph.to_dot(fold_repeats=True)
    assert "shape=diamond" in dot and "<B>sub</B>" not in dot and "broke at" in dot  # one box holds the body


def test_a_loop_that_ran_to_the_end_folds_without_a_break():
    torch.manual_seed(0)
    model = EarlyExit(steps=3)
    graph = torchatlas.trace(model, (torch.randn(2, 8) * 50,))
    (group,) = graph.ir.meta["repeat_groups"]
    assert group["count"] == 3 and "exit" not in group
    line = next(line for line in graph.tree().splitlines() if "(Sequential) ×" in line)
    assert "×3" in line and "broke" not in line


def test_unequal_iterations_do_not_fold():
    graph = torchatlas.trace(Uneven(), (torch.randn(2, 4),))
    assert graph.ir.meta["repeat_groups"] == []
    assert graph.tree().count("step") == 4


def test_nested_loops_fold_the_inner_runs_and_keep_the_outer_steps():
    graph = torchatlas.trace(Nested(), (torch.randn(2, 4),))
    assert graph.tree() == (
        "Nested  2×4 → 2×4\n"
        "├── block#0–2 (Sequential) ×3  2×4 → 2×4\n"
        "│   ├── 0 (Linear)  2×4 → 2×4\n"
        "│   └── 1 (ReLU)  2×4 → 2×4\n"
        "├── x = mul (*) → 2×4\n"
        "├── block#3–5 (Sequential) ×3  2×4 → 2×4\n"
        "│   ├── 0#3 (Linear)  2×4 → 2×4\n"
        "│   └── 1#3 (ReLU)  2×4 → 2×4\n"
        "└── x = mul (*) → 2×4"
    )
    assert [g["count"] for g in graph.ir.meta["repeat_groups"]] == [3, 3]


@pytest.mark.parametrize(
    "model, x, expected",
    [
        (NormGate(), torch.ones(2, 4) * 100, "NormGate  2×4 → 2×4\n├── fc (Linear)  2×4 → 2×4\n├── ┬ gt (>)\n"
         "│   ├── norm → scalar\n│   └── gt (>) → scalar bool  ⇢ if @ {file}:{line} (taken)\n└── h = truediv (/) → 2×4"),
        (ShapeAssert(), torch.ones(2, 4), "ShapeAssert  2×4 → 2×4\n├── ┬ y = mul (*) → 2×4  (size only @ {file}:{line})\n└── add (+) → 2×4"),
        (SizeOnly(), torch.ones(2, 4), "SizeOnly  2×4 → 2×4\n├── ┬ y = sum → 2  (size only @ {file}:{line})\n└── reshape → 2×4"),
        (ItemScale(), torch.ones(2, 4), "ItemScale  2×4 → 2×4\n├── ┬ scale\n│   ├── abs → 2×4\n"
         "│   └── scale = max → scalar  ⇢ .item() @ {file}:{line} (= 1)\n└── truediv (/) → 2×4"),
    ],
    ids=["if-norm", "assert-shape", "size-only", "item"],
)
def test_tree_goldens_of_the_decision_models(model, x, expected):
    torch.manual_seed(0)
    marker = {"NormGate": "if h.norm()", "ItemScale": ".item()", "ShapeAssert": "assert", "SizeOnly": "reshape"}.get(
        type(model).__name__
    )
    line = line_of(type(model), marker) if marker else 0
    assert torchatlas.trace(model, (x,)).tree() == expected.format(file=HERE, line=line)


@settings(max_examples=15, deadline=None)
@given(steps=st.integers(2, 7), stop=st.integers(1, 9))
def test_a_loop_folds_to_the_iterations_it_ran_property(steps: int, stop: int):
    """However many steps a loop may take and wherever it breaks, the fold counts the
    iterations that ran, its body once per iteration, and says it broke only when it did."""
    torch.manual_seed(0)
    graph = torchatlas.trace(CountedLoop(steps), (torch.randn(2, 4), torch.tensor(float(stop))))
    ran, broke = min(stop, steps), stop <= steps
    reads = _reads(graph)
    assert [r[2] for r in reads] == [i + 1 >= stop for i in range(ran)]
    assert {r[3] for r in reads} == {"break"}
    groups = graph.ir.meta["repeat_groups"]
    if ran < 2:
        assert groups == []
        return
    (group,) = groups
    assert group["count"] == ran and len(group["body"]) == ran and ("exit" in group) == broke
    fold = [line for line in graph.tree().splitlines() if "(Sequential) ×" in line]
    assert len(fold) == 1 and f"×{ran}" in fold[0] and ("broke at" in fold[0]) == broke
    assert "unused" not in graph.tree() and graph.ir.meta["dead_op_count"] == 0
