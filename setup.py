"""The build hook: every wheel and sdist carries the web viewer's bundle.

``src/torchatlas/_render/web/viewer.{js,css}`` is a build artefact (not committed): when it
is missing, building the package runs ``npm ci && npm run build`` in ``web/`` first (elkjs
and esbuild come from npm, pinned by ``web/package-lock.json``). Building therefore needs
npm (Node.js >= 20); installing the wheel needs only pip. The metadata is in pyproject.toml.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

ROOT = Path(__file__).resolve().parent
WEB = ROOT / "web"
BUNDLE = [ROOT / "src" / "torchatlas" / "_render" / "web" / name for name in ("viewer.js", "viewer.css")]


def build_viewer() -> None:
    if all(path.is_file() for path in BUNDLE):
        return
    if not (WEB / "package.json").is_file():
        raise SystemExit(f"torchatlas: the viewer bundle is missing and there is no {WEB} to build it from")
    npm = shutil.which("npm")
    if npm is None:
        raise SystemExit(
            "torchatlas: building the package builds its web viewer with npm, which is not installed: "
            "install Node.js >= 20 (with npm), or install a torchatlas wheel"
        )
    print("torchatlas: building the web viewer bundle (npm ci && npm run build in web/)", flush=True)
    subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=WEB, check=True)
    subprocess.run([npm, "run", "--silent", "build"], cwd=WEB, check=True)
    missing = [str(path) for path in BUNDLE if not path.is_file()]
    if missing:
        raise SystemExit(f"torchatlas: the web build did not write {', '.join(missing)}")


class BuildPyWithViewer(build_py):
    def finalize_options(self) -> None:
        # Before package data is listed, so the bundle is in it.
        build_viewer()
        super().finalize_options()


class SdistWithViewer(sdist):
    def run(self) -> None:
        build_viewer()
        super().run()


setup(cmdclass={"build_py": BuildPyWithViewer, "sdist": SdistWithViewer})
