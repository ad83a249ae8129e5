"""Models whose names come from an attacker: every string torchatlas shows is user-controlled.

``hostile_model(name, folder)`` writes a small model module into ``folder`` and
imports it, so that ``name`` reaches a graph through every door user code has:

* a module name (``add_module(name, ...)``) and a class name (``__qualname__``),
* an op target: a user function that opts into ``__torch_function__``
  (``torch.overrides.handle_torch_function``) named ``name``,
* a string argument of that op, a plain-tensor attribute (a constant) named ``name``,
* an input keyword and an output dict key,
* the text of the source lines that made the calls (a trailing comment).

Renderers are reached through the ``Graph`` methods when they exist and through
the renderer modules otherwise; ``None`` means the renderer does not exist yet.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import torch

# Each entry: (id for the test, the hostile name, a printable marker that must survive).
HOSTILE_NAMES: list[tuple[str, str, str]] = [
    ("script-tag", "</script><script>alert(1)</script>", "alert(1)"),
    ("html-comment", "<!--x--><img src=x onerror=alert(2)>", "onerror"),
    ("quotes", "it's \"quoted\" `back`", "quoted"),
    ("braces", "{record|<port> fields}[brackets]", "record"),
    ("amp-lt-gt", "a<b>&c&amp;d", "amp"),
    ("backslash", "back\\slash\\n\\\\", "slash"),
    ("newline", "new\nline\r\nend", "line"),
    ("ansi", "\x1b[31mred\x1b[0m\x1b]0;title\x07", "red"),
    ("bidi", "bidi\u202eevil\u202c\u2066iso\u2069", "evil"),
    ("line-separator", "para\u2028graph\u2029", "graph"),
    ("nul-and-del", "nul\x00del\x7fc1\x85", "del"),
    ("unicode", "emoji 🔥 汉字 é", "汉字"),
    ("dot-keywords", "digraph G { node [shape=box] } -> --", "digraph"),
    ("very-long", "long" + "x" * 5000 + "tail", "longxxxx"),
    ("lone-surrogate", "lone\ud800surrogate", "surrogate"),
    # Character references: Graphviz decodes them in any string, and these three are not XML characters.
    ("charref-control", "ref&#1;", "#1;"),
    ("charref-nonchar", "ref&#xFFFE;", "#xFFFE;"),
    ("charref-surrogate", "ref&#xD800;", "#xD800;"),
]

# Characters a terminal acts on: C0/C1 controls (bar newline), line separators, bidi controls.
RAW_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")

_SOURCE = '''
import torch
from torch import nn


def user_op(x, tag):
    if torch.overrides.has_torch_function((x,)):
        return torch.overrides.handle_torch_function(user_op, (x,), x, tag)
    return x * 2


class Inner(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(self.lin(x))  # COMMENT


class Outer(nn.Module):
    def __init__(self, name):
        super().__init__()
        self.name = name
        self.add_module(name, Inner())
        self.__dict__[name + "_scale"] = torch.full((4,), 0.5)

    def forward(self, **inputs):
        x = inputs[self.name]  # COMMENT
        y = getattr(self, self.name)(x)  # COMMENT
        y = user_op(y, self.name)  # COMMENT
        y = y * self.__dict__[self.name + "_scale"]  # COMMENT
        return {self.name: y, "plain": y + 1}
'''

# Python source lines cannot hold these; everything else goes into the comments verbatim.
_NOT_IN_SOURCE = re.compile(r"[\x00\n\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029\ud800-\udfff]")


def hostile_model(name: str, folder: Path) -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    """The model and its keyword inputs; ``name`` is everywhere (see module docstring)."""
    comment = _NOT_IN_SOURCE.sub("?", name)
    path = Path(folder) / "hostile_user_model.py"
    path.write_text(_SOURCE.replace("COMMENT", comment), encoding="utf-8")
    module_name = f"hostile_user_model_{abs(hash((name, str(folder))))}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = mod
    spec.loader.exec_module(mod)
    mod.Inner.__qualname__ = name
    mod.user_op.__qualname__ = name
    model = mod.Outer(name).eval()
    return model, {name: torch.randn(2, 4)}


# -- renderers ---------------------------------------------------------------------


def render_dot(graph: Any) -> str:
    return str(graph.to_dot())


def render_html(graph: Any) -> str | None:
    """The page's text, or ``None`` without a built viewer bundle."""
    from torchatlas._render._html import ViewerBundleMissing

    try:
        return str(graph.to_html())
    except ViewerBundleMissing:
        return None


def render_summary(graph: Any, fmt: str) -> str:
    """The summary table as text (``"text"``, ``"markdown"`` or ``"rich"``)."""
    return str(graph.summary(format=fmt))


class ScriptBlocks(HTMLParser):
    """Every ``<script>`` element of a page as (attributes, text), the way a browser splits them."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.blocks: list[tuple[dict[str, str | None], str]] = []
        self._open: dict[str, str | None] | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "script":
            self._open, self._text = dict(attrs), []

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "script" and self._open is not None:
            self.blocks.append((self._open, "".join(self._text)))
            self._open = None


def html_data_document(page: str) -> tuple[Any, int]:
    """The graph JSON embedded in a page, and how many script elements the page has."""
    parser = ScriptBlocks()
    parser.feed(page)
    parser.close()
    data = [text for attrs, text in parser.blocks if attrs.get("type") == "application/json"]
    assert len(data) == 1, f"expected one JSON data block, found {len(data)}"
    return json.loads(data[0]), len(parser.blocks)


def strings_in(value: Any) -> list[str]:
    """Every string (keys included) inside a JSON value."""
    out: list[str] = []
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            out.append(v)
        elif isinstance(v, dict):
            out.extend(str(k) for k in v)
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return out


DELETE = object()
"""``set_path``'s value that deletes the field instead."""


def set_path(doc: Any, path: tuple[Any, ...], value: Any) -> None:
    """Set (or, with ``DELETE``, remove) the field of a saved document at ``path``, in place."""
    target = doc
    for key in path[:-1]:
        target = target[key]
    if value is DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value


Members = dict[str, bytes]
"""A zip archive's members by name, as the .pt2 tests build and mutate them."""


class Touch:
    """Unpickling this creates ``path``: the proof that loading ran code."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (self.path, "w"))
