"""What long work shows on a terminal: a spinner while a render or a model load runs, and a
live op counter while a long trace runs. Both write to stderr and leave no line behind."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any


@contextlib.contextmanager
def status(text: str, enabled: bool | None = None) -> Iterator[None]:
    """A spinner with ``text`` while the block runs; by default only when stderr is a terminal."""
    if not (sys.stderr.isatty() if enabled is None else enabled):
        yield
        return
    from rich.console import Console  # rich is imported only when something is shown

    with Console(stderr=True).status(text):
        yield


class op_progress:
    """A live op counter for long traces, shown from capture's first report on (every 1,024 ops,
    so short traces stay silent); by default only when stderr is a terminal."""

    def __init__(self, enabled: bool | None) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._progress: Any = None
        self._task: Any = None

    def __enter__(self) -> Callable[[int], None] | None:
        return self._report if self.enabled else None

    def _report(self, ops: int) -> None:
        if self._progress is None:
            from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

            self._progress = Progress(
                SpinnerColumn(), TextColumn("tracing: {task.completed} ops"), TimeElapsedColumn(), transient=True
            )
            self._progress.start()
            self._task = self._progress.add_task("trace", total=None)
        self._progress.update(self._task, completed=ops)

    def __exit__(self, *exc: Any) -> None:
        if self._progress is not None:
            self._progress.stop()
