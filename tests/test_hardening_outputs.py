"""Outputs go where the user points (issue 20): devices, pipes and stdout are written
directly, links are followed or kept, modes are kept, the umask is never touched."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

import torchatlas
from torchatlas._io import write_atomic

CLI = [sys.executable, "-m", "torchatlas"]


def test_dev_null_stays_a_device() -> None:
    before = os.stat("/dev/null")
    write_atomic("/dev/null", "x" * 100_000)
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev


def test_cli_writes_to_dev_null_and_to_dev_stdout_through_a_pipe() -> None:
    done = subprocess.run([*CLI, "--format", "json", "-o", "/dev/null"], capture_output=True, text=True, check=True)
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode) and done.stdout == ""
    piped = subprocess.run([*CLI, "--format", "json", "-o", "/dev/stdout"], capture_output=True, text=True, check=True)
    assert piped.stdout.lstrip().startswith("{") and '"format"' in piped.stdout


def test_dash_is_stdout_for_text_and_pictures(tmp_path: Path) -> None:
    text = subprocess.run([*CLI, "--format", "json", "-o", "-"], capture_output=True, text=True, check=True)
    assert text.stdout.lstrip().startswith("{") and not (Path.cwd() / "-").exists()
    if shutil.which("dot") is None:
        pytest.skip("the dot binary is not installed")
    picture = subprocess.run([*CLI, "--format", "png", "-o", "-"], capture_output=True, check=True, cwd=tmp_path)
    assert picture.stdout.startswith(b"\x89PNG") and list(tmp_path.iterdir()) == []


def test_a_fifo_is_written_directly(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    write_atomic(fifo, "through the pipe")
    reader.join(10)
    assert got == [b"through the pipe"] and stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_a_symlink_is_followed_and_stays_a_link(tmp_path: Path) -> None:
    real = tmp_path / "real" / "graph.json"
    real.parent.mkdir()
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    write_atomic(link, "new")
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_text() == "new"
    assert sorted(p.name for p in real.parent.iterdir()) == ["graph.json"]


def test_a_hard_linked_file_keeps_its_other_links(tmp_path: Path) -> None:
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    first.write_text("old contents, longer than the new")
    os.link(first, second)
    write_atomic(first, "new")
    assert first.read_text() == second.read_text() == "new"
    assert os.stat(first).st_ino == os.stat(second).st_ino


def test_a_replaced_file_keeps_its_mode_and_a_new_one_follows_the_umask(tmp_path: Path) -> None:
    private = tmp_path / "private.json"
    private.write_text("old")
    private.chmod(0o600)
    write_atomic(private, "new")
    assert stat.S_IMODE(os.stat(private).st_mode) == 0o600 and private.read_text() == "new"
    fresh = tmp_path / "fresh.json"
    write_atomic(fresh, "x")
    umask = os.umask(0o022)
    os.umask(umask)
    assert stat.S_IMODE(os.stat(fresh).st_mode) == 0o666 & ~umask


def test_the_umask_is_never_changed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def forbidden(mask: int) -> int:
        raise AssertionError("os.umask called: it is process-wide, and other threads create files meanwhile")

    monkeypatch.setattr(os, "umask", forbidden)
    graph = torchatlas.trace(torch.nn.Linear(2, 2), torch.randn(1, 2))
    graph.save(tmp_path / "graph.json")
    graph.tree(path=tmp_path / "tree.txt")
    assert (tmp_path / "graph.json").exists() and (tmp_path / "tree.txt").exists()


def test_a_name_as_long_as_a_name_can_be(tmp_path: Path) -> None:
    target = tmp_path / ("g" * 250 + ".json")
    write_atomic(target, "long")
    write_atomic(target, "longer")
    assert target.read_text() == "longer" and len(list(tmp_path.iterdir())) == 1
