"""A ``.pt2`` is read as data: ``from_export(path)`` equals ``from_export(program)`` in memory,
node for node, and a fuzz of crafted archives is refused in one line or read as data, never
running, writing or loading anything from the file, and never reading past a size cap."""

from __future__ import annotations

import io
import json
import os
import pickle
import struct
import subprocess
import sys
import textwrap
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from _capture_helpers import load_coolcnn
from _hostile import Members, Touch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import torchatlas
from torchatlas._capture._pt2_reader import MAX_PROGRAM_BYTES


def _same_graph_both_ways(program: torch.export.ExportedProgram, tmp_path: Path) -> dict:
    path = tmp_path / "program.pt2"
    torch.export.save(program, path)
    in_memory = torchatlas.from_export(program).to_dict()
    read = torchatlas.from_export(path).to_dict()
    assert read == in_memory  # ids, targets, inputs, slots, shapes, dtypes, scopes, params, sources, names
    return read


@pytest.mark.filterwarnings("ignore::FutureWarning")  # raised inside torch.export
@pytest.mark.parametrize("make", ["bert", "vit", "llama", pytest.param("t5", marks=pytest.mark.slow)])
def test_a_saved_transformer_reads_as_the_program_in_memory(make: str, tmp_path: Path) -> None:
    """The models of tests/test_differential_export.py (its Llama has 2 layers), random weights."""
    models = pytest.importorskip("test_differential_export")  # skips without transformers
    model, args, kwargs = getattr(models, make)()
    graph = _same_graph_both_ways(torch.export.export(model, args, kwargs), tmp_path)
    assert graph["meta"]["model"].startswith("transformers.")
    assert sum(n["kind"] == "param" for n in graph["nodes"]) > 10


@pytest.mark.parametrize("decomposed", [False, True])
def test_a_saved_cnn_reads_as_the_program_in_memory(decomposed: bool, tmp_path: Path) -> None:
    """CoolCNN: a module called three times, two branches; decomposed, core ATen ops with
    several results of which one is read (max_pool2d_with_indices)."""
    coolcnn = load_coolcnn()
    program = torch.export.export(coolcnn.CoolCNN(), (coolcnn.example_input(),))
    graph = _same_graph_both_ways(program.run_decompositions() if decomposed else program, tmp_path)
    assert graph["meta"]["level"] == "aten"


class _Branches(torch.nn.Module):
    """Higher-order ops: ``torch.cond`` with two subgraphs, and a ``no_grad`` region."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            y = x * 2
        return torch.cond(x.sum() > 0, lambda x: self.fc(x).relu(), lambda x: x * 2, (x,)), y + 1


def test_a_program_with_higher_order_ops_reads_as_in_memory(tmp_path: Path) -> None:
    graph = _same_graph_both_ways(torch.export.export(_Branches(), (torch.randn(4, 3),)), tmp_path)
    cond = next(n for n in graph["nodes"] if n.get("target") == "torch.ops.higher_order.cond")
    assert {"repr": "true_graph_0"} in cond["args"]  # a subgraph is an argument, not an op of its own


class _Everything(torch.nn.Module):
    """Several outputs per op, an in-place buffer update, kwargs, dtypes, memory formats, a
    dict of outputs and a symbolic batch size."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(3, 3)
        self.register_buffer("steps", torch.zeros(3))

    def forward(self, x: torch.Tensor, scale: float = 2.0) -> dict[str, torch.Tensor]:
        a, b = torch.split(self.fc(x), 2, dim=1)
        self.steps.add_(1)
        values, indices = x.max(1)
        return {
            "a": a * scale, "b": b.sum(), "indices": indices, "head": x.reshape(-1)[: x.shape[0] // 2 + 1],
            "zeros": x.new_zeros(x.shape[0] * 2 + 1),
            "gelu": torch.nn.functional.gelu(values, approximate="tanh").to(torch.float16, memory_format=torch.contiguous_format),
        }


def test_a_dynamic_program_reads_as_in_memory(tmp_path: Path) -> None:
    batch = torch.export.Dim.AUTO
    program = torch.export.export(
        _Everything(), (torch.randn(4, 3),), {"scale": 3.0}, dynamic_shapes={"x": {0: batch}, "scale": None}
    )
    graph = _same_graph_both_ways(program, tmp_path)
    sizes = {d for n in graph["nodes"] for m in n["outputs"] for d in m["shape"] if isinstance(d, str)}
    assert sizes and all("Symbol" not in d for d in sizes)  # text such as s77 and 2*s77 + 1, never sympy's repr
    assert {n["path"] for n in graph["nodes"] if n["kind"] == "input"} == {"args[0]", "kwargs['scale']"}
    assert any(n.get("inplace") for n in graph["nodes"])  # the buffer's add_, from the op's registered schema


def test_a_named_dim_program_reads_as_in_memory(tmp_path: Path) -> None:
    class Cat(torch.nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return torch.cat([x, y]).relu()

    dims = {"x": {0: torch.export.Dim("b", min=2, max=64)}, "y": {0: torch.export.Dim("c", min=2, max=60)}}
    _same_graph_both_ways(torch.export.export(Cat(), (torch.randn(4, 2), torch.randn(6, 2)), dynamic_shapes=dims), tmp_path)


# -- the fuzz ---------------------------------------------------------------------------




class _Small(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x).relu()


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> tuple[Members, dict]:
    path = tmp_path_factory.mktemp("clean") / "clean.pt2"
    program = torch.export.export(_Small(), (torch.randn(4, 3),), dynamic_shapes=({0: torch.export.Dim.AUTO},))
    torch.export.save(program, path)
    with zipfile.ZipFile(path) as archive:
        return {n: archive.read(n) for n in archive.namelist()}, torchatlas.from_export(program).to_dict()


def _root(members: Members) -> str:
    return next(iter(members)).split("/", 1)[0]


def _model_name(members: Members) -> str:
    return f"{_root(members)}/models/model.json"


def _size_expression(text: str) -> Callable[[Members, Path], None]:
    """Put ``text`` in the first symbolic size still as torch wrote it (so two such changes both show)."""

    def change(members: Members, canary: Path) -> None:
        program = json.loads(members[_model_name(members)])
        sizes = [size for meta in program["graph_module"]["graph"]["tensor_values"].values() for size in meta["sizes"]]
        size = next(s for s in sizes if s.get("as_expr", {}).get("expr_str", "").startswith("Symbol("))
        size["as_expr"]["expr_str"] = text.replace("CANARY", str(canary))
        members[_model_name(members)] = json.dumps(program).encode()

    return change


def _use_pickle(members: Members, canary: Path) -> None:
    name = next(n for n in members if n.endswith("model_weights_config.json"))
    config = json.loads(members[name])
    for entry in config["config"].values():
        entry["use_pickle"] = True
        members[f"{name.rsplit('/', 1)[0]}/{entry['path_name']}"] = pickle.dumps(Touch(str(canary)))
    members[name] = json.dumps(config).encode()


def _add(name: str, data: bytes | Callable[[Members, Path], bytes]) -> Callable[[Members, Path], None]:
    def change(members: Members, canary: Path) -> None:
        members[name.replace("ROOT", _root(members))] = data(members, canary) if callable(data) else data

    return change


def _nested_zip(members: Members, canary: Path) -> bytes:
    inner = io.BytesIO()
    with zipfile.ZipFile(inner, "w") as archive:
        archive.writestr("inner/data/weights/w", pickle.dumps(Touch(str(canary))))
    return inner.getvalue()


# mutation -> (change, whether it makes the archive refused)
MUTATIONS: dict[str, tuple[Callable[[Members, Path], None], bool]] = {
    "AOTInductor library": (_add("ROOT/data/aotinductor/model/x.so", b"\x7fELF" + b"\0" * 64), False),
    "zip slip": (_add("ROOT/data/aotinductor/model/../../../../escaped", b"x"), True),
    "absolute name": (_add("/tmp/torchatlas-absolute-member", b"x"), True),
    "program in a subfolder": (_add("ROOT/models/sub/x.json", lambda m, c: m[_model_name(m)]), False),
    "program without its dot": (_add("ROOT/models/model_json", lambda m, c: m[_model_name(m)]), False),
    "upper-case program": (_add("ROOT/MODELS/MODEL.JSON", lambda m, c: m[_model_name(m)]), True),
    "upper-case weights config": (_add("ROOT/DATA/WEIGHTS/MODEL_WEIGHTS_CONFIG.JSON", b'{"config": {}}'), False),
    "pickled weights": (_use_pickle, False),
    "pickled sample inputs": (_add("ROOT/data/sample_inputs/model.pt", lambda m, c: pickle.dumps(Touch(str(c)))), False),
    "nested zip": (_add("ROOT/data/weights/nested.zip", _nested_zip), False),
    "code in a size": (_size_expression("__import__('os').system('touch CANARY')"), True),
    "huge power in a size": (_size_expression("Pow(Integer(10), Pow(Integer(10), Integer(9)))"), False),
}


def _write(members: Members, path: Path, duplicate: bool) -> None:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
        if duplicate:  # a second copy of the program: readers disagree on which copy counts
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                archive.writestr(_model_name(members), b"{}")


def _forbidden(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every way a file's content could run, load or be extracted, each recording that it was called."""
    import ctypes

    import sympy

    called: list[str] = []
    for owner, name in [(torch.export, "load"), (torch, "load"), (pickle, "loads"), (pickle, "load"), (sympy, "sympify"),
                        (ctypes, "CDLL"), (zipfile.ZipFile, "extract"), (zipfile.ZipFile, "extractall"), (os, "system")]:
        monkeypatch.setattr(owner, name, lambda *a, _n=f"{owner.__name__}.{name}", **k: called.append(_n))
    return called


def _craft_and_read(
    clean: tuple[Members, dict], folder: Path, monkeypatch: pytest.MonkeyPatch,
    mutations: list[str], prefix: bytes, second_directory: bool, duplicate: bool,
) -> None:
    """Craft an archive and read it: refused in one line exactly when a mutation calls for it,
    else the clean program; with nothing loaded, run, extracted or written."""
    members, clean_graph = dict(clean[0]), clean[1]
    canary = folder / "canary"
    for mutation in mutations:
        MUTATIONS[mutation][0](members, canary)
    path = folder / "evil.pt2"
    _write(members, path, duplicate)
    data = prefix + path.read_bytes()
    if second_directory:  # a clean archive after this one: Python reads the last directory, and shifts offsets
        clean_copy = folder / "clean.pt2"
        _write(dict(clean[0]), clean_copy, False)
        data += clean_copy.read_bytes()
        clean_copy.unlink()
    path.write_bytes(data)
    refused = any(MUTATIONS[m][1] for m in mutations) or bool(prefix) or second_directory or duplicate
    with monkeypatch.context() as patched:
        called = _forbidden(patched)
        try:
            graph = torchatlas.from_export(path).to_dict()
        except torchatlas.UnsafeArchiveError as e:
            assert refused and "\n" not in str(e) and str(path) in str(e)
        else:
            assert not refused
            if "huge power in a size" in mutations:  # the text of the size, never its value
                assert any("10**10**9" in str(m["shape"]) for n in graph["nodes"] for m in n["outputs"])
            else:
                assert graph == clean_graph
    assert called == []
    assert sorted(p.name for p in folder.iterdir()) == ["evil.pt2"]  # no canary, nothing extracted
    assert not Path("/tmp/torchatlas-absolute-member").exists()


ALONE = [([m], b"", False, False) for m in sorted(MUTATIONS)] + [
    ([], b"MZ" + b"\0" * 62, False, False), ([], b"", True, False), ([], b"", False, True),
]


@pytest.mark.parametrize(("mutations", "prefix", "second_directory", "duplicate"), ALONE,
                         ids=[" ".join(a[0]) or ("prepended" if a[1] else "two directories" if a[2] else "duplicate") for a in ALONE])
def test_each_crafted_archive_alone_is_refused_in_one_line_or_read_as_data(
    clean: tuple[Members, dict], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    mutations: list[str], prefix: bytes, second_directory: bool, duplicate: bool,
) -> None:
    _craft_and_read(clean, tmp_path, monkeypatch, mutations, prefix, second_directory, duplicate)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    mutations=st.lists(st.sampled_from(sorted(MUTATIONS)), max_size=4, unique=True),
    prefix=st.sampled_from([b"", b"", b"", b"MZ" + b"\0" * 62]),
    second_directory=st.sampled_from([False, False, False, True]),
    duplicate=st.sampled_from([False, False, False, True]),
)
def test_a_crafted_archive_is_refused_in_one_line_or_read_as_data(
    clean: tuple[Members, dict], tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch,
    mutations: list[str], prefix: bytes, second_directory: bool, duplicate: bool,
) -> None:
    folder = tmp_path_factory.mktemp("fuzz")
    _craft_and_read(clean, folder, monkeypatch, mutations, prefix, second_directory, duplicate)


# -- sizes ------------------------------------------------------------------------------


def _lie_about_size(path: Path, name: str, size: int) -> None:
    """Rewrite the uncompressed size ``name`` declares, in its local header and its directory entry."""
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as archive:
        local, entry = archive.getinfo(name).header_offset, archive.start_dir
    struct.pack_into("<I", data, local + 22, size)
    while True:
        name_length, extra_length, comment_length = struct.unpack_from("<HHH", data, entry + 28)
        if bytes(data[entry + 46:entry + 46 + name_length]) == name.encode():
            struct.pack_into("<I", data, entry + 24, size)
            break
        entry += 46 + name_length + extra_length + comment_length
    path.write_bytes(bytes(data))


_MEASURE = textwrap.dedent(
    """
    import resource, sys, torchatlas
    torchatlas.from_export(sys.argv[1])  # torch and the reader imported, a clean archive read
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for path in sys.argv[2:]:
        try:
            torchatlas.from_export(path)
        except torchatlas.UnsafeArchiveError as e:
            print(str(e).split(": ", 1)[1][:60])
    print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
    """
)


def test_a_huge_member_is_refused_before_or_while_reading_or_parsing_within_bounded_memory(
    clean: tuple[Members, dict], tmp_path: Path
) -> None:
    members = dict(clean[0])
    huge = MAX_PROGRAM_BYTES + (8 << 20)  # JSON whitespace past the cap: a few hundred KiB deflated
    declared, lying, clean_copy = tmp_path / "declared.pt2", tmp_path / "lying.pt2", tmp_path / "clean.pt2"
    many = tmp_path / "many.pt2"  # 27 MB of empty lists, under the size cap: 9 million lists if parsed
    _write({**members, _model_name(members): b"[" + b"[]," * 9_000_000 + b"[]]"}, many, False)
    _write(members, clean_copy, False)
    padded = dict(members)
    padded[_model_name(members)] = members[_model_name(members)] + b" " * huge
    _write(padded, declared, False)
    _write(padded, lying, False)
    _lie_about_size(lying, _model_name(members), len(members[_model_name(members)]))
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(clean_copy), str(declared), str(lying), str(many)], capture_output=True, text=True, timeout=240,
        env={**os.environ, "PYTHONPATH": str(Path(torchatlas.__file__).parents[1])},
    )
    *refusals, grown_mib = done.stdout.split("\n")[:-1]
    assert done.returncode == 0, done.stderr
    assert "declares" in refusals[0] and ("cannot be read" in refusals[1] or "inflates" in refusals[1]), refusals
    assert "JSON v" in refusals[2], refusals
    assert int(grown_mib) < 48  # neither member was inflated whole


# -- symbolic sizes ---------------------------------------------------------------------

_SYMBOLS = st.sampled_from(["s0", "s1", "s77", "u0"])


def _expressions() -> st.SearchStrategy:
    import sympy

    leaves = st.one_of(
        _SYMBOLS.map(lambda n: sympy.Symbol(n, integer=True, positive=True)),
        st.integers(-20, 20).map(sympy.Integer),
    )
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.tuples(inner, inner).map(lambda ab: ab[0] + ab[1]),
            st.tuples(inner, inner).map(lambda ab: ab[0] * ab[1]),
            st.tuples(inner, inner).map(lambda ab: ab[0] - ab[1]),
            st.tuples(inner, st.integers(0, 3)).map(lambda ab: ab[0] ** ab[1]),
        ),
        max_leaves=8,
    )


@settings(max_examples=150, deadline=None)
@given(_expressions())
def test_a_symbolic_size_reads_as_text_that_means_the_same_expression(expression) -> None:
    """The text of ``srepr`` (what a ``.pt2`` holds), read by sympy here in the test only, is the
    same expression: the reader never evaluates it, but shows it faithfully."""
    import sympy

    from torchatlas._capture._export_graph import size_text

    text = size_text(sympy.srepr(expression))
    names = {s.name: s for s in expression.free_symbols}
    assert sympy.simplify(sympy.sympify(text, locals=names) - expression) == 0, text


@pytest.mark.parametrize("text", [
    "__import__('os').system('true')", "Symbol('s0').__class__", "(lambda: 1)()", "[x for x in ()]",
    "Symbol(s0=open('/etc/passwd'))", "f" * 5000, "Add(" * 200 + ")" * 200,
])
def test_a_symbolic_size_that_is_not_an_expression_is_refused(text: str) -> None:
    from torchatlas._capture._export_graph import SizeExpressionError, size_text

    with pytest.raises(SizeExpressionError):
        size_text(text)


# -- a mutated program ------------------------------------------------------------------

_JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True), st.text(max_size=20)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=6,
)


def _places(value: object, path: tuple = ()) -> list[tuple]:
    found = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _places(item, (*path, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found += _places(item, (*path, i))
    return found


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_program_with_any_field_replaced_reads_or_is_refused_in_one_line(
    clean: tuple[Members, dict], tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    members = dict(clean[0])
    program = json.loads(members[_model_name(members)])
    places = [p for p in _places(program) if p]
    for _ in range(data.draw(st.integers(1, 3))):
        place = data.draw(st.sampled_from(places))
        holder = program
        try:
            for key in place[:-1]:
                holder = holder[key]
            holder[place[-1]] = data.draw(_JSON_VALUES)
        except (KeyError, IndexError, TypeError):  # an earlier replacement took this place away
            continue
    members[_model_name(members)] = json.dumps(program).encode()
    path = tmp_path_factory.mktemp("mutated") / "m.pt2"
    _write(members, path, False)
    try:
        graph = torchatlas.from_export(path)
    except torchatlas.UnsafeArchiveError as e:
        assert "\n" not in str(e)
    else:
        graph.tree()
        graph.to_json()
