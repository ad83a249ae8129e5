"""The page document is typed data (issue 29): every JSON key the page receives is a field of a
``_view._document`` dataclass, every field says what it holds, and the document of real graphs
reads back into those types and writes the same JSON again."""

from __future__ import annotations

import ast
import inspect
import json
import types
import typing
from dataclasses import fields, is_dataclass

import _compile_models as compile_models
import pytest
import torch
import torch._dynamo as dynamo

import torchatlas
from torchatlas import _example
from torchatlas._render._html import script_json, viewer_document
from torchatlas._view import (
    DOCUMENT_TYPES,
    PageBreak,
    PageCompile,
    PageDocument,
    PageFoldBox,
    PageMeta,
    PageNode,
    PageScope,
    PageView,
    to_json,
)

transformers = pytest.importorskip("transformers")


def _field_docs(cls: type) -> dict[str, str]:
    """Field name -> the string literal right below its annotation, in the class body that declares it."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass is object or not is_dataclass(klass):
            continue
        body = ast.parse(inspect.getsource(klass)).body[0].body
        for stmt, after in zip(body, [*body[1:], None]):
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                doc = after.value.value if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant) else None
                docs[stmt.target.id] = doc
    return docs


@pytest.mark.parametrize("cls", DOCUMENT_TYPES, ids=lambda c: c.__name__)
def test_every_field_is_documented(cls: type) -> None:
    assert cls.__doc__
    docs = _field_docs(cls)
    assert set(docs) == {f.name for f in fields(cls)}
    for name, doc in docs.items():
        assert isinstance(doc, str) and doc.strip(), f"{cls.__name__}.{name} has no docstring"


def _llama() -> torchatlas.Graph:
    torch.manual_seed(0)
    cfg = transformers.AutoConfig.for_model(
        "llama", num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=2,
        num_key_value_heads=2, vocab_size=100,
    )
    ids = torch.randint(0, 100, (1, 8))
    return torchatlas.trace(transformers.AutoModel.from_config(cfg).eval(), kwargs={"input_ids": ids}, stats=True)


def _diff() -> torchatlas.Graph:
    x = torch.randn(2, 8)
    a = torchatlas.trace(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4)), x)
    b = torchatlas.trace(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU(), torch.nn.Linear(8, 6)), x)
    return torchatlas.diff(a, b).graph


def _compile_report() -> torchatlas.GraphIR:
    torch.manual_seed(0)
    try:
        # a second input set of another shape: a recompile, which ends no graph
        return torchatlas.compile_report(compile_models.TwoBreaks(), torch.randn(2, 8), more_args=[torch.randn(5, 8)]).ir
    finally:
        dynamo.reset()


def _compare() -> torchatlas.GraphIR:
    """Three runs: a nudged weight and bf16 autocast against fp32 (``ovs``, ``cmp``, ``compared``)."""
    torch.manual_seed(0)
    model, x = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2)).eval(), torch.randn(3, 4)
    nudged = torchatlas.trace(model, x, fingerprint=True)
    with torch.no_grad():
        model[2].bias += 0.5
        with torch.autocast("cpu", dtype=torch.bfloat16):
            bf16 = torchatlas.trace(model, x, fingerprint=True)
    return torchatlas.compare((model, (x,)), nudged, bf16, rtol=1e-2, atol=1e-4).graph.ir


FIXTURES = {
    "coolcnn": lambda: torchatlas.trace(_example.CoolCNN(), _example.example_input()).ir,
    "llama-2-layers": lambda: _llama().ir,
    "coolcnn-backward": lambda: torchatlas.trace(_example.CoolCNN(), _example.example_input(), backward=True).ir,
    "diff": _diff,
    "compile-report": _compile_report,
    "compare": _compare,
}


def _check(value: typing.Any, hint: typing.Any, where: str) -> None:
    """``value`` (plain JSON data) has the type ``hint`` names: a small JSON schema of the dataclasses."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is typing.Any:
        return
    if origin in (typing.Union, types.UnionType):
        assert value is not None or type(None) in args, where
        if value is not None:
            errors = []
            for arg in (a for a in args if a is not type(None)):
                try:
                    _check(value, arg, where)
                    return
                except AssertionError as e:
                    errors.append(e)
            raise errors[0]
        return
    if origin is typing.Literal:
        assert value in args, where
    elif origin is list or hint is list:
        assert isinstance(value, list), where
        for i, item in enumerate(value):
            _check(item, args[0] if args else typing.Any, f"{where}[{i}]")
    elif origin is dict:
        assert isinstance(value, dict), where
        for key, item in value.items():
            _check(item, args[1], f"{where}.{key}")
    elif is_dataclass(hint):
        assert isinstance(value, dict), where
        hints = typing.get_type_hints(hint)
        known = {f.name: f for f in fields(hint)}
        assert set(value) <= set(known), f"{where}: keys that are no field of {hint.__name__}: {set(value) - set(known)}"
        for name, f in known.items():
            if name in value:
                _check(value[name], hints[name], f"{where}.{name}")
            else:  # left out: only a field that is None by default
                assert f.default is None, f"{where}: {hint.__name__}.{name} is missing"
    elif hint is float:
        assert isinstance(value, (int, float)) and not isinstance(value, bool), where
    else:
        assert isinstance(value, hint) and not (hint is int and isinstance(value, bool)), (where, value, hint)


def _rebuild(data: dict[str, typing.Any]) -> PageDocument:
    """The typed document back from its JSON; a key that is no field fails here."""
    compile_data = data.get("compile")
    return PageDocument(**{
        **data,
        "view": PageView(**data["view"]),
        "folds": {g: PageFoldBox(**f) for g, f in data["folds"].items()},
        "scopes": [PageScope(**s) for s in data["scopes"]],
        "nodes": [PageNode(**n) for n in data["nodes"]],
        "metas": [PageMeta(**m) for m in data["metas"]],
        "compile": None if compile_data is None else PageCompile(**{**compile_data, "breaks": [PageBreak(**b) for b in compile_data["breaks"]]}),
    })


@pytest.mark.parametrize("name", list(FIXTURES))
def test_the_document_is_its_dataclasses(name: str) -> None:
    ir = FIXTURES[name]()
    data = json.loads(script_json(viewer_document(ir)))  # what the page holds, after the trip through JSON
    _check(data, PageDocument, "document")
    assert to_json(_rebuild(data)) == data
    assert all(value is not None for n in data["nodes"] for value in n.values())  # None is left out, never written
    if name == "compile-report":
        assert any("cr" in n for n in data["nodes"])
        kinds = {b["kind"]: b for b in data["compile"]["breaks"]}
        assert "recompile" in kinds and "graph" not in kinds["recompile"] and len(kinds) > 1
    if name == "diff":
        assert any(s.get("dch") == 1 for s in data["scopes"])
    if name == "coolcnn-backward":
        assert any(s.get("bw") == 1 for s in data["scopes"])
    if name == "llama-2-layers":
        assert any("st" in n for n in data["nodes"])


def test_a_field_that_is_no_key_is_refused() -> None:
    with pytest.raises(TypeError):
        PageNode(k=0, s=0, c=0, shape=[1])
