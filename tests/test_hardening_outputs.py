"""Outputs go where the user points (issues 20 and 28): devices, pipes and stdout are written
directly, links are followed or kept (another user's in a sticky folder refused), regular
files anywhere are replaced atomically, modes are kept, the umask is never touched."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import torchatlas
from torchatlas._io import UnsafeLinkError, write_atomic

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


# -- what a path is decides, never its spelling (issue 28) -------------------------


@pytest.fixture
def shm_path() -> Iterator[Path]:
    if not Path("/dev/shm").is_dir():
        pytest.skip("no /dev/shm")
    path = Path("/dev/shm") / f"torchatlas-test-{secrets.token_hex(6)}.json"
    yield path
    path.unlink(missing_ok=True)


def test_a_regular_file_under_dev_is_created_and_replaced_whole(shm_path: Path) -> None:
    write_atomic(shm_path, "a much longer first version of the file")
    assert shm_path.read_text() == "a much longer first version of the file"
    inode = os.stat(shm_path).st_ino
    write_atomic(shm_path, "short")
    assert shm_path.read_text() == "short" and os.stat(shm_path).st_ino != inode  # renamed over, not patched


def test_cli_writes_a_new_file_under_dev_shm(shm_path: Path) -> None:
    done = subprocess.run([*CLI, "--format", "json", "-o", str(shm_path)], capture_output=True, text=True)
    assert done.returncode == 0 and f"wrote {shm_path}" in done.stderr
    assert json.loads(shm_path.read_text())["format"] == "torchatlas-graph"


def test_an_open_descriptor_is_written_at_its_position(tmp_path: Path) -> None:
    log = tmp_path / "log.txt"
    log.write_text("kept\n")
    with open(log, "a") as appending:
        for spelling in (f"/dev/fd/{appending.fileno()}", f"/proc/self/fd/{appending.fileno()}", f"/proc/{os.getpid()}/fd/{appending.fileno()}"):
            write_atomic(spelling, "appended\n")
    assert log.read_text() == "kept\n" + "appended\n" * 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.txt"]


def test_cli_dev_stdout_redirected_into_a_file_writes_that_file(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    with open(out, "w") as stdout:
        subprocess.run([*CLI, "--format", "json", "-o", "/dev/stdout"], stdout=stdout, stderr=subprocess.PIPE, check=True)
    assert json.loads(out.read_text())["format"] == "torchatlas-graph"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_a_socket_is_refused_and_stays_a_socket(tmp_path: Path) -> None:
    path = tmp_path / "sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    try:
        with pytest.raises(OSError):
            write_atomic(path, "x")
        assert stat.S_ISSOCK(os.lstat(path).st_mode)
    finally:
        server.close()


# -- links in sticky world-writable folders: the kernel's protected_symlinks rule ------

OTHER_USER = 54321


@pytest.fixture
def sticky(tmp_path: Path) -> Path:
    """A folder like /tmp: world-writable with the sticky bit, owned by us."""
    if os.geteuid() != 0:
        pytest.skip("planting another user's link needs root (os.lchown)")
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(0o1777)
    return folder


def _plant(link: Path, points_to: Path, owner: int) -> None:
    link.symlink_to(points_to)
    os.lchown(link, owner, owner)


def test_another_users_link_in_a_sticky_folder_is_refused(sticky: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("the victim's own file")
    _plant(sticky / "out.json", victim, OTHER_USER)
    with pytest.raises(UnsafeLinkError, match=f"uid {OTHER_USER}"):
        write_atomic(sticky / "out.json", "overwritten")
    assert victim.read_text() == "the victim's own file" and (sticky / "out.json").is_symlink()


def test_another_users_link_to_a_folder_in_a_sticky_folder_is_refused(sticky: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "graph.json").write_text("mine")
    _plant(sticky / "dir", home, OTHER_USER)
    with pytest.raises(UnsafeLinkError):
        write_atomic(sticky / "dir" / "graph.json", "overwritten")
    assert (home / "graph.json").read_text() == "mine"


def test_cli_refuses_another_users_link_in_one_line(sticky: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("the victim's own file")
    _plant(sticky / "out.json", victim, OTHER_USER)
    done = subprocess.run([*CLI, "--format", "json", "-o", str(sticky / "out.json")], capture_output=True, text=True)
    assert done.returncode == 1 and "wrote" not in done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("torchatlas: error: refusing to write through")
    assert victim.read_text() == "the victim's own file"


def test_links_the_kernel_would_follow_are_followed(sticky: Path, tmp_path: Path) -> None:
    target = tmp_path / "target.json"
    target.write_text("old")
    _plant(sticky / "ours.json", target, os.geteuid())  # our own link
    write_atomic(sticky / "ours.json", "ours")
    assert target.read_text() == "ours"
    os.chown(sticky, OTHER_USER, OTHER_USER)  # the folder's owner's link
    _plant(sticky / "owners.json", target, OTHER_USER)
    write_atomic(sticky / "owners.json", "the owner's")
    assert target.read_text() == "the owner's"
    plain = tmp_path / "plain"  # not sticky: any owner's link is followed
    plain.mkdir(mode=0o777)
    plain.chmod(0o777)
    _plant(plain / "link.json", target, OTHER_USER)
    write_atomic(plain / "link.json", "plain")
    assert target.read_text() == "plain"


def test_a_symbolic_size_with_control_characters_is_shown_escaped_everywhere() -> None:
    from torchatlas._ir import TensorMeta
    from torchatlas._text import format_shape
    from torchatlas._view import shape_text

    meta = TensorMeta(("batch\x00\x1b", 8), "float\x07", "cpu")
    for text in (format_shape(meta.shape), shape_text(meta, "float32")):
        assert "batch\\x00\\x1b" in text and not any(ord(c) < 32 for c in text)
