"""What a user does: build the wheel from a clean checkout, install it into a fresh venv
outside the repository (torch pinned by constraints.txt), use it, and open its page in Chromium.

The clean checkout holds exactly what a clone of the working tree would (tracked files plus
untracked ones git does not ignore): no viewer bundle, no node_modules, no venv. So the wheel
is built by the build hook (setup.py runs the web build), not copied from this checkout.
The sdist carries the built bundle, so a wheel built from it needs no npm.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from _viewer import CHROMIUM, VIEWPORT, launch_chromium, open_viewer

import torchatlas

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
BUNDLE = ("torchatlas/_render/web/viewer.js", "torchatlas/_render/web/viewer.css")

USE_THE_WHEEL = """
import sys
import tarfile
import torch
import torchatlas
from torchatlas._example import CoolCNN, example_input

assert "site-packages" in torchatlas.__file__, torchatlas.__file__
graph = torchatlas.trace(CoolCNN(), example_input())
graph.to_html(sys.argv[1])
page = graph._repr_html_()
assert page is not None and page.startswith("<iframe"), page and page[:80]
print("ops", sum(1 for _ in graph.ir.ops()))
"""


def run(*argv: str | Path, cwd: Path, env: dict[str, str] | None = None, timeout: int = 300) -> str:
    done = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(map(str, argv))} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def clean_checkout(target: Path) -> Path:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO, capture_output=True, check=True,
    ).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The venv that the wheel, built from a clean checkout, was installed into."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs a git checkout")
    if shutil.which("npm") is None:
        pytest.skip("building the wheel needs npm (apt-get install npm)")
    root = tmp_path_factory.mktemp("wheel")
    checkout = clean_checkout(root / "checkout")
    assert not (checkout / "src/torchatlas/_render/web/viewer.js").exists()
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", root / "dist", checkout, cwd=root)
    (wheel,) = (root / "dist").glob("torchatlas-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        metadata = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert set(BUNDLE) <= names, sorted(n for n in names if "_render" in n)
    assert not any(n.startswith(("web/", "tests/")) or "node_modules" in n for n in names)
    assert "Requires-Python: >=3.10" in metadata and "Provides-Extra: hf" in metadata
    venv = root / "venv"
    run(sys.executable, "-m", "venv", venv, cwd=root)
    # --no-compile: byte-compiling all of torch took most of the install's CPU; the few
    # modules a test imports are compiled when first imported (see installed_env).
    run(venv / "bin/python", "-m", "pip", "install", "-q", "--no-compile", "-c", REPO / "constraints.txt", wheel, cwd=root, timeout=600)
    return venv


def installed_env() -> dict[str, str]:
    """The environment a user's shell has: no PYTHONPATH into this checkout, and bytecode
    written, so that the second run of the installed venv imports torch from it."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")}


def test_the_installed_command_writes_every_format(installed: Path, tmp_path: Path) -> None:
    env = installed_env()
    out = run(installed / "bin/torchatlas", "--out-dir", tmp_path / "out", cwd=tmp_path, env=env)
    written = {p.name for p in (tmp_path / "out").iterdir()}
    expected = {r.file_name for r in torchatlas.FORMATS.values()}
    if shutil.which("dot") is None:
        expected -= {"graph.svg", "graph.png", "graph.pdf"}
    assert expected <= written, out
    assert "not written" not in out or shutil.which("dot") is None, out
    html = (tmp_path / "out/graph.html").read_text(encoding="utf-8")
    assert "<script" in html and len(html) > 100_000  # the viewer bundle is inlined


def test_the_installed_package_renders_pages_that_open_in_chromium(installed: Path, tmp_path: Path) -> None:
    env = installed_env()
    page = tmp_path / "coolcnn.html"
    script = tmp_path / "use.py"
    script.write_text(USE_THE_WHEEL, encoding="utf-8")
    out = run(installed / "bin/python", script, page, cwd=tmp_path, env=env)
    assert out.startswith("ops ") and int(out.split()[1]) > 10
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    if not Path(CHROMIUM).exists():
        pytest.skip("no Chromium at /usr/bin/chromium (apt-get install chromium)")
    with sync_api.sync_playwright() as p:
        browser = launch_chromium(p)
        try:
            tab = browser.new_page(viewport=VIEWPORT)
            errors: list[str] = []
            tab.on("pageerror", lambda e: errors.append(str(e)))
            open_viewer(tab, page, timeout_ms=60_000)
            assert tab.locator("svg").count() > 0
            assert "initial_conv" in tab.content()
            assert errors == []
        finally:
            browser.close()


def test_the_sdist_carries_the_bundle_so_its_wheel_builds_without_npm(tmp_path: Path) -> None:
    if shutil.which("git") is None or not (REPO / ".git").exists() or shutil.which("npm") is None:
        pytest.skip("needs a git checkout and npm")
    checkout = clean_checkout(tmp_path / "checkout")
    run(sys.executable, "setup.py", "-q", "sdist", "-d", tmp_path / "dist", cwd=checkout)
    (sdist,) = (tmp_path / "dist").glob("torchatlas-*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
        tar.extractall(tmp_path / "unpacked", filter="data")
    assert {f"src/{name}" for name in BUNDLE} <= names
    assert {"web/package.json", "web/package-lock.json", "web/build.mjs", "web/src/main.js"} <= names
    assert not any("node_modules" in name for name in names)
    # Only the interpreter's own folder on PATH: the build hook would fail if it reached for npm.
    (unpacked,) = (tmp_path / "unpacked").iterdir()
    env = {**os.environ, "PATH": str(Path(sys.executable).parent)}
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", tmp_path / "wheel", unpacked, cwd=tmp_path, env=env)
    (wheel,) = (tmp_path / "wheel").glob("torchatlas-*.whl")
    with zipfile.ZipFile(wheel) as z:
        assert set(BUNDLE) <= set(z.namelist())
