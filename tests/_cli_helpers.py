"""Running the CLI in-process and reading what it printed."""

from __future__ import annotations

import pytest

from torchatlas._cli import main


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``torchatlas *argv``."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.strip()]
