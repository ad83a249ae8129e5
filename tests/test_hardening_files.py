"""Graph files: broken ones are refused with a clear ``GraphFormatError``, nothing in them
is ever executed, and a crash while saving never leaves a half-written file."""

from __future__ import annotations

import ast
import builtins
import copy
import json
import os
import pickle
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from _capture_helpers import load_coolcnn
from _hostile import DELETE, set_path

import torchatlas

SRC = Path(torchatlas.__file__).resolve().parent


@pytest.fixture(scope="module")
def graph() -> torchatlas.Graph:
    cool = load_coolcnn()
    return torchatlas.trace(cool.CoolCNN().eval(), cool.example_input())


@pytest.fixture(scope="module")
def document(graph: torchatlas.Graph) -> dict[str, Any]:
    return graph.to_dict()


def write(tmp_path: Path, data: str | bytes) -> Path:
    path = tmp_path / "graph.json"
    path.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return path


def load_error(path: Path) -> str:
    with pytest.raises(torchatlas.GraphFormatError) as info:
        torchatlas.load(path)
    message = str(info.value)
    assert "\n" not in message and str(path) in message
    return message


# -- broken bytes ---------------------------------------------------------------


@pytest.mark.parametrize("fraction", [0.0, 0.01, 0.5, 0.99])
def test_truncated_file_says_so(graph: torchatlas.Graph, tmp_path: Path, fraction: float) -> None:
    text = graph.to_json()
    message = load_error(write(tmp_path, text[: int(len(text) * fraction)]))
    assert "truncated" in message or "not valid JSON" in message


@pytest.mark.parametrize(
    "data, expected",
    [
        (b"\xff\xfe\x00garbage\x80", "UTF-8"),
        (pickle.dumps({"format": "torchatlas-graph"}), "UTF-8"),
        (b"[1, 2, 3]", "JSON object"),
        (b'"just a string"', "JSON object"),
        (b"null", "JSON object"),
        (b'{"format": "something-else", "version": 1}', "not a torchatlas graph"),
        (b'{"format": "torchatlas-graph"}', "version"),
        (b'{"format": "torchatlas-graph", "version": "1", "scopes": [], "nodes": []}', "version"),
        (b'{"format": "torchatlas-graph", "version": 1, "scopes": {}, "nodes": []}', "scopes"),
        (b'{"format": "torchatlas-graph", "version": 1, "scopes": [], "nodes": 3}', "nodes"),
        (b'{"format": "torchatlas-graph", "version": 1, "meta": NaN, "scopes": [], "nodes": []}', "meta"),
    ],
    ids=["binary", "pickle", "array", "string", "null", "other-format", "no-version", "string-version",
         "scopes-object", "nodes-number", "nan-meta"],
)
def test_malformed_file_names_the_problem(tmp_path: Path, data: bytes, expected: str) -> None:
    assert expected in load_error(write(tmp_path, data))


def test_deeply_nested_json_is_a_format_error(tmp_path: Path) -> None:
    load_error(write(tmp_path, "[" * 200_000 + "]" * 200_000))


def test_future_version_asks_for_an_upgrade(document: dict[str, Any], tmp_path: Path) -> None:
    doc = {**document, "version": document["version"] + 1}
    message = load_error(write(tmp_path, json.dumps(doc)))
    assert f"version {doc['version']}" in message and "upgrade torchatlas" in message


# -- well-formed JSON, broken graph ------------------------------------------------




def _set(path: tuple[Any, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda doc: set_path(doc, path, value)


MUTATIONS: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "node-input-from-the-future": (_set(("nodes", 1, "inputs"), ["n99"]), "not an earlier node"),
    "node-unknown-kind": (_set(("nodes", 1, "kind"), "lambda"), "unknown kind"),
    "node-unknown-scope": (_set(("nodes", 1, "scope"), "s99"), "unknown scope"),
    "node-without-id": (_set(("nodes", 1, "id"), DELETE), "lacks field"),
    "node-duplicate-id": (_set(("nodes", 1, "id"), "n0"), "duplicate"),
    "slots-mismatch": (_set(("nodes", 5, "input_slots"), []), "input_slots"),
    "scope-parent-later": (_set(("scopes", 1, "parent"), "s5"), "not an earlier scope"),
    "scope-without-class": (_set(("scopes", 1, "class"), DELETE), "lacks field"),
    "scope-output-missing": (_set(("scopes", 1, "outputs"), ["n999"]), "is not a node"),
    "shape-not-list": (_set(("nodes", 0, "outputs", 0, "shape"), "1x3"), "shape"),
    "node-not-object": (_set(("nodes", 2), [1, 2]), "must be an object"),
    "source-not-object": (_set(("nodes", 5, "source"), "file.py:3"), "source"),
}

# Wrongly typed fields (these once escaped as bare TypeError/ValueError/OverflowError).
MISTYPED = {
    "scope-call-not-int": _set(("scopes", 1, "call"), "first"),
    "scope-call-huge": _set(("scopes", 1, "call"), 1e400),
    "scope-meta-not-object": _set(("scopes", 1, "meta"), 5),
    "scope-outputs-not-list": _set(("scopes", 1, "outputs"), 5),
    "node-args-not-list": _set(("nodes", 5, "args"), 5),
    "node-kwargs-not-object": _set(("nodes", 5, "kwargs"), [1]),
    "slot-not-int": _set(("nodes", 5, "input_slots", 0), "zero"),
    "input-unhashable": _set(("nodes", 5, "inputs"), [["n0"]]),
    "source-line-huge": _set(("nodes", 5, "source", "line"), 1e400),
}



@pytest.mark.parametrize(
    "mutate, expected",
    [pytest.param(*v, id=k) for k, v in MUTATIONS.items()]
    + [  # the location is checked below
        pytest.param(m, "", id=k)
        for k, m in MISTYPED.items()
    ],
)
def test_broken_graph_is_refused_with_its_location(
    document: dict[str, Any], tmp_path: Path, mutate: Callable[[dict[str, Any]], None], expected: str
) -> None:
    doc = copy.deepcopy(document)
    mutate(doc)
    text = json.dumps(doc).replace("Infinity", "1e400")  # json writes inf as Infinity
    message = load_error(write(tmp_path, text))
    assert expected in message
    assert re.search(r"(nodes|scopes)\[\d+\]|scope s\d+", message), f"no location in {message!r}"


# -- nothing in a file is executed -----------------------------------------------


def _calls_and_imports(tree: ast.AST) -> list[str]:
    """Every imported module name and called dotted name in a module."""
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.append(node.module)
        elif isinstance(node, ast.Call):
            parts, f = [], node.func
            while isinstance(f, ast.Attribute):
                parts.append(f.attr)
                f = f.value
            if isinstance(f, ast.Name):
                parts.append(f.id)
                name = ".".join(reversed(parts))
                found.append(name + ("(weights_only=True)" if _weights_only(node) else ""))
    return found


def _weights_only(call: ast.Call) -> bool:
    """``torch.load(..., weights_only=True)``: the restricted unpickler, which builds tensors only."""
    return any(k.arg == "weights_only" and isinstance(k.value, ast.Constant) and k.value.value is True for k in call.keywords)


UNSAFE_MODULES = {"pickle", "cPickle", "_pickle", "marshal", "shelve", "dill", "cloudpickle", "joblib"}
UNSAFE_CALLS = {"eval", "exec", "compile", "__import__", "torch.load", "yaml.load", "yaml.unsafe_load", "numpy.load", "np.load"}


def test_the_package_never_unpickles_or_evaluates() -> None:
    """No ``torch.load``: a ``.pt2`` is read as data; ``torch.export.load`` runs only for
    ``trust=True`` (``tests/test_pt2_safety.py``)."""
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        for name in _calls_and_imports(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if name.split(".")[0] in UNSAFE_MODULES or name in UNSAFE_CALLS:
                offenders.append(f"{path.relative_to(SRC)}: {name}")
    assert offenders == []


def test_load_runs_without_pickle_or_eval(graph: torchatlas.Graph, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = graph.save(tmp_path / "graph.json")

    def forbidden(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("load used an unsafe deserializer")

    for owner, attr in [(pickle, "load"), (pickle, "loads"), (pickle, "Unpickler"), (torch, "load"),
                        (builtins, "eval"), (builtins, "exec")]:
        monkeypatch.setattr(owner, attr, forbidden)
    assert torchatlas.load(path).to_dict() == graph.to_dict()


def test_files_are_only_written_through_write_atomic() -> None:
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        if path.name == "_io.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            if isinstance(f, ast.Attribute) and f.attr in ("write_text", "write_bytes"):
                offenders.append(f"{path.relative_to(SRC)}:{node.lineno} .{f.attr}()")
            if isinstance(f, ast.Name) and f.id == "open" or isinstance(f, ast.Attribute) and f.attr == "open":
                modes = [a for a in node.args[1:2]] + [k.value for k in node.keywords if k.arg == "mode"]
                if any(isinstance(m, ast.Constant) and set(str(m.value)) & set("wax+") for m in modes):
                    offenders.append(f"{path.relative_to(SRC)}:{node.lineno} open(..., {modes[0].value!r})")
    assert offenders == []


# -- atomic saves ---------------------------------------------------------------------


class _FailingFile:
    """A file object that writes the first half of what it is given, then fails."""

    def __init__(self, real: Any, error: BaseException) -> None:
        self._real, self._error = real, error

    def write(self, data: bytes) -> int:
        self._real.write(data[: len(data) // 2])
        self._real.flush()
        raise self._error

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def __enter__(self) -> _FailingFile:
        return self

    def __exit__(self, *exc: Any) -> None:
        self._real.close()


@pytest.mark.parametrize("error", [OSError(28, "No space left on device"), KeyboardInterrupt()], ids=["disk-full", "ctrl-c"])
@pytest.mark.parametrize("existing", [False, True], ids=["new-file", "overwrite"])
def test_crash_while_saving_leaves_no_half_file(
    graph: torchatlas.Graph, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: BaseException, existing: bool
) -> None:
    target = tmp_path / "graph.json"
    if existing:
        target.write_text("previous contents", encoding="utf-8")
    real_fdopen = os.fdopen
    monkeypatch.setattr(os, "fdopen", lambda fd, *a, **k: _FailingFile(real_fdopen(fd, *a, **k), error))
    with pytest.raises(type(error)):
        graph.save(target)
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == (["graph.json"] if existing else [])
    if existing:
        assert target.read_text(encoding="utf-8") == "previous contents"
    graph.save(target)
    assert torchatlas.load(target).to_dict() == graph.to_dict()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["graph.json"]


def test_crash_at_rename_leaves_no_temp_file(graph: torchatlas.Graph, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing_replace(src: Any, dst: Any) -> None:
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError):
        graph.save(tmp_path / "graph.json")
    assert list(tmp_path.iterdir()) == []


def test_a_path_spelled_as_a_folder_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    from torchatlas._io import write_atomic

    with pytest.raises(IsADirectoryError):
        write_atomic(f"{tmp_path}/newdir/", "{}")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not hasattr(os, "geteuid"), reason="POSIX permissions")
def test_a_read_only_file_is_refused_as_a_shell_refuses_it() -> None:
    import shutil
    import subprocess
    import sys
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="torchatlas-readonly-"))  # in /tmp, reachable by another user
    try:
        target = folder / "mine.json"
        target.write_text("keep me\n")
        target.chmod(0o444)
        write = "import sys; from torchatlas._io import write_atomic; write_atomic(sys.argv[1], 'x')"
        command = [sys.executable, "-c", write, str(target)]
        if os.geteuid() == 0:  # root may write any file: run as nobody, owner of both
            if shutil.which("setpriv") is None:
                pytest.skip("needs setpriv to run as another user")
            os.chown(folder, 65534, 65534)
            os.chown(target, 65534, 65534)
            command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *command]
        env = {**os.environ, "PYTHONPATH": str(Path(torchatlas.__file__).parents[1])}
        done = subprocess.run(command, capture_output=True, text=True, env=env)
        assert "PermissionError: [Errno 13] Permission denied" in done.stderr, done.stderr
        assert target.read_text() == "keep me\n"
    finally:
        shutil.rmtree(folder)
