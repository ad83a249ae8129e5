"""Shared test options: ``@pytest.mark.slow`` tests run only with ``--run-slow`` or ``RUN_SLOW=1``;
``@pytest.mark.gpu`` tests run only where torch sees a CUDA device (``./dev test-gpu``)."""

from __future__ import annotations

import os

import pytest
import torch

if os.environ.get("PYTEST_XDIST_WORKER"):
    # `./dev test` runs one worker per core: torch's own intra-op threads on top of them would
    # fight the other workers for the same cores.
    torch.set_num_threads(1)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--run-slow",
        "--slow-too",
        action="store_true",
        default=False,
        help="also run tests marked slow (same as RUN_SLOW=1)",
    )


def slow_enabled(config: pytest.Config) -> bool:
    return bool(config.getoption("--run-slow")) or os.environ.get("RUN_SLOW", "") not in ("", "0")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not torch.cuda.is_available():
        no_gpu = pytest.mark.skip(reason="gpu: torch sees no CUDA device")
        for item in items:
            if item.get_closest_marker("gpu") is not None:  # not keywords: a folder may be named gpu
                item.add_marker(no_gpu)
    if slow_enabled(config):
        return
    skip = pytest.mark.skip(reason="slow: run with --run-slow or RUN_SLOW=1")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="module")
def browser():
    """A headless Chromium for the browser tests of one module; skips without Playwright,
    Chromium or the viewer bundle."""
    from _viewer import chromium_browser

    yield from chromium_browser()


@pytest.fixture(autouse=True)
def _no_terminal_size_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The summary fits ``COLUMNS`` where it is set; the shell or runner that starts the suite (a
    pytest-xdist worker sets it) must not choose the columns a test reads. A test that wants a
    width sets it itself."""
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)
