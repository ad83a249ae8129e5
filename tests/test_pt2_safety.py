"""A crafted ``.pt2`` never runs code: it is read as data (the program's JSON only), so each
payload that ``torch.export.load`` would unpickle, evaluate or load is never opened: the file
reads as the clean program, or is refused in one line naming the member, and the marker file
its payload would create never appears. ``trust=True`` hands a file to ``torch.export.load``."""

from __future__ import annotations

import json
import pickle
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from _cli_helpers import error_lines, run_cli
from _hostile import Members, Touch

import torchatlas


class _Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(3, 3)
        self.register_buffer("offset", torch.ones(3))
        self.const = torch.tensor([1.0, 2.0, 3.0])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) + self.offset + self.const


@pytest.fixture(scope="module")
def clean_archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("pt2") / "clean.pt2"
    torch.export.save(torch.export.export(_Model(), (torch.randn(2, 3),)), path)
    return path


def _member(members: Members, suffix: str) -> str:
    return next(name for name in members if name.endswith(suffix))


def _config_payload(config_suffix: str, path_name: str | None, use_pickle: bool) -> Callable[[Members, bytes], None]:
    """Point the first entry of a payload config at a pickled member."""

    def change(members: Members, payload: bytes) -> None:
        config_name = _member(members, config_suffix)
        config = json.loads(members[config_name])
        entry = next(iter(config["config"].values()))
        entry["use_pickle"] = use_pickle
        if path_name is not None:
            entry["path_name"] = path_name
        folder = config_name.rsplit("/", 1)[0]
        members[f"{folder}/{entry['path_name']}"] = payload
        members[config_name] = json.dumps(config).encode()

    return change


def _sample_inputs(members: Members, payload: bytes) -> None:
    members[_member(members, "sample_inputs/model.pt")] = payload


def _legacy_weights(members: Members, payload: bytes) -> None:
    root = next(iter(members)).split("/", 1)[0]
    members[f"{root}/data/weights/model.pt"] = payload


def _legacy_layout(members: Members, payload: bytes) -> None:
    members.clear()
    members["version"] = b"8.0"
    members["serialized_exported_program.json"] = b"{}"
    members["serialized_state_dict.pt"] = payload


def _size_expression(members: Members, _payload: bytes) -> None:
    name = _member(members, "models/model.json")
    text = members[name].decode()
    code = "open(chr(47)+chr(116), chr(119))"  # builds strings without quotes, as a sympify attack would
    members[name] = text.replace('{"as_int": 2}', json.dumps({"as_expr": {"expr_str": code, "hint": {"as_int": 2}}}), 1).encode()


def _aoti_library(members: Members, payload: bytes) -> None:
    """torch.export.load extracts and dlopens every data/aotinductor/<model>/*.so."""
    root = next(iter(members)).split("/", 1)[0]
    members[f"{root}/data/aotinductor/model/model.so"] = b"\x7fELF" + payload


def _second_program(members: Members, payload: bytes) -> None:
    """torch.export.load reads every models/ member as a program, with its own pickled weights."""
    root = next(iter(members)).split("/", 1)[0]
    evil = members[_member(members, "models/model.json")].replace(b'{"as_int": 3}', b'{"as_expr": {"expr_str": "__import__(chr(111)+chr(115))"}}')
    members[f"{root}/models/sub/x.json"] = evil
    members[f"{root}/models/model_json"] = evil
    _config_payload("model_weights_config.json", None, True)(members, payload)


def _upper_case_config(members: Members, payload: bytes) -> None:
    """miniz finds names case-insensitively: the second config is the one torch would read."""
    name = _member(members, "model_weights_config.json")
    config = json.loads(members[name])
    for entry in config["config"].values():
        entry["use_pickle"] = True
        members[f"{name.rsplit('/', 1)[0]}/{entry['path_name']}.pkl"] = payload
        entry["path_name"] += ".pkl"
    members[name.upper()] = json.dumps(config).encode()


# case -> (change, None when it reads as the clean program, or the member its one-line refusal names)
CRAFTED = {
    "use_pickle weight": (_config_payload("model_weights_config.json", None, True), None),
    "use_pickle constant": (_config_payload("model_constants_config.json", None, True), None),
    "opaque object": (_config_payload("model_constants_config.json", "opaque_obj_0", False), None),
    "custom object": (_config_payload("model_constants_config.json", "custom_obj_0", False), None),
    "sample inputs": (_sample_inputs, None),
    "legacy weights": (_legacy_weights, None),
    "AOTInductor library": (_aoti_library, None),
    "second program": (_second_program, None),
    "upper-case weights config": (_upper_case_config, None),
    "legacy layout": (_legacy_layout, "archive_format"),
    "code in a symbolic size": (_size_expression, "models/model.json"),
}


@pytest.fixture(scope="module")
def clean_graph(clean_archive: Path) -> dict:
    return torchatlas.from_export(clean_archive).to_dict()


def _craft(clean: Path, target: Path, change: Callable[[Members, bytes], None], marker: Path) -> Path:
    with zipfile.ZipFile(clean) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    change(members, pickle.dumps(Touch(str(marker))))
    with zipfile.ZipFile(target, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return target


@pytest.mark.parametrize("case", list(CRAFTED))
def test_a_crafted_archive_is_read_as_data_or_refused_by_the_api(
    case: str, clean_archive: Path, clean_graph: dict, tmp_path: Path
) -> None:
    change, member = CRAFTED[case]
    marker = tmp_path / "marker"
    path = _craft(clean_archive, tmp_path / "evil.pt2", change, marker)
    if member is None:
        assert torchatlas.from_export(path).to_dict() == clean_graph
    else:
        with pytest.raises(torchatlas.UnsafeArchiveError) as caught:
            torchatlas.from_export(path)
        message = str(caught.value)
        assert "\n" not in message and member in message
    assert not marker.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["evil.pt2"]  # nothing extracted or written


@pytest.mark.parametrize("case", list(CRAFTED))
def test_a_crafted_archive_is_read_as_data_or_refused_by_the_cli(
    case: str, clean_archive: Path, tmp_path: Path, capsys
) -> None:
    change, member = CRAFTED[case]
    marker = tmp_path / "marker"
    path = _craft(clean_archive, tmp_path / "evil.pt2", change, marker)
    code, out, err = run_cli(capsys, str(path))
    if member is None:
        assert code == 0 and "fc (Linear)" in out and err == ""
    else:
        assert code == 2 and out == ""
        [line] = error_lines(err)
        assert member in line
    assert not marker.exists()


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_the_attack_is_real_under_torch_export_load(clean_archive: Path, tmp_path: Path) -> None:
    """The payloads above do run code under a plain ``torch.export.load`` (what ``trust=True``
    calls): reading as data is what stops them."""
    marker = tmp_path / "marker"
    path = _craft(clean_archive, tmp_path / "evil.pt2", _sample_inputs, marker)
    try:
        torch.export.load(path)
    except Exception:
        pass
    assert marker.exists()


def test_trust_opens_a_file_with_torch_export_load(clean_archive: Path, clean_graph: dict, tmp_path: Path, capsys) -> None:
    """A benign pickled weight (what ``torch.export.save`` writes for some tensor subclasses) reads
    as data untrusted, and loads through torch when trusted."""

    def benign(members: Members, _payload: bytes) -> None:
        import io

        buffer = io.BytesIO()
        torch.save(torch.nn.Parameter(torch.zeros(3, 3)), buffer)
        _config_payload("model_weights_config.json", None, True)(members, buffer.getvalue())

    path = _craft(clean_archive, tmp_path / "pickled.pt2", benign, tmp_path / "unused")
    assert torchatlas.from_export(path).to_dict() == clean_graph
    loaded = torch.export.load(path)
    for flag in ({"trust": True}, {"trust_pickle": True}):
        assert torchatlas.from_export(path, **flag).to_dict() == torchatlas.from_export(loaded).to_dict()
    for flag in ("--trust", "--trust-pickle"):
        code, out, _ = run_cli(capsys, str(path), flag)
        assert code == 0 and "fc (Linear)" in out


def test_a_clean_archive_with_dynamic_shapes_opens_without_trust(tmp_path: Path) -> None:
    class Cat(torch.nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return torch.cat([x, y]).reshape(-1, 2)[: x.shape[0] // 2 + 1].sum(0)

    dims = {"x": {0: torch.export.Dim("b", min=2, max=64)}, "y": {0: torch.export.Dim("c", min=2, max=60)}}
    program = torch.export.export(Cat(), (torch.randn(4, 2), torch.randn(6, 2)), dynamic_shapes=dims)
    torch.export.save(program, tmp_path / "dynamic.pt2")
    graph = torchatlas.from_export(tmp_path / "dynamic.pt2")
    assert any(isinstance(d, str) for n in graph.ir.nodes for m in n.outputs for d in m.shape)


def test_a_corrupt_archive_prints_no_traceback(clean_archive: Path, tmp_path: Path, capsys) -> None:
    def corrupt(members: Members, _payload: bytes) -> None:
        members[_member(members, "models/model.json")] = b"{not json"

    path = _craft(clean_archive, tmp_path / "corrupt.pt2", corrupt, tmp_path / "unused")
    code, _, err = run_cli(capsys, str(path))
    assert code == 2
    assert "Traceback" not in err
    assert len(error_lines(err)) == 1


def test_the_program_read_is_model_or_the_one_program(clean_archive: Path, clean_graph: dict, tmp_path: Path) -> None:
    """torch.export.save writes ``models/model.json``; an archive of several other programs is ambiguous."""

    def rename(new_names: list[str]) -> Callable[[Members, bytes], None]:
        def change(members: Members, _payload: bytes) -> None:
            program = members.pop(_member(members, "models/model.json"))
            root = next(iter(members)).split("/", 1)[0]
            for name in new_names:
                members[f"{root}/models/{name}.json"] = program

        return change

    one = _craft(clean_archive, tmp_path / "one.pt2", rename(["forward"]), tmp_path / "unused")
    assert torchatlas.from_export(one).to_dict() == clean_graph
    several = _craft(clean_archive, tmp_path / "several.pt2", rename(["forward", "backward"]), tmp_path / "unused")
    with pytest.raises(torchatlas.UnsafeArchiveError, match="several programs"):
        torchatlas.from_export(several)


def _edited(clean: Path, folder: Path, edit: Callable[[dict], None], compression: int = zipfile.ZIP_STORED) -> Path:
    """``clean`` with its program JSON changed by ``edit``."""
    with zipfile.ZipFile(clean) as z:
        members = {i.filename: z.read(i) for i in z.infolist()}
    name = _member(members, "models/model.json")
    program = json.loads(members[name])
    edit(program["graph_module"])
    path = folder / "edited.pt2"
    with zipfile.ZipFile(path, "w", compression) as z:
        for member, data in members.items():
            z.writestr(member, json.dumps(program).encode() if member == name else data)
    return path


def _first_op(module: dict) -> dict:
    return next(n for n in module["graph"]["nodes"] if n["target"].startswith("torch.ops.aten"))


def test_a_crafted_stack_trace_is_read_in_linear_time_and_a_real_one_still_names_the_line(
    clean_archive: Path, tmp_path: Path
) -> None:
    from torchatlas._capture._fx_import import _user_source

    assert _user_source('File "a", line 1, in ' * 200_000) is None  # one line, no code line: seconds were minutes
    real = 'File "/x/torch/nn/f.py", line 3, in g\n    y()\n  File "/home/me/model.py", line 12, in forward\n    return self.fc(x)\n'
    assert _user_source(real.replace("/x/torch/nn/f.py", torch.__file__)) == torchatlas.Source("/home/me/model.py", 12, "return self.fc(x)")
    assert _user_source('File "m.py", line ' + "9" * 4000 + ", in f\n    x\n") is None  # no int of 4,000 digits

    def long_trace(module: dict) -> None:
        _first_op(module)["metadata"]["stack_trace"] = 'File "a", line 1, in ' * 100_000
    assert torchatlas.from_export(_edited(clean_archive, tmp_path, long_trace, zipfile.ZIP_DEFLATED)).ir.ops()


def test_sizes_and_numbers_of_a_pt2_pass_the_checks_load_makes(clean_archive: Path, tmp_path: Path) -> None:
    def sizes(*values: int) -> Callable[[dict], None]:
        def edit(module: dict) -> None:
            name = _first_op(module)["outputs"][0]["as_tensor"]["name"]
            module["graph"]["tensor_values"][name]["sizes"] = [{"as_int": v} for v in values]
        return edit

    for values in ((10**4000, 3), (-2, 3)):  # no tensor has them: read as unknown, and the graph saves and loads
        graph = torchatlas.from_export(_edited(clean_archive, tmp_path, sizes(*values)))
        assert any(o.shape == ("?", 3) for n in graph.ir.ops() for o in n.outputs)
        graph.summary(format="text")
        assert torchatlas.load(graph.save(tmp_path / "g.json")).ir.ops()

    def float_argument(module: dict) -> None:
        _first_op(module)["inputs"].append({"name": "alpha", "arg": {"as_float": 10**400}, "kind": 2})

    def int_argument(module: dict) -> None:
        _first_op(module)["inputs"].append({"name": "alpha", "arg": {"as_int": 2**70}, "kind": 2})

    with pytest.raises(torchatlas.UnsafeArchiveError, match="not a torch.export program: OverflowError"):
        torchatlas.from_export(_edited(clean_archive, tmp_path, float_argument))
    with pytest.raises(torchatlas.UnsafeArchiveError, match="an argument must be a finite number"):
        torchatlas.from_export(_edited(clean_archive, tmp_path, int_argument))
    with pytest.raises(torchatlas.UnsafeArchiveError, match=r"holds 2\*\*63 elements or more"):
        torchatlas.from_export(_edited(clean_archive, tmp_path, sizes(*[2**62] * 40)))


@pytest.mark.parametrize("method", [zipfile.ZIP_DEFLATED, zipfile.ZIP_LZMA], ids=["deflate", "lzma"])
def test_a_corrupt_compressed_stream_is_an_unsafe_archive(clean_archive: Path, tmp_path: Path, method: int) -> None:
    path = _edited(clean_archive, tmp_path, lambda module: None, method)
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as z:
        info = next(i for i in z.infolist() if i.filename.endswith("models/model.json"))
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    for k in range(start + 10, start + 60):
        data[k] ^= 0x5A
    path.write_bytes(bytes(data))
    with pytest.raises(torchatlas.UnsafeArchiveError, match="cannot be read"):
        torchatlas.from_export(path)


def test_an_empty_zip_is_refused_as_empty(tmp_path: Path) -> None:
    path = tmp_path / "empty.pt2"
    zipfile.ZipFile(path, "w").close()
    with pytest.raises(torchatlas.UnsafeArchiveError, match="holds no members"):
        torchatlas.from_export(path)
