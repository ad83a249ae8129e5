"""A crafted ``.pt2`` never runs code: each payload that ``torch.export.load`` would unpickle
or evaluate is refused, by the API and the CLI, with one line naming the member, and the
marker file its payload would create never appears. ``trust_pickle`` opens a file anyway."""

from __future__ import annotations

import json
import pickle
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from _cli_helpers import error_lines, run_cli

import torchatlas

Members = dict[str, bytes]


class _Touch:
    """Unpickling this creates ``path``: the proof that loading ran code."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (self.path, "w"))


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


CRAFTED = {
    "use_pickle weight": (_config_payload("model_weights_config.json", None, True), "model_weights_config.json"),
    "use_pickle constant": (_config_payload("model_constants_config.json", None, True), "model_constants_config.json"),
    "opaque object": (_config_payload("model_constants_config.json", "opaque_obj_0", False), "model_constants_config.json"),
    "custom object": (_config_payload("model_constants_config.json", "custom_obj_0", False), "custom_obj_0"),
    "sample inputs": (_sample_inputs, "sample_inputs/model.pt"),
    "legacy weights": (_legacy_weights, "data/weights/model.pt"),
    "legacy layout": (_legacy_layout, "serialized_state_dict.pt"),
    "code in a symbolic size": (_size_expression, "models/model.json"),
}


def _craft(clean: Path, target: Path, change: Callable[[Members, bytes], None], marker: Path) -> Path:
    with zipfile.ZipFile(clean) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    change(members, pickle.dumps(_Touch(str(marker))))
    with zipfile.ZipFile(target, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return target


@pytest.mark.parametrize("case", list(CRAFTED))
def test_a_crafted_archive_is_refused_by_the_api(case: str, clean_archive: Path, tmp_path: Path) -> None:
    change, member = CRAFTED[case]
    marker = tmp_path / "marker"
    path = _craft(clean_archive, tmp_path / "evil.pt2", change, marker)
    with pytest.raises(torchatlas.UnsafeArchiveError) as caught:
        torchatlas.from_export(path)
    message = str(caught.value)
    assert "\n" not in message and member in message and "trust_pickle=True" in message
    assert not marker.exists()


@pytest.mark.parametrize("case", list(CRAFTED))
def test_a_crafted_archive_is_refused_by_the_cli(case: str, clean_archive: Path, tmp_path: Path, capsys) -> None:
    change, member = CRAFTED[case]
    marker = tmp_path / "marker"
    path = _craft(clean_archive, tmp_path / "evil.pt2", change, marker)
    code, out, err = run_cli(capsys, str(path))
    assert code == 2 and out == ""
    [line] = error_lines(err)
    assert member in line and "--trust-pickle" in line
    assert not marker.exists()


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_the_attack_is_real_without_the_check(clean_archive: Path, tmp_path: Path) -> None:
    """The payloads above do run code under a plain ``torch.export.load``: the check is what stops them."""
    marker = tmp_path / "marker"
    path = _craft(clean_archive, tmp_path / "evil.pt2", _sample_inputs, marker)
    try:
        torch.export.load(path)
    except Exception:
        pass
    assert marker.exists()


def test_trust_pickle_opens_a_pickled_archive(clean_archive: Path, tmp_path: Path, capsys) -> None:
    """A benign pickled weight (what ``torch.export.save`` writes for some tensor subclasses) opens when trusted."""

    def benign(members: Members, _payload: bytes) -> None:
        import io

        buffer = io.BytesIO()
        torch.save(torch.nn.Parameter(torch.zeros(3, 3)), buffer)
        _config_payload("model_weights_config.json", None, True)(members, buffer.getvalue())

    path = _craft(clean_archive, tmp_path / "pickled.pt2", benign, tmp_path / "unused")
    with pytest.raises(torchatlas.UnsafeArchiveError):
        torchatlas.from_export(path)
    graph = torchatlas.from_export(path, trust_pickle=True)
    assert any(n.target == "aten.linear.default" for n in graph.ir.ops())
    code, out, _ = run_cli(capsys, str(path), "--trust-pickle")
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
