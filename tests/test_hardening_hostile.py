"""Hostile names from user code reach every renderer intact and inert.

Each case puts one hostile string into a module name, a class name, an op target,
a string argument, a constant, an input key, an output key and the source lines
(see ``_hostile.py``). Every renderer's output must still parse, have the same
structure as for a plain name, show the name (escaped), and carry no raw
terminal controls or markup that escapes its context.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import tempfile
import xml.etree.ElementTree as ET
from functools import lru_cache
from pathlib import Path

import pytest
import torch
from _hostile import (
    HOSTILE_NAMES,
    RAW_CONTROL,
    hostile_model,
    html_data_document,
    render_dot,
    render_html,
    render_summary,
    strings_in,
)

import torchatlas
from torchatlas._text import visible


def cases(renderer: str, *extra: object) -> list:
    """One test case per hostile name."""
    return [
        pytest.param(name, marker, *extra, id=f"{case_id}-{renderer}" if extra else case_id)
        for case_id, name, marker in HOSTILE_NAMES
    ]


@lru_cache(maxsize=None)
def traced(name: str) -> torchatlas.Graph:
    folder = Path(tempfile.mkdtemp(prefix="torchatlas-hostile-"))
    try:
        model, inputs = hostile_model(name, folder)
        return torchatlas.trace(model, (), inputs)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


PLAIN = "plain_name"


@pytest.mark.parametrize("name, marker", cases("capture"))
def test_capture_keeps_the_name_verbatim(name: str, marker: str) -> None:
    ir = traced(name).ir
    assert [s.path for s in ir.scopes] == ["", name, f"{name}.lin"]
    assert ir.scopes[1].cls.endswith("." + name)
    user_op = [n for n in ir.ops() if n.target and n.target.endswith("." + name)]
    assert len(user_op) == 1
    assert any(isinstance(a, str) and name.startswith(a.rstrip("…")) for a in user_op[0].args)
    assert {n.path for n in ir.nodes if n.kind == "constant"} == {f"{name}_scale"}
    assert [n.path for n in ir.nodes if n.kind == "input"] == [f"kwargs[{name!r}]"]
    assert sorted(n.path for n in ir.nodes if n.kind == "output") == sorted([f"output[{name!r}]", "output['plain']"])


@pytest.mark.parametrize("name, marker, ascii", cases("tree-unicode", False) + cases("tree-ascii", True))
def test_tree_escapes_controls_and_keeps_its_shape(name: str, marker: str, ascii: bool) -> None:
    text = traced(name).tree(ascii=ascii)
    text.encode("utf-8")  # printable on any UTF-8 terminal
    assert not RAW_CONTROL.search(text), f"raw control character in tree: {RAW_CONTROL.search(text)!r}"
    if ascii:
        assert text.isascii()
        marker = marker.encode("ascii", "backslashreplace").decode("ascii")
    assert marker in text
    assert len(text.splitlines()) == len(traced(PLAIN).tree(ascii=ascii).splitlines())
    if "\n" in name:
        assert "new\\nline" in text  # shown, escaped, not obeyed


@pytest.mark.parametrize("name, marker", cases("json"))
def test_json_round_trip_is_exact(name: str, marker: str, tmp_path: Path) -> None:
    graph = traced(name)
    path = graph.save(tmp_path / "graph.json")
    loaded = torchatlas.load(path)
    assert loaded.to_dict() == graph.to_dict()
    assert loaded.ir.scopes[1].path == name
    assert json.loads(path.read_text(encoding="utf-8"))["scopes"][1]["path"] == name


def dot_text(name: str) -> str:
    text = render_dot(traced(name))
    if text is None:
        pytest.skip("no DOT renderer yet (Graph.to_dot / torchatlas._render._dot.to_dot)")
    return text


def run_dot(fmt: str, text: str) -> bytes:
    if shutil.which("dot") is None:
        pytest.skip("Graphviz `dot` binary not installed")
    done = subprocess.run(["dot", f"-T{fmt}"], input=text.encode("utf-8"), capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode("utf-8", "replace")
    return done.stdout


@pytest.mark.parametrize("name, marker", cases("dot-controls"))
def test_dot_has_no_raw_controls(name: str, marker: str) -> None:
    text = dot_text(name)
    assert not RAW_CONTROL.search(text), f"raw control character in DOT: {RAW_CONTROL.search(text)!r}"
    assert marker in text


@pytest.mark.parametrize("name, marker", cases("dot"))
def test_dot_parses_with_the_same_structure(name: str, marker: str) -> None:
    layout = json.loads(run_dot("json", dot_text(name)))
    plain = json.loads(run_dot("json", dot_text(PLAIN)))
    assert len(layout.get("objects", [])) == len(plain.get("objects", []))
    assert len(layout.get("edges", [])) == len(plain.get("edges", []))
    svg = ET.fromstring(run_dot("svg", dot_text(name)))  # labels escaped for XML too
    assert marker in "".join(svg.itertext())


class _CountingPattern:
    """Stands in for the sanitiser's pattern and records the length of every text it scans."""

    def __init__(self, pattern: re.Pattern[str]) -> None:
        self.pattern, self.scanned = pattern, []

    def sub(self, repl, text: str) -> str:
        self.scanned.append(len(text))
        return self.pattern.sub(repl, text)


def test_dot_cuts_a_huge_name_before_escaping_it(monkeypatch) -> None:
    """A 100 MB name costs DOT only its label's worth of escaping (it once took 56 s and 1.4 GB)."""
    import torchatlas._text as text_module

    huge = "\x1b" * 100_000_000
    graph = torchatlas.trace(Wrapper(huge), torch.ones(2))
    assert graph.ir.scopes[1].path == huge  # analyses run before counting
    counting = _CountingPattern(text_module._UNSAFE)
    monkeypatch.setattr(text_module, "_UNSAFE", counting)
    dot = graph.to_dot()
    assert max(counting.scanned) <= 300  # the longest limit a DOT string has (tooltips)
    assert len(dot) < 20_000
    assert "\\x1b" * 10 in dot


def test_tree_and_summary_cut_a_huge_name_before_escaping_it(monkeypatch) -> None:
    """Every renderer cuts a name to its line (tree, summary) or label (DOT) before escaping it."""
    import torchatlas._text as text_module

    huge = "\x1b" * 1_000_000
    graph = torchatlas.trace(Wrapper(huge), torch.ones(2))
    assert graph.ir.scopes[1].path == huge
    counting = _CountingPattern(text_module._UNSAFE)
    monkeypatch.setattr(text_module, "_UNSAFE", counting)
    graph.tree()
    graph.summary()
    assert max(counting.scanned) <= 10_000


class Wrapper(torch.nn.Module):
    def __init__(self, child_name: str) -> None:
        super().__init__()
        self.child_name = child_name
        self.add_module(child_name, torch.nn.ReLU())

    def forward(self, x):
        return getattr(self, self.child_name)(x) + 1


def html_page(name: str) -> str:
    page = render_html(traced(name))
    if page is None:
        pytest.skip("no HTML renderer or no built viewer bundle (Graph.to_html / torchatlas._render._html)")
    return page


@pytest.mark.parametrize("name, marker", cases("html"))
def test_html_keeps_the_name_inside_its_json(name: str, marker: str) -> None:
    page = html_page(name)
    page.encode("utf-8")
    doc, scripts = html_data_document(page)
    _, plain_scripts = html_data_document(html_page(PLAIN))
    assert scripts == plain_scripts  # no script element injected or cut short
    assert any(marker in s for s in strings_in(doc))
    for raw in ("<script>alert", "</script><script>", "<!--x-->", "<img src=x"):
        assert raw not in page


@pytest.mark.parametrize("name, marker", cases("html-title"))
def test_html_title_shows_a_hostile_model_name_escaped(name: str, marker: str) -> None:
    """The page's <title> is the root module's class name (it once kept NUL, ESC and bidi raw)."""
    root = type("Root", (torch.nn.Module,), {"forward": lambda self, x: x + 1})
    root.__qualname__ = name
    page = render_html(torchatlas.trace(root(), torch.ones(2)))
    if page is None:
        pytest.skip("no built viewer bundle")
    ours = re.sub(r"<script>.*?</script>", "", page, flags=re.S)  # the viewer bundle's code may hold tabs
    assert not RAW_CONTROL.search(ours), f"raw control character in page: {RAW_CONTROL.search(ours)!r}"
    title = re.search(r"<title>(.*?)</title>", page, re.S)
    assert title and "<" not in title.group(1) and html.unescape(title.group(1)).startswith(visible(name)[:20])


def summary_text(name: str, fmt: str) -> str:
    text = render_summary(traced(name), fmt)
    if text is None:
        pytest.skip("no summary renderer yet (torchatlas._render._summary)")
    return text


UNESCAPED_PIPE = re.compile(r"(?<!\\)\|")
UNESCAPED_AMP = re.compile(r"(?<!\\)&(?!nbsp;)")  # the indent is &nbsp;


@pytest.mark.parametrize("fmt", ["text", "rich", "markdown"])
@pytest.mark.parametrize("name, marker", cases("summary"))
def test_summary_escapes_controls_and_keeps_its_rows(name: str, marker: str, fmt: str) -> None:
    text = summary_text(name, fmt)
    text.encode("utf-8")
    assert not RAW_CONTROL.search(text), f"raw control character in summary: {RAW_CONTROL.search(text)!r}"
    plain = summary_text(PLAIN, fmt)
    if fmt == "markdown":  # a '|' in a name must not open a new column, nor '&#1;' become a character
        assert not UNESCAPED_AMP.search(text)
        assert [len(UNESCAPED_PIPE.findall(row)) for row in text.splitlines()] == [
            len(UNESCAPED_PIPE.findall(row)) for row in plain.splitlines()
        ]
    elif fmt == "text":
        assert len(text.splitlines()) == len(plain.splitlines())
    assert marker.split("(")[0] in text
