"""Nothing a loadable file holds crashes a renderer.

Real saved documents (CoolCNN with statistics and profile times, a small transformer-like
model with statistics and kept activations, the same model with its backward pass and at
the ATen level, a partial graph, and a ``compile_report`` with a graph break) get one
field changed: any field, to a value of another type or an extreme one (NaN, 1e400, a
5,000-digit integer, ``-1``, ``2**63``, ``10**12``, an id of the wrong kind...), or
deleted; or one capture-time meta key of a node, a scope or the graph set to such a
value. Or two fields at once: some harm only together (a huge ``compile_graphs`` is drawn
only where ``graph_breaks`` says the graph is a compile report). ``load`` must then raise
``GraphFormatError``, or every renderer must work, within a time and memory bound: tree,
summary (text, markdown, rich), DOT, HTML, JSON, Model Explorer, and a diff of the graph
against itself.

The hypothesis tests draw random mutations; the ``slow`` one tries every value on one
field of each kind (the same field of every node of one op target counts once).
"""

from __future__ import annotations

import contextlib
import copy
import io
import itertools
import json
import os
import resource
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from _capture_helpers import load_coolcnn
from _compile_models import PrintInForward
from _hostile import DELETE, set_path
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from torch import nn

import torchatlas
from torchatlas._ir._document import GRAPH_FACTS, NODE_FACTS, SCOPE_FACTS
from torchatlas._render._html import ViewerBundleMissing


class Block(nn.Module):
    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.mlp = nn.Sequential(nn.Linear(width, 16), nn.GELU(), nn.Linear(16, width))

    def forward(self, x):
        q, k, v = self.qkv(self.norm(x)).chunk(3, dim=-1)
        attended = torch.softmax(q @ k.transpose(-1, -2) / 8**0.5, dim=-1) @ v
        unused = attended * 3  # noqa: F841 (dead code, for the dead-code pass)
        x = x + attended
        return x + self.mlp(x)


class Tiny(nn.Module):
    """Embedding, two repeated attention blocks, a head; a dict output."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 8)
        self.blocks = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(8, 10)

    def forward(self, ids):
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x)
        return {"logits": self.head(x), "hidden": x}


class Fails(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x):
        return self.linear(x) @ torch.ones(5, 5)


@pytest.fixture(scope="module")
def documents() -> dict[str, dict[str, Any]]:
    torch.manual_seed(0)
    cool = load_coolcnn()
    ids = torch.randint(0, 10, (1, 5))
    graphs = {
        "coolcnn": torchatlas.trace(cool.CoolCNN().eval(), cool.example_input(), stats=True, profile=True),
        "tiny": torchatlas.trace(Tiny().eval(), (ids,), stats=True, save="blocks.0.*"),
        "tiny-backward": torchatlas.trace(Tiny(), (ids,), backward=True, loss_fn=lambda out: out["logits"].sum()),
        "tiny-aten": torchatlas.trace(Tiny().eval(), (ids,), level="aten"),
        "partial": torchatlas.trace(Fails(), torch.ones(2, 4), partial=True),
    }
    with contextlib.redirect_stdout(io.StringIO()):  # the model prints: that is its graph break
        graphs["compiled"] = torchatlas.compile_report(PrintInForward(), torch.randn(2, 8))
    return {name: graph.to_dict() for name, graph in graphs.items()}


# Values JSON can hold but Python's json module turns into something else, written as raw text.
_RAW = {
    "<5000-digit integer>": "1" + "0" * 5000,
    "<negative 5000-digit integer>": "-1" + "0" * 5000,
    "<1e400>": "1e400",
    "<NaN>": "NaN",
    "<-Infinity>": "-Infinity",
}
EXTREMES: list[Any] = [
    None, True, False, 0, -1, 1, 2**63, -(2**63), 10**12, 10**20, 0.5, -0.0, 1e308, *_RAW,
    "", "s0", "n0", "n1", "x", "\x00\x1b\u202e\ud800", "&#1;", [], {}, [None], [[]], [-1], ["s0"], ["n0"], {"": None},
]
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
VALUES = st.sampled_from(EXTREMES) | JSON_VALUES


def encode(doc: dict[str, Any]) -> str:
    text = json.dumps(doc)
    for marker, raw in _RAW.items():
        text = text.replace(json.dumps(marker), raw)
    return text


def renders_everywhere(graph: torchatlas.Graph) -> None:
    graph.tree()
    graph.tree(ascii=True)
    graph.tree(depth=1)
    for fmt in ("text", "markdown", "rich"):
        graph.summary(format=fmt)
    graph.to_dot()
    try:
        graph.to_html()
    except ViewerBundleMissing:
        pass
    json.loads(graph.to_json())
    graph.to_model_explorer()
    changes = torchatlas.diff(graph, graph)
    assert changes.equal
    str(changes)
    changes.tree()
    changes.summary()
    changes.to_markdown()
    json.dumps(changes.to_dict())
    changes.to_html(view="list")
    try:
        changes.to_html(view="graph")
    except ViewerBundleMissing:
        pass


class TooSlow(Exception):
    pass


def _too_slow(_signum: int, _frame: Any) -> None:
    raise TooSlow("rendering a 100 KB document took over 30 s")


@contextlib.contextmanager
def bounded(seconds: float = 30, memory: int = 2 << 30) -> Iterator[None]:
    """Fail (``TooSlow``, ``MemoryError``) rather than hang or exhaust the machine: the
    block may run ``seconds`` and grow the address space by ``memory`` bytes."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as f:
        mapped = int(f.read().split()[0]) * resource.getpagesize()
    limit = mapped + memory if hard == resource.RLIM_INFINITY else min(hard, mapped + memory)
    previous = signal.signal(signal.SIGALRM, _too_slow)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        signal.signal(signal.SIGALRM, previous)


def loads_and_renders_or_is_refused(text: str, tmp_path: Path, rendered: set[str] | None = None) -> str:
    """Load ``text`` and render the graph everywhere. With ``rendered`` (the saved forms of
    graphs already rendered), a graph that loads to one of them is not rendered again: the
    renderers are pure functions of the graph, and its saved form holds all of it."""
    path = tmp_path / "graph.json"
    path.write_text(text, encoding="utf-8")
    with bounded():
        try:
            graph = torchatlas.load(path)
        except torchatlas.GraphFormatError as e:
            assert "\n" not in str(e)
            return "refused"
        if rendered is not None:
            saved = graph.to_json()
            if saved in rendered:
                return "rendered"
            rendered.add(saved)
        renders_everywhere(graph)
    return "rendered"


def mutated(doc: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    """``doc`` with the field at ``path`` set (or deleted); only the containers on the path are
    copied, so ``doc`` is left as it was."""
    top = copy.copy(doc)
    target = top
    for key in path[:-1]:
        target[key] = copy.copy(target[key])
        target = target[key]
    set_path(target, path[-1:], value)
    return top


FACT_KEYS = {"node": sorted(NODE_FACTS), "scope": sorted(SCOPE_FACTS), "graph": sorted(GRAPH_FACTS)}


def draw_mutation(data: st.DataObject, doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with one field set to a drawn value or deleted, or one capture-time meta key set."""
    value = data.draw(VALUES | st.just(DELETE), label="value")
    if data.draw(st.booleans(), label="set a capture-time meta key"):
        owner = data.draw(st.sampled_from(["node", "scope", "graph"]), label="owner")
        key = data.draw(st.sampled_from(FACT_KEYS[owner]), label="key")
        if owner == "graph":
            path: tuple[Any, ...] = ("meta", key)
            if not isinstance(doc.get("meta"), dict):  # an earlier mutation took the graph's meta away
                doc = mutated(doc, ("meta",), {})
        else:
            items = doc.get("nodes" if owner == "node" else "scopes")  # an earlier mutation may have deleted it
            if not isinstance(items, list) or not items or not all(isinstance(i, dict) for i in items):
                return doc  # an earlier mutation took the list away
            path = ("nodes" if owner == "node" else "scopes", data.draw(st.integers(0, len(items) - 1)), "meta", key)
            meta = items[path[1]].get("meta")  # an earlier mutation may have made it a non-object
            doc = mutated(doc, path[:-1], dict(meta) if isinstance(meta, dict) else {})
        value = data.draw(VALUES, label="value")
    else:
        path, target = (), doc
        while True:  # walk down to a random field
            keys = list(target) if isinstance(target, dict) else list(range(len(target)))
            key = data.draw(st.sampled_from(keys))
            path += (key,)
            child = target[key]
            if not isinstance(child, (dict, list)) or not child or data.draw(st.booleans()):
                break
            target = child
        if value is DELETE and not isinstance(path[-1], str):
            value = None
    return mutated(doc, path, value)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_mutated_document_loads_and_renders_or_is_refused(
    documents: dict[str, dict[str, Any]], tmp_path: Path, data: st.DataObject
) -> None:
    doc = documents[data.draw(st.sampled_from(sorted(documents)), label="document")]
    event(loads_and_renders_or_is_refused(encode(draw_mutation(data, doc)), tmp_path))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_two_fields_changed_together_load_and_render_or_are_refused(
    documents: dict[str, dict[str, Any]], tmp_path: Path, data: st.DataObject
) -> None:
    """Two mutations, the second drawn on the first's result, often both on the graph's meta."""
    doc = documents[data.draw(st.sampled_from(sorted(documents)), label="document")]
    if data.draw(st.booleans(), label="two graph facts"):
        keys = data.draw(st.lists(st.sampled_from(FACT_KEYS["graph"]), min_size=2, max_size=2, unique=True), label="keys")
        doc = copy.deepcopy(doc)
        for key in keys:
            doc["meta"][key] = data.draw(VALUES, label=key)
    else:
        doc = draw_mutation(data, draw_mutation(data, doc))
    event(loads_and_renders_or_is_refused(encode(doc), tmp_path))


def _graph_fact_values(documents: dict[str, dict[str, Any]]) -> dict[str, list[Any]]:
    """Each graph-level capture-time key's values in any document, each count also as 10**12."""
    values: dict[str, list[Any]] = {}
    for doc in documents.values():
        for key in FACT_KEYS["graph"]:
            if key in doc["meta"] and doc["meta"][key] not in values.setdefault(key, []):
                values[key].append(doc["meta"][key])
    for found in values.values():
        if any(type(v) is int for v in found):
            found.append(10**12)
    return {k: v for k, v in values.items() if v}


@pytest.mark.parametrize("name", ["tiny", "compiled"])
def test_every_pair_of_graph_facts_from_any_document_loads_and_renders_or_is_refused(
    documents: dict[str, dict[str, Any]], tmp_path: Path, name: str
) -> None:
    """Every two graph-level facts set together, to values other documents hold (or a huge count)."""
    values = _graph_fact_values(documents)
    keys = sorted(values)
    rendered: set[str] = set()
    for i, first in enumerate(keys):
        for second in keys[i + 1 :]:
            for a, b in itertools.product(values[first], values[second]):
                doc = copy.deepcopy(documents[name])
                doc["meta"].update({first: a, second: b})
                try:
                    loads_and_renders_or_is_refused(encode(doc), tmp_path, rendered)
                except Exception as e:
                    raise AssertionError(f"{name}: {first} = {str(a)[:40]}, {second} = {str(b)[:40]}: {type(e).__name__}: {e}") from e


@pytest.mark.parametrize("name", ["coolcnn", "tiny", "partial", "compiled"])
def test_a_huge_graph_count_draws_a_few_swatches(documents: dict[str, dict[str, Any]], tmp_path: Path, name: str) -> None:
    """A 2 KB claim of 10**12 compiled graphs once drew one legend swatch per graph (an OOM kill)."""
    doc = copy.deepcopy(documents[name])
    doc["meta"].update(compile_graphs=10**12, graph_breaks=[])
    assert loads_and_renders_or_is_refused(encode(doc), tmp_path) == "rendered"
    graph = torchatlas.load(tmp_path / "graph.json")
    assert "… 999,999,999,992 more" in graph.to_dot()
    assert graph.to_dot().count(">graph ") == 8
    with contextlib.suppress(ViewerBundleMissing):
        page = graph.to_html()
        assert "… 999,999,999,992 more" in page and page.count('">graph ') == 8


def _fields(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if path:
        yield path
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in items:
        yield from _fields(child, (*path, key))


def _kind(doc: dict[str, Any], path: tuple[Any, ...]) -> tuple[str, ...]:
    """The field's path with list positions replaced by what sits there (an op's target, a scope)."""
    out, target = [], doc
    for key in path:
        item = target[key]
        if isinstance(target, list):
            if isinstance(item, dict) and "kind" in item:
                key = f"{item['kind']}:{item.get('target')}"
            elif isinstance(item, dict) and "class" in item:
                key = "root scope" if item.get("parent") is None else "scope"
            else:
                key = "#"
        out.append(str(key))
        target = item
    return tuple(out)


_PARTS = 4
"""Each document's kinds are checked in this many tests, so that a suite run on several cores
shares them out (the backward document's alone take minutes)."""


@pytest.mark.slow
@pytest.mark.parametrize("part", range(_PARTS))
@pytest.mark.parametrize("name", ["coolcnn", "tiny", "tiny-backward", "tiny-aten", "partial", "compiled"])
def test_every_field_of_every_kind_with_every_extreme_value(
    documents: dict[str, dict[str, Any]], tmp_path: Path, name: str, part: int
) -> None:
    doc = documents[name]
    first_of_kind: dict[tuple[str, ...], tuple[Any, ...]] = {}
    for path in _fields(doc):
        first_of_kind.setdefault(_kind(doc, path), path)
    # Every value on an even spread of the kinds keeps CI's full run in minutes; the whole
    # set is one environment variable away (TORCHATLAS_FUZZ_KINDS=0: all of them).
    kinds = list(first_of_kind.items())
    most = int(os.environ.get("TORCHATLAS_FUZZ_KINDS", "24")) or len(kinds)
    rendered: set[str] = set()
    for kind, path in kinds[:: max(1, -(-len(kinds) // most))][part::_PARTS]:
        for value in EXTREMES + ([DELETE] if isinstance(path[-1], str) else []):
            try:
                loads_and_renders_or_is_refused(encode(mutated(doc, path, value)), tmp_path, rendered)
            except Exception as e:
                shown = "delete" if value is DELETE else repr(value)[:40]
                raise AssertionError(f"{name}: {'/'.join(kind)} = {shown}: {type(e).__name__}: {e}") from e


def test_a_graph_count_below_the_graphs_ops_ran_in_is_refused(documents: dict[str, dict[str, Any]], tmp_path: Path) -> None:
    doc = copy.deepcopy(documents["compiled"])
    highest = max(n["meta"]["compile_region"] for n in doc["nodes"] if (n.get("meta") or {}).get("compile_region") is not None)
    doc["meta"]["compile_graphs"] = highest
    (tmp_path / "graph.json").write_text(encode(doc), encoding="utf-8")
    with pytest.raises(torchatlas.GraphFormatError, match=f"compile_graphs is {highest}, but an op ran in compiled graph {highest}"):
        torchatlas.load(tmp_path / "graph.json")


def _deep_calls(doc: dict[str, Any], levels: int) -> None:
    parent = doc["scopes"][-1]["id"]
    for i in range(levels):
        doc["scopes"].append({"id": f"z{i}", "parent": parent, "path": f"deep{i}", "class": "D", "call": 0, "outputs": []})
        parent = f"z{i}"
    next(n for n in doc["nodes"] if n["kind"] == "op")["scope"] = parent


def _nested_argument(doc: dict[str, Any], levels: int) -> None:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    next(n for n in doc["nodes"] if n["kind"] == "op").setdefault("args", []).append(value)


def _shape(doc: dict[str, Any], dims: int) -> None:
    next(n for n in doc["nodes"] if n["kind"] == "op")["outputs"][0]["shape"] = [2**62] * dims


def _source_line(doc: dict[str, Any], code: str) -> None:
    for item in doc["nodes"] + doc["scopes"]:
        if item.get("source"):
            item["source"]["code"] = code


@pytest.mark.parametrize(
    "edit, outcome",
    [
        (lambda d: _deep_calls(d, 700), "rendered"),
        (lambda d: _nested_argument(d, 32), "rendered"),
        (lambda d: _nested_argument(d, 400), "refused"),
        (lambda d: _shape(d, 1), "rendered"),
        (lambda d: _shape(d, 2), "refused"),
        (lambda d: _source_line(d, "-" * 100_000 + "1"), "rendered"),
        (lambda d: _source_line(d, "a" + ".b" * 200_000), "rendered"),
        (lambda d: _source_line(d, "x" + " " * 300_000 + "!"), "rendered"),
    ],
    ids=["calls-700-deep", "argument-32-deep", "argument-400-deep", "size-2**62", "2**124-elements",
         "long-minus-line", "long-attribute-line", "long-space-line"],
)
def test_a_document_deep_or_long_loads_and_renders_or_is_refused(
    documents: dict[str, dict[str, Any]], tmp_path: Path, edit: Any, outcome: str
) -> None:
    doc = copy.deepcopy(documents["tiny"])
    edit(doc)
    assert loads_and_renders_or_is_refused(encode(doc), tmp_path) == outcome


def test_the_tree_opens_a_hundred_levels_of_calls_and_closes_the_rest(documents: dict[str, dict[str, Any]]) -> None:
    doc = copy.deepcopy(documents["tiny"])
    _deep_calls(doc, 300)
    lines = torchatlas.Graph(torchatlas.GraphIR.from_dict(doc)).tree(ascii=True).splitlines()
    assert any("deep9" in line for line in lines) and not any("deep299" in line for line in lines)
