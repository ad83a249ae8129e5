"""A Graph's and a Comparison's notebook display in real JupyterLab: a server on localhost, a
notebook opened in Chromium, its cell run, the page's boxes drawn inside the output's iframe.

Skips without JupyterLab (the dev extra installs it), Playwright's Chromium or the viewer bundle.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

SRC = Path(__file__).resolve().parents[1] / "src"
CELLS = {
    "graph": "import torchatlas\nfrom torchatlas import _example\ntorchatlas.trace(_example.CoolCNN(), _example.example_input())",
    "compare": (
        "import copy, torch, torchatlas\nfrom torchatlas import _example\ntorch.manual_seed(0)\nm = _example.CoolCNN().eval()\n"
        "x = _example.example_input()\ntorchatlas.compare((m, (x,)), (copy.deepcopy(m).half().float(), (x,)))"
    ),
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory):
    """(base URL, token, notebook folder) of a JupyterLab server started for these tests."""
    pytest.importorskip("jupyterlab")
    from torchatlas._render import viewer_bundle_built

    if not viewer_bundle_built():
        pytest.skip("the viewer bundle is not built (cd web && npm run build)")
    root = tmp_path_factory.mktemp("lab")
    port, token = _free_port(), secrets.token_hex(16)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]), "JUPYTER_CONFIG_DIR": str(root / ".config")}
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--ServerApp.ip=127.0.0.1",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}", "--allow-root", "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2)
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"JupyterLab did not start: {server.stderr.read()[-2000:] if server.poll() is not None else 'timeout'}")
                time.sleep(0.5)
        yield url, token, root
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()


@pytest.mark.parametrize("cell", list(CELLS))
def test_a_notebook_cell_draws_the_page_inside_its_output_iframe(lab, browser, cell: str) -> None:
    url, token, root = lab
    notebook = {
        "cells": [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": CELLS[cell]}],
        "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
        "nbformat": 4, "nbformat_minor": 5,
    }
    (root / f"{cell}.ipynb").write_text(json.dumps(notebook))
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    try:
        # a workspace of its own: JupyterLab would restore the other test's notebook in front of this one
        page.goto(f"{url}/lab/workspaces/{cell}/tree/{cell}.ipynb?token={token}&reset", timeout=120_000)
        page.locator(".jp-Notebook .jp-Cell .cm-content").first.click(timeout=120_000)
        page.wait_for_function("() => /\\| Idle/.test(document.body.innerText)", timeout=180_000)  # the kernel is up
        page.keyboard.press("Shift+Enter")
        try:
            page.locator(".jp-OutputArea-output iframe").wait_for(state="attached", timeout=240_000)
        except Exception as e:  # what the cell printed instead (a traceback), in the failure
            outputs = page.locator(".jp-OutputArea").all_inner_texts()
            raise AssertionError(f"no page in the output; the output area holds: {outputs}") from e
        page.locator(".jp-OutputArea-output iframe").scroll_into_view_if_needed()
        frame = page.frame_locator(".jp-OutputArea-output iframe")
        drawn = frame.locator(".unit:not(.culled)")  # the page's boxes, laid out and on screen inside the iframe
        drawn.first.wait_for(timeout=240_000)
        assert drawn.count() > 5
        if cell == "compare":
            assert frame.locator('select[aria-label="Colour boxes by"]').input_value() == "ov:error"
        page.screenshot(path=str(root / f"{cell}.png"))
    finally:
        context.close()
