"""Every way a tensor's value reaches Python is a read, and each read says what it decided:
``v in t``, ``.numpy()``, iteration; ``and``/``or`` operands apart from the statement they
settle; ``break`` read from the statement's syntax; a size the values decided is no "size only"."""

from __future__ import annotations

import collections
import importlib.util
import os
import re
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from _decision_models import CountedValues, EveryRead, ExitsBySyntax, Nests, SizedCall, line_of
from hypothesis import given, settings
from hypothesis import strategies as st

import torchatlas

HERE = "_decision_models.py"


def _value_reads(graph) -> dict[str, list[tuple[str, object, str | None]]]:
    """op name -> (how, value, statement) of each read of its value (sizes left out)."""
    out: dict[str, list[tuple[str, object, str | None]]] = {}
    for node in graph.ir.ops():
        for r in node.python_reads:
            if r.how != "size":
                out.setdefault(node.target.rsplit(".", 1)[-1], []).append((r.how, r.value, r.statement))
    return out


def test_every_way_a_value_reaches_python_is_a_read_of_the_op_that_made_it():
    torch.manual_seed(0)
    model, x = EveryRead(), torch.randn(2, 4)
    graph = torchatlas.trace(model, x)
    reads = _value_reads(graph)
    h = model.f(x).detach()
    assert reads["round"] == [("bool", 12345.0 in h.round(), None)]  # Tensor.__contains__
    assert [how for how, _, _ in reads["abs"]] == ["numpy"] and [how for how, _, _ in reads["exp"]] == ["numpy"]
    assert [how for how, _, _ in reads["sin"]] == ["tolist"]
    assert sorted(how for how, _, _ in reads["sum"]) == ["complex", "print"]
    assert reads["__getitem__"] == [("index", int(h.argmax(-1)[0]), None)]
    # iterating a tensor is unbind; each element's truth is a read of its own
    assert reads["__gt__"] == [("bool", bool(v > 0), None) for v in h.sigmoid()[0]]
    assert not [n.target for n in graph.ir.ops() if n.meta.get("dead")]


def test_a_trace_patches_nothing_it_leaves_behind():
    before = {cls: dict(vars(cls)) for cls in (torch.Tensor, torch._C.TensorBase)}
    torchatlas.trace(EveryRead(), torch.randn(2, 4))
    with pytest.raises(RuntimeError):
        torchatlas.trace(EveryRead(), torch.randn(2, 5))  # fails inside the forward
    for cls, methods in before.items():
        assert dict(vars(cls)) == methods


# -- and / or / not: the statement's outcome is whether its body ran ----------------------------

# (the test as written, the same test with each truth Python reads logged by ``read``)
_LEAVES = st.one_of(
    st.integers(0, 3).map(lambda i: (f"x[{i}] > 0", f"read(x[{i}] > 0)")),
    # a chained comparison is an ``and`` of its links
    st.integers(0, 3).map(lambda i: (f"0 < x[{i}] < 2", f"(read(0 < x[{i}]) and read(x[{i}] < 2))")),
)
_EXPRESSIONS = st.recursive(
    _LEAVES,
    lambda inner: st.one_of(
        inner.map(lambda e: (f"not ({e[0]})", f"not ({e[1]})")),
        st.tuples(inner, st.sampled_from(["and", "or"]), inner).map(
            lambda t: (f"({t[0][0]} {t[1]} {t[2][0]})", f"({t[0][1]} {t[1]} {t[2][1]})")
        ),
    ),
    max_leaves=5,
)
_MODULE = '''def decide(x):
    if {test}:
        return x + 10
    return x - 10


def evaluated(x, seen):
    def read(t):
        seen.append(bool(t))
        return seen[-1]
    return bool({counted})
'''
_written = iter(range(10**9))


def _load(source: str, folder: str):
    path = Path(folder) / f"decide_{next(_written)}.py"  # a new file each time: lines are cached by name
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, str(path)


@settings(max_examples=60, deadline=None)
@given(_EXPRESSIONS, st.lists(st.sampled_from([-1.0, 1.0, 3.0]), min_size=4, max_size=4))
def test_and_or_not_operands_are_reads_of_their_own_and_the_if_says_whether_its_body_ran(
    expression: tuple[str, str], values: list[float]
):
    x = torch.tensor(values)
    test, counted = expression
    with tempfile.TemporaryDirectory() as folder:
        module, path = _load(_MODULE.format(test=test, counted=counted), folder)
        seen: list[bool] = []
        body_ran = module.evaluated(x, seen)
        assert bool(torch.equal(module.decide(x), x + 10)) == body_ran
        graph = torchatlas.trace(module.decide, x)
    reads = [r for n in graph.ir.ops() for r in n.python_reads if r.source.file == path]
    settled = [r.value for r in reads if r.statement == "if"]
    assert settled == [body_ran], test  # one read settled the if: the last operand Python evaluated
    assert len(reads) == len(seen)  # each operand Python evaluated is a read
    assert all(r.statement in ("and", "or") for r in reads if r.statement != "if")
    if "not" not in test:  # an operand's truth as its and/or saw it: what Python read
        assert [r.value for r in reads if r.statement != "if"] == [v for v, r in zip(seen, reads) if r.statement != "if"]


def test_break_and_continue_are_read_from_the_statement_not_the_line_text():
    graph = torchatlas.trace(ExitsBySyntax(), torch.ones(2, 4))
    places = {(r.source.line, r.statement) for n in graph.ir.ops() for r in n.python_reads}
    assert places == {
        (line_of(ExitsBySyntax, "# never: a comment"), "break"),  # a trailing comment with a colon
        (line_of(ExitsBySyntax, ": continue"), "continue"),  # a slice colon in a one-line if
        (line_of(ExitsBySyntax, "(x.abs().sum() < -2 or"), "or"),  # a condition over two lines:
        (line_of(ExitsBySyntax, "x.abs().sum() > 1e9):"), "break"),  # its last operand settles it
    }
    table = graph.decisions()
    assert f"{HERE}:{line_of(ExitsBySyntax, ': continue')}  continue  went on ×3" in table


def test_a_decorated_nested_method_reads_its_multi_line_test():
    graph = torchatlas.trace(Nests.Decorated(), torch.ones(3))
    line = line_of(Nests.Decorated, "if label and")
    assert [(r.source.line, r.statement, r.value) for n in graph.ir.ops() for r in n.python_reads] == [
        (line, "and", True),  # x.sum() > 0: the next operand decides
        (line, "if", True),  # not (x.max() > 5): the body ran
    ]


def test_the_aten_level_reads_the_statements_the_same_way():
    places = {}
    for level in ("python", "aten"):
        graph = torchatlas.trace(ExitsBySyntax(), torch.ones(2, 4), level=level)
        places[level] = [(r.source.line, r.statement, r.value) for n in graph.ir.nodes for r in n.python_reads]
    assert places["aten"] == places["python"] and len(places["aten"]) == 12


def test_a_size_its_values_decided_is_a_count_and_a_size_fixed_by_shapes_stays_size_only():
    torch.manual_seed(0)
    model, x = CountedValues(), torch.randn(2, 4)
    graph = torchatlas.trace(model, x)
    h = model.f(x)
    by_op = {n.target.rsplit(".", 1)[-1]: n for n in graph.ir.ops() if n.python_reads}
    assert [(r.how, r.value) for r in by_op["nonzero"].python_reads] == [("count", len(torch.nonzero(h > 0)))]
    assert [r.how for r in by_op["__getitem__"].python_reads] == ["count"]  # h[mask]: rows as many as True
    assert not by_op["nonzero"].meta["size_only"] and not by_op["__getitem__"].meta["size_only"]
    assert by_op["linear"].meta["size_only"]  # g(x).shape[0]: the shape of x fixes it
    row = rf"{HERE}:{line_of(CountedValues, 'torch.nonzero(h')}\s+size\s+= {len(torch.nonzero(h > 0))}\s+nonzero"
    assert re.search(row, graph.decisions())


def test_a_call_read_for_its_size_or_deciding_an_if_says_so_on_its_tree_line():
    torch.manual_seed(0)
    model, x = SizedCall(), torch.randn(3, 8)
    graph = torchatlas.trace(model, x)
    lines = graph.tree().splitlines()
    aux = next(line for line in lines if "aux (Sequential)" in line)
    assert aux.endswith(f"(size only @ {HERE}:{line_of(SizedCall, '.shape[-1]')})")
    for depth in (1, None):  # collapsed or not, the call's line says it
        line = next(line for line in graph.tree(depth=depth).splitlines() if "aux (Sequential)" in line)
        assert "(size only @" in line
    taken = "taken" if bool(model.gate(model.proj(x)[:1])) else "not taken"
    gate = next(line for line in lines if "gate (Linear)" in line)
    assert gate.endswith(f"⇢ if @ {HERE}:{line_of(SizedCall, 'self.gate(h[:1])')} ({taken})")


# -- generate() of a GPT-2: the reads an untraced run makes, and none of them drawn unused -------

_READERS = ("__bool__", "item", "tolist", "__int__", "__float__", "__index__", "__contains__", "numpy", "__array__", "__format__")


def _reads_of_an_untraced_run(run) -> collections.Counter:
    """(file name, line) of each user line that read a tensor's value, as Tensor's own readers,
    patched for the run, see them (torch's own calls left out: ``__contains__`` calls ``.item()``)."""
    seen: collections.Counter = collections.Counter()
    torch_dir = os.path.dirname(torch.__file__)
    originals = {name: torch.Tensor.__dict__.get(name) for name in _READERS}

    def logged(method):
        def reader(*args, **kwargs):
            caller = sys._getframe(1).f_code.co_filename
            if not caller.startswith(torch_dir):
                seen[(os.path.basename(caller), sys._getframe(1).f_lineno)] += 1
            return method(*args, **kwargs)
        return reader

    for name in _READERS:
        setattr(torch.Tensor, name, logged(getattr(torch.Tensor, name)))
    try:
        run()
    finally:
        for name, original in originals.items():
            if original is None:
                delattr(torch.Tensor, name)
            else:
                setattr(torch.Tensor, name, original)
    return seen


@pytest.mark.slow
def test_gpt2_generate_lists_its_in_reads_and_draws_nothing_it_read_unused():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=2, n_embd=64, n_head=2, vocab_size=100, n_positions=64, pad_token_id=0, eos_token_id=99, bos_token_id=98
    )
    model = transformers.GPT2LMHeadModel(config).eval()
    ids = torch.tensor([[5, 6, 7]])

    def generate(x):
        return model.generate(x, max_new_tokens=4, min_new_tokens=4, do_sample=False)

    truth = _reads_of_an_untraced_run(lambda: generate(ids))
    graph = torchatlas.trace(generate, ids)
    read = collections.Counter(
        (os.path.basename(r.source.file), r.source.line) for n in graph.ir.nodes for r in n.python_reads if r.how != "size"
    )
    assert read == truth
    # ``pad_token_id in input_ids[:, [-1, 0]]``, once a step
    contains = [(f, line) for (f, line), count in truth.items() if f == "modeling_utils.py" and count == 4]
    assert len(contains) == 1
    assert re.search(rf"modeling_utils\.py:{contains[0][1]}\s+if\s+not taken ×4\s+getitem", graph.decisions())
    assert not [n.id for n in graph.ir.ops() if n.meta.get("dead") and n.python_reads]
    assert not [line for line in graph.tree().splitlines() if "(unused)" in line and "⇢" in line]
