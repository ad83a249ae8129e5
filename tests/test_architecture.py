"""The layer rules of docs/architecture.md, checked by parsing every import, and the public API pinned."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

import torchatlas

PACKAGE = Path(torchatlas.__file__).resolve().parent
SOURCES = sorted(PACKAGE.rglob("*.py"))

# layer -> the package layers it may import (itself included); layers not listed are the top
# (_api, __init__...) and may import anything. The floor (_ir, _ops, _text, _io) imports the
# standard library only; the presentation layer (_view) decides what every output shows;
# renderers draw an analysed graph from it and never run a pass; the CLI uses the public API.
ALLOWED = {
    "_ir": {"_ir"},
    "_ops": {"_ops"},
    "_text": {"_text"},
    "_io": {"_io"},
    "_capture": {"_capture", "_ir", "_io", "_ops", "_text"},
    "_passes": {"_passes", "_ir", "_ops", "_text"},
    "_view": {"_view", "_ir", "_ops", "_text"},
    "_render": {"_render", "_view", "_ir", "_ops", "_text"},
    "_terminal": {"_terminal"},
    "_cli": {"_cli", "__init__", "_io", "_text", "_terminal"},
}
PACKAGES = {p.parent.name for p in SOURCES if p.name == "__init__.py" and p.parent != PACKAGE}
"""Layers that are packages (``_render``, ``_view``, ``_cli``...): outside one, only its face
(``__init__``) is imported, never a private module of it."""
FACE_EXCEPTIONS: set[tuple[str, str]] = set()
"""(importing module, imported private module) pairs allowed past a face, each with why: none today."""
FLOOR = {"_ir", "_ops", "_text", "_io"}
TORCH_FREE = FLOOR | {"_passes", "_view", "_render"}
STDLIB_ONLY = FLOOR
TORCH_PACKAGES = {"torch", "transformers", "torchvision", "functorch"}
MAX_LINES = 650  # "no file over ~600 lines"

PUBLIC_API = sorted(torchatlas.__all__)
"""Every public name, as the package declares it: each must exist and be documented."""

def module_name(path: Path) -> str:
    parts = ["torchatlas", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(source: str, module: str, is_package: bool) -> list[tuple[str, int]]:
    """Absolute dotted names imported anywhere in ``source`` (function bodies included), with line numbers."""
    found: list[tuple[str, int]] = []
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
            else:
                base = ""
            target = ".".join(p for p in (base, node.module) if p)
            if node.module is None:  # from . import _source: each name may be a module
                found += [(f"{target}.{alias.name}", node.lineno) for alias in node.names]
            else:
                found.append((target, node.lineno))
    return found


def layer_of(dotted: str) -> str | None:
    """``torchatlas._render._tree`` -> ``_render``; the bare package -> ``__init__``; outside -> None."""
    parts = dotted.split(".")
    if parts[0] != "torchatlas":
        return None
    return parts[1] if len(parts) > 1 else "__init__"


def violations(path: Path, source: str) -> list[str]:
    module = module_name(path)
    layer = layer_of(module)
    problems = []
    for target, line in imported_modules(source, module, path.name == "__init__.py"):
        where = f"{path.relative_to(PACKAGE.parent)}:{line} imports {target}"
        top = target.split(".")[0]
        target_layer = layer_of(target)
        if layer in ALLOWED and target_layer is not None and target_layer not in ALLOWED[layer]:
            problems.append(f"{where}: layer {layer} may only import {sorted(ALLOWED[layer])}")
        private = target.split(".")[2:3]
        if (
            target_layer in PACKAGES
            and target_layer != layer
            and private
            and private[0].startswith("_")
            and (module, target) not in FACE_EXCEPTIONS
        ):
            problems.append(f"{where}: outside {target_layer}, import its face (torchatlas.{target_layer}), not a private module")
        if layer in TORCH_FREE and top in TORCH_PACKAGES:
            problems.append(f"{where}: layer {layer} must not touch torch")
        if layer in STDLIB_ONLY and target_layer is None and top not in sys.stdlib_module_names:
            problems.append(f"{where}: layer {layer} may import the standard library only")
    return problems


def test_the_package_has_every_layer() -> None:
    layers = {layer_of(module_name(p)) for p in SOURCES}
    assert set(ALLOWED) <= layers


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_follow_the_layer_rules(path: Path) -> None:
    assert violations(path, path.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize(
    ("relative", "source", "expected"),
    [
        ("_render/_x.py", "from .._capture import capture_python", "layer _render may only import"),
        ("_render/_x.py", "from .._passes import analyze", "layer _render may only import"),
        ("_render/_x.py", "from torchatlas._io import write_atomic", "layer _render may only import"),
        ("_cli/_main.py", "from .._render import GraphvizNotFoundError", "layer _cli may only import"),
        ("_cli/_main.py", "from torchatlas._api import Graph", "layer _cli may only import"),
        ("_cli/_models.py", "from .._api import make_input", "layer _cli may only import"),
        ("_cli/_hf.py", "from .._passes import analyze", "layer _cli may only import"),
        ("_api.py", "from ._render._dot import render", "import its face (torchatlas._render), not a private module"),
        ("_render/_x.py", "from torchatlas._view._units import fold_runs", "import its face (torchatlas._view)"),
        ("__init__.py", "from ._cli._main import main", "import its face (torchatlas._cli)"),
        ("_ops.py", "from ._ir import Node", "layer _ops may only import"),
        ("_render/_x.py", "def f():\n    import torch\n", "must not touch torch"),
        ("_passes/_x.py", "from torchatlas._api import trace", "layer _passes may only import"),
        ("_passes/_x.py", "import torchatlas", "layer _passes may only import"),
        ("_capture/_x.py", "from .._render import _tree", "layer _capture may only import"),
        ("_view/_x.py", "from .._render import _dot", "layer _view may only import"),
        ("_view/_x.py", "from .._passes import analyze", "layer _view may only import"),
        ("_view/_x.py", "import torch", "must not touch torch"),
        ("_capture/__init__.py", "from .. import _passes", "layer _capture may only import"),
        ("_ir.py", "import numpy", "standard library only"),
    ],
)
def test_the_checker_catches_violations(relative: str, source: str, expected: str) -> None:
    [problem] = violations(PACKAGE / relative, source)
    assert expected in problem


def test_the_checker_accepts_allowed_imports() -> None:
    source = "from .._ir import GraphIR\nfrom .._ops import op_name\nfrom .. import _text\nfrom . import _labels\nimport json\n"
    assert violations(PACKAGE / "_render" / "_x.py", source) == []


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_source_file_is_too_long(path: Path) -> None:
    assert len(path.read_text(encoding="utf-8").splitlines()) <= MAX_LINES


def test_public_api_is_declared_once() -> None:
    assert len(set(torchatlas.__all__)) == len(torchatlas.__all__)
    assert {"trace", "Graph", "load", "FORMATS"} <= set(PUBLIC_API)


@pytest.mark.parametrize("name", PUBLIC_API)
def test_every_public_name_exists_and_is_documented(name: str) -> None:
    value = getattr(torchatlas, name)
    if name != "__version__":
        assert (value.__doc__ or "").strip(), f"torchatlas.{name} has no docstring"


def test_no_public_attribute_is_left_out_of_all() -> None:
    public = {
        name
        for name, value in vars(torchatlas).items()
        if not name.startswith("_") and not isinstance(value, type(torchatlas))
    }
    assert public <= set(torchatlas.__all__)


def test_dir_lists_the_public_api_and_no_imported_module() -> None:
    public = {name for name in dir(torchatlas) if not name.startswith("_")}
    assert public == {name for name in torchatlas.__all__ if not name.startswith("_")}
