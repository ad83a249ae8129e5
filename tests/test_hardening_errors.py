"""Bad input gets a clear answer: a one-line CLI error, a note naming where a forward pass
failed, a partial graph that marks the failing op, and a refusal that says what to call
instead for models ``trace`` cannot see into."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import torch
from torch import nn

import torchatlas
from torchatlas._text import error_text


def line_of(obj: object, marker: str) -> int:
    lines, start = inspect.getsourcelines(obj)
    return start + next(i for i, text in enumerate(lines) if marker in text)


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.proj = nn.Linear(4, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.proj(x))
        return y @ torch.ones(4, 4)  # FAILS when width != 4


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block(4), Block(5)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


class Broken(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = Encoder()
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x))


class PythonError(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Sequential(nn.Linear(4, 4), Raiser())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x)


class Raiser(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise ValueError("not a tensor problem")  # RAISES


# -- a forward pass that fails part-way ---------------------------------------------------


def test_failure_note_names_op_module_and_line() -> None:
    with pytest.raises(RuntimeError, match="cannot be multiplied") as info:
        torchatlas.trace(Broken(), torch.randn(2, 4))
    notes = [n for n in getattr(info.value, "__notes__", []) if n.startswith("torchatlas:")]
    assert len(notes) == 1 and "\n" not in notes[0]
    note = notes[0]
    assert "torch.Tensor.__matmul__" in note
    assert "'encoder.blocks.1'" in note and "(Block)" in note
    assert f"{__file__}:{line_of(Block.forward, 'FAILS')}" in note


def test_python_error_note_names_module_and_line() -> None:
    with pytest.raises(ValueError, match="not a tensor problem") as info:
        torchatlas.trace(PythonError(), torch.randn(2, 4))
    note = next(n for n in info.value.__notes__ if n.startswith("torchatlas:"))
    assert f"{__file__}:{line_of(Raiser.forward, 'RAISES')}" in note
    assert "'inner.1'" in note and "(Raiser)" in note


def test_partial_trace_keeps_the_graph_up_to_the_failing_op() -> None:
    graph = torchatlas.trace(Broken(), torch.randn(2, 4), partial=True)
    assert isinstance(graph.error, RuntimeError) and "cannot be multiplied" in str(graph.error)
    failed = [n for n in graph.ir.nodes if "error" in n.meta]
    assert len(failed) == 1 and failed[0] is graph.ir.nodes[-1]
    assert failed[0].target == "torch.Tensor.__matmul__" and "cannot be multiplied" in failed[0].meta["error"]
    assert graph.ir.scope(failed[0].scope).path == "encoder.blocks.1"
    assert failed[0].source is not None and failed[0].source.line == line_of(Block.forward, "FAILS")
    # everything before the failure is there: both blocks' linear+relu, block 0's matmul
    assert [n.target.rsplit(".", 1)[-1] for n in graph.ir.ops()] == [
        "linear", "relu", "ones", "__matmul__", "linear", "relu", "ones", "__matmul__"
    ]
    assert "head" not in {s.path for s in graph.ir.scopes}
    assert graph.ir.meta["failure"]["scope"] == failed[0].scope


def test_partial_graph_renders_and_shows_failed(tmp_path: Path) -> None:
    graph = torchatlas.trace(Broken(), torch.randn(2, 4), partial=True)
    tree = graph.tree()
    failed_lines = [line for line in tree.splitlines() if "✗ failed" in line]
    assert len(failed_lines) == 1 and "matmul" in failed_lines[0] and "cannot be multiplied" in failed_lines[0]
    loaded = torchatlas.load(graph.save(tmp_path / "partial.json"))
    assert loaded.to_dict() == graph.to_dict() and "✗ failed" in loaded.tree()


def test_partial_trace_of_a_python_error_keeps_the_graph() -> None:
    graph = torchatlas.trace(PythonError(), torch.randn(2, 4), partial=True)
    assert isinstance(graph.error, ValueError)
    # the ops that ran, then the node marking where Python raised; nothing was returned
    assert [n.target for n in graph.ir.ops()] == ["torch.nn.functional.linear", "torchatlas.raise"]
    assert not any(n.kind == "output" for n in graph.ir.nodes)


def test_without_partial_the_exception_is_unchanged() -> None:
    class Custom(Exception):
        pass

    class Raises(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise Custom("mine")

    with pytest.raises(Custom) as info:
        torchatlas.trace(Raises(), torch.randn(1))
    assert type(info.value) is Custom and info.value.args == ("mine",)


# -- models trace cannot see into ---------------------------------------------------------


def small() -> nn.Module:
    return nn.Sequential(nn.Linear(3, 4), nn.ReLU()).eval()




def forward_fn(x: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x) * 2


def structure(graph: torchatlas.Graph) -> list[tuple]:
    """What was computed, without source lines (the calling line differs between the two traces)."""
    ir = graph.ir
    return [(s.path, s.cls, s.call, s.parent) for s in ir.scopes] + [
        (n.kind, n.target, n.path, n.inputs, n.args, n.kwargs, n.outputs) for n in ir.nodes
    ]


@pytest.mark.parametrize(
    "original",
    [small(), forward_fn],
    ids=["module", "function"],
)
def test_compiled_model_is_traced_as_its_original(original) -> None:
    x = torch.randn(2, 3)
    expected = structure(torchatlas.trace(original, x))
    compiled = torch.compile(original)
    try:
        got = torchatlas.trace(compiled, x)
    except Exception as e:  # a plain failure, not dynamo's long report
        pytest.fail(f"trace(torch.compile(m)) raised {type(e).__name__}: {str(e).splitlines()[0]}")
    assert structure(got) == expected


@pytest.mark.parametrize("make", [lambda m: torch.jit.script(m), lambda m: torch.jit.trace(m, torch.randn(2, 3))],
                         ids=["script", "jit-trace"])
def test_torchscript_is_refused_naming_what_to_do(make) -> None:
    scripted = make(small())
    with pytest.raises((TypeError, torchatlas.TraceError), match=r"TorchScript.*original nn\.Module"):
        torchatlas.trace(scripted, torch.randn(2, 3))


def test_exported_program_is_refused_naming_from_export() -> None:
    program = torch.export.export(small(), (torch.randn(2, 3),))
    with pytest.raises((TypeError, torchatlas.TraceError), match=r"torchatlas\.from_export"):
        torchatlas.trace(program, torch.randn(2, 3))


class FailsInLeaf(nn.Module):
    """The failing op is the only op of a torch.nn leaf module, which renderers draw as one box."""

    def __init__(self) -> None:
        super().__init__()
        self.ok = nn.Linear(4, 4)
        self.bad = nn.Linear(5, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bad(torch.relu(self.ok(x)))


def test_every_renderer_marks_the_failing_op() -> None:
    graph = torchatlas.trace(FailsInLeaf(), torch.randn(2, 4), partial=True)
    # tree: the leaf opens to show its failing op; collapsed by depth, the call says so
    assert [line for line in graph.tree().splitlines() if "✗ failed" in line] == [
        "    └── linear  ✗ failed: RuntimeError: mat1 and mat2 shapes cannot be multiplied (2x4 and 5x2)"
    ]
    assert graph.tree(depth=0).endswith("✗ failed inside")
    # diagram: the one box drawn for `bad` is marked, the one for `ok` is not
    boxes = {line.split()[0]: line for line in graph.to_dot().splitlines() if "(Linear)" in line}
    bad, ok = (boxes[f'"{s.id}"'] for p in ("bad", "ok") for s in graph.ir.scopes if s.path == p)
    assert "✗ failed inside" in bad and "#d93025" in bad and "failed" not in ok
    # web page: the op and every call around it carry the mark
    from torchatlas._render._html import viewer_document

    doc = viewer_document(graph.ir)
    failing = next(n for n in graph.ir.nodes if "error" in n.meta)
    assert [n["err"] for n in doc["nodes"] if "err" in n] == [failing.meta["error"]]
    assert [s["path"] for s in doc["scopes"] if s.get("err")] == ["", "bad"]
    # summary: a closing line names the op, the call and the source line
    last = graph.summary(format="text").rstrip().splitlines()[-1]
    assert last.startswith("✗ the forward pass failed at torch.nn.functional.linear in bad (Linear) at ")
    assert "test_hardening_errors.py" in last


class _LooksUp(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        table: dict[str, torch.Tensor] = {}
        return table["missing"] + x


class FailsInPython(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.lookup = _LooksUp()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lookup(self.fc(x))


def test_partial_trace_marks_a_failure_outside_any_op() -> None:
    graph = torchatlas.trace(FailsInPython(), torch.randn(2, 4), partial=True)
    assert isinstance(graph.error, KeyError)
    [marker] = [n for n in graph.ir.nodes if "error" in n.meta]
    # in the call the exception passed through, at the line that raised, after the ops that ran
    assert graph.ir.scope(marker.scope).path == "lookup"
    assert marker.target == "torchatlas.raise" and marker.meta["error"] == "KeyError: 'missing'"
    assert marker.source is not None and 'table["missing"]' in marker.source.code
    assert [n.target for n in graph.ir.nodes if n.kind == "op"] == ["torch.nn.functional.linear", "torchatlas.raise"]
    assert graph.ir.meta["failure"]["scope"] == marker.scope
    assert graph.tree().splitlines()[-1] == "    └── raise  ✗ failed: KeyError: 'missing'"
    last = graph.summary(format="text").rstrip().splitlines()[-1]
    assert last.startswith("✗ the forward pass failed in lookup (_LooksUp) at ") and last.endswith("KeyError: 'missing'")
    assert "unknown cost" not in graph.summary(format="text")


def test_an_assert_in_the_models_own_forward_is_marked_in_the_root() -> None:
    class Checks(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = x.relu()
            assert y.shape[1] == 5, "expected 5 features"
            return y

    graph = torchatlas.trace(Checks(), torch.randn(2, 4), partial=True)
    marker = graph.ir.nodes[-1]
    assert (marker.target, marker.scope, marker.meta["error"]) == ("torchatlas.raise", "s0", "AssertionError: expected 5 features")


def test_an_error_whose_reason_is_on_its_next_line_keeps_the_reason() -> None:
    # transformers' validation errors end their first line in ':' and give the reason below
    exc = ValueError("Validation error for field 'rope_parameters':\n  expected dict, got str (value: 'foo')\n\nmore")
    assert error_text(exc) == "ValueError: Validation error for field 'rope_parameters': expected dict, got str (value: 'foo')"
    assert error_text(RuntimeError("shape mismatch\nat line 2")) == "RuntimeError: shape mismatch"


class TwoInputs(nn.Module):
    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return x * mask


@pytest.mark.parametrize("second", [torch.ones(3), torch.ones(1), 5], ids=["tensor", "one-element", "int"])
def test_a_second_positional_input_is_answered_with_the_tuple_call(second: object) -> None:
    with pytest.raises(TypeError, match=r"trace\(model, \(x, mask\)\)"):
        torchatlas.trace(TwoInputs(), torch.randn(3), second)
    graph = torchatlas.trace(TwoInputs(), (torch.randn(3), torch.ones(3)))
    assert [n.path for n in graph.ir.nodes if n.kind == "input"] == ["args[0]", "args[1]"]
