"""Opening a ``.pt2`` file written by ``torch.export.save``.

By default the file is read as data (``_pt2_reader``): its program's JSON becomes the
graph, and nothing in the file is unpickled, evaluated, extracted or loaded as code. Only
``trust=True`` (``trust_pickle=True``, CLI ``--trust``) hands the file to
``torch.export.load``, which unpickles payloads, evaluates symbolic sizes and opens
AOTInductor libraries: that runs code from the file, so it is for files trusted as code.
"""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from collections.abc import Iterator
from typing import Any

import torch

from .._ir import GraphFormatError, GraphIR, checked
from ._export_graph import graph_of
from ._pt2_reader import UnsafeArchiveError, read_program

__all__ = ["UnsafeArchiveError", "load_exported", "read_exported"]


def read_exported(path: str | os.PathLike[str]) -> GraphIR:
    """The graph of the program in a ``.pt2`` file, read as data: the same graph
    ``from_export`` gives of the program in memory. It passes the checks ``load`` makes of a
    document (sizes, numbers, nesting), so whatever it renders or saves is a graph ``load`` reads."""
    graph = graph_of(read_program(path), "torch.export", torch.__version__)
    try:
        return checked(graph)
    except GraphFormatError as e:
        raise UnsafeArchiveError(f"{os.fspath(path)}: its program is not a graph torchatlas can read: {e}") from None


def load_exported(path: str | os.PathLike[str]) -> Any:
    """The ``ExportedProgram`` ``torch.export.load`` makes of ``path``: this runs code from the file."""
    with _torch_export_log() as logged, warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        try:
            program = torch.export.load(path)
        except RuntimeError as e:
            if "warnings above" not in str(e):
                raise
            if logged:  # torch's message points at the error it logged: that one is the answer
                raise logged[-1] from None
            raise RuntimeError("the archive holds no exported program") from None
    for w in warned:  # a failed load is reported in one line; a loaded file keeps torch's warnings
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return program


class _KeptErrors(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.errors: list[BaseException] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info and record.exc_info[1] is not None:
            self.errors.append(record.exc_info[1])


@contextlib.contextmanager
def _torch_export_log() -> Iterator[list[BaseException]]:
    """torch.export.load logs a traceback for a corrupt archive, then raises "check the
    warnings above": the errors it logs are kept, not printed, so the caller can name them."""
    logger = logging.getLogger("torch.export")
    kept = _KeptErrors()
    previous = logger.propagate, logger.handlers
    logger.propagate, logger.handlers = False, [kept]
    try:
        yield kept.errors
    finally:
        logger.propagate, logger.handlers = previous
