"""Fuzzing: random models with a known true graph, nested in random (often hostile)
module names, through trace and every renderer.

The program inside comes from ``_randmodels`` (ops, views, in-place writes, writes
into slices, shared Linear calls, dict inputs, tuple/list outputs). Around it this
file wraps up to five modules with random names and class names; one of them may
call its child twice (a loop; only for programs that write nothing, so both passes
compute the same thing), and one may register its child under a second name too
(a shared module: torch names it by its first). The truth is shifted accordingly.

Budget: ``FUZZ_EXAMPLES`` (default 30); ``FUZZ_EXAMPLES=10000 pytest tests/test_fuzz.py``
for a long run. Figures are recorded in docs/hardening.md.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass

from _capture_helpers import outputs, wiring
from _hostile import HOSTILE_NAMES, RAW_CONTROL, html_data_document, render_dot, render_html
from _randmodels import KINDS, Program, RandomModel, Step, TrueGraph, build, programs
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from torch import nn

import torchatlas

FUZZ_EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "30"))
FUZZ = settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

WRITES = {"act_inplace", "add_", "iadd", "mul_", "relu_", "setitem", "slice_mul_"}
# The pure step with the same operands and pool growth, so later pool indices stay valid;
# ``None``: the write makes no new value and is dropped.
PURE_TWIN = {"act_inplace": "relu", "add_": "add", "iadd": "add", "mul_": "scale", "relu_": "relu",
             "setitem": None, "slice_mul_": None}
HOSTILE = [name for _, name, _ in HOSTILE_NAMES]


def usable_name(name: str) -> bool:
    return bool(name) and "." not in name and not hasattr(nn.Module, name)


NAMES = (
    st.sampled_from(HOSTILE)
    | st.text(min_size=1, max_size=12)
    | st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True)
).filter(usable_name)


class Wrapper(nn.Module):
    """Calls its one child ``times`` times with the model's inputs; returns the last result."""

    def __init__(self, child_name: str, child: nn.Module, times: int, alias: str | None) -> None:
        super().__init__()
        self.add_module(child_name, child)
        if alias is not None:
            self.add_module(alias, child)
        self.child_name, self.times = child_name, times

    def forward(self, x, pack):
        child = self._modules[self.child_name]
        for _ in range(self.times):
            out = child(x, pack)
        return out


@dataclass(frozen=True)
class Nesting:
    names: tuple[str, ...]
    """Child names from the root down; the program's module sits at the end."""
    classes: tuple[str, ...]
    """``__qualname__`` of each wrapper."""
    loop_level: int | None
    """The wrapper that calls its child twice."""
    alias_level: int | None
    """The wrapper that also registers its child under a second name."""
    alias: str


@st.composite
def nestings(draw: st.DrawFn, program: Program) -> Nesting:
    names = tuple(draw(st.lists(NAMES, max_size=5)))
    classes = tuple(draw(NAMES) for _ in names)
    pure = not any(step.kind in WRITES for step in program.steps)
    levels = st.none() | st.integers(0, len(names) - 1) if names else st.none()
    loop_level = draw(levels) if pure else None
    alias_level = draw(levels)
    alias = draw(NAMES.filter(lambda a: alias_level is None or a != names[alias_level]))
    return Nesting(names, classes, loop_level, alias_level, alias)


def nest(model: RandomModel, nesting: Nesting) -> nn.Module:
    module: nn.Module = model.module
    for level in reversed(range(len(nesting.names))):
        cls = type("Wrapper", (Wrapper,), {})
        cls.__qualname__ = nesting.classes[level]
        times = 2 if level == nesting.loop_level else 1
        alias = nesting.alias if level == nesting.alias_level else None
        module = cls(nesting.names[level], module, times, alias)
    return module


def shift(label: str, by: int, prefix: str) -> str:
    """A truth label in the r-th pass of a loop, with the program's module under ``prefix``."""
    if label.startswith("op"):
        head, dot, slot = label[2:].partition(".")
        return f"op{int(head) + by}{dot}{slot}"
    if label.startswith(("param:", "buffer:")) and prefix:
        kind, path = label.split(":", 1)
        return f"{kind}:{prefix}.{path}"
    return label


def nested_truth(truth: TrueGraph, nesting: Nesting) -> TrueGraph:
    names = nesting.names
    prefix = ".".join(names)
    passes = 2 if nesting.loop_level is not None else 1
    loop_from = nesting.loop_level if nesting.loop_level is not None else len(names)
    # Under a wrapper, the program's module call returns some inputs unchanged: each such value
    # becomes one identity node in that call (readers, here the outputs, read through it).
    passed = [] if not names else list(dict.fromkeys(v for v in truth.outputs.values() if v.startswith("input:")))
    n_ops = len(truth.ops) + len(passed)

    def identity(label: str, r: int) -> str:
        return f"op{r * n_ops + len(truth.ops) + passed.index(label)}"
    inner_calls: dict[str, int] = {}
    for path, _ in truth.scopes:
        inner_calls[path] = inner_calls.get(path, 0) + 1

    def under(path: str) -> str:
        return ".".join(p for p in (prefix, path) if p)

    out = TrueGraph()
    out.scopes = [(".".join(names[:level]), 0) for level in range(min(loop_from + 1, len(names)))]
    for r in range(passes):
        out.scopes += [(".".join(names[:level]), r) for level in range(loop_from + 1, len(names))]
        out.scopes += [(under(path), call + r * inner_calls[path]) for path, call in truth.scopes]

        def read(label: str, r: int = r) -> str:
            # An input a module call of the previous pass returned unchanged is the same tensor, but
            # the next pass got it from the wrapper's own variable, not from that call: it reads the input.
            return shift(label, r * n_ops, prefix)

        out.ops += [(target, tuple(read(x) for x in reads)) for target, reads in truth.ops]
        out.ops += [("torchatlas.identity", (read(label),)) for label in passed]
        out.inplace += truth.inplace + [False] * len(passed)
        out.op_scopes += [under(path) for path in truth.op_scopes] + [prefix] * len(passed)

    last = passes - 1
    out.outputs = {
        path: identity(label, last) if label in passed else shift(label, last * n_ops, prefix)
        for path, label in truth.outputs.items()
    }
    return out


@dataclass
class Case:
    model: nn.Module
    args: tuple
    truth: TrueGraph
    context: str
    nesting: Nesting | None = None


def without_writes(program: Program) -> Program:
    """The program with every write replaced by its pure twin, so a loop may run it twice."""
    steps = []
    for s in program.steps:
        if s.kind not in WRITES:
            steps.append(s)
        elif PURE_TWIN[s.kind] is not None:
            steps.append(Step(PURE_TWIN[s.kind], s.operands, s.choice))
    return Program(tuple(steps) or (Step("relu", (0,)),), program.returned)


@st.composite
def cases(draw: st.DrawFn) -> Case:
    program = draw(programs())
    if draw(st.booleans()):
        program = without_writes(program)
    nesting = draw(nestings(program))
    inner = build(program)
    model = nest(inner, nesting)
    context = f"\n{nesting!r}\n{inner.source}"
    return Case(model, inner.args, nested_truth(inner.truth, nesting), context, nesting)


def check_capture(graph: torchatlas.Graph, case: Case) -> None:
    ir, truth, context = graph.ir, case.truth, case.context
    assert wiring(ir) == truth.ops, context
    assert [n.inplace for n in ir.ops()] == truth.inplace, context
    assert [ir.scope(n.scope).path for n in ir.ops()] == truth.op_scopes, context
    assert [(s.path, s.call) for s in ir.scopes] == truth.scopes, context
    assert outputs(ir) == truth.outputs, context


def check_renderers(graph: torchatlas.Graph, context: str) -> None:
    tree = graph.tree()
    assert not RAW_CONTROL.search(tree), context
    assert graph.tree(ascii=True).isascii(), context
    graph.tree(depth=1)

    doc = json.loads(graph.to_json())
    loaded = torchatlas.GraphIR.from_dict(doc)
    assert loaded.to_dict() == graph.to_dict(), context
    assert torchatlas.Graph(loaded).tree() == tree, context

    dot = render_dot(graph)
    if dot is not None and shutil.which("dot"):
        done = subprocess.run(["dot", "-Tjson"], input=dot.encode("utf-8"), capture_output=True, timeout=60)
        assert done.returncode == 0, context + done.stderr.decode("utf-8", "replace")
        json.loads(done.stdout)
    page = render_html(graph)
    if page is not None:
        data, _ = html_data_document(page)
        assert data, context
        assert not re.search(r"<script>alert|</script><script>", page), context


@FUZZ
@given(cases())
def test_random_nested_models_capture_and_render(case: Case) -> None:
    assert case.nesting is not None
    event(f"wrapper depth {len(case.nesting.names)}")
    event(f"loop: {case.nesting.loop_level is not None}, alias: {case.nesting.alias_level is not None}")
    event(f"hostile name: {any(n in HOSTILE for n in case.nesting.names + case.nesting.classes)}")
    graph = torchatlas.trace(case.model, case.args)
    check_capture(graph, case)
    check_renderers(graph, case.context)


def test_every_step_kind_nested_deep_with_a_loop_and_an_alias() -> None:
    """A fixed deep case, so the nesting logic itself is checked on every run."""
    pure = [k for k in sorted(KINDS) if k not in WRITES]
    for kind in pure:
        n_operands, n_new = KINDS[kind]
        program = Program((Step(kind, tuple(range(n_operands)), 1), Step("linear", (0,), 0)), (2 + n_new, 0))
        names = ("a", "</script>", "c\x1b[31m", "d", "e")
        nesting = Nesting(names, ("A", "B\n", "C", "D", "E"), loop_level=2, alias_level=1, alias="shared")
        inner = build(program)
        case = Case(nest(inner, nesting), inner.args, nested_truth(inner.truth, nesting), kind)
        graph = torchatlas.trace(case.model, case.args)
        check_capture(graph, case)
        check_renderers(graph, kind)
