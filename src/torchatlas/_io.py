"""File writes that never leave a half-written file and never replace what is not a file.

* A new path or a regular file is written to a temporary file in the same folder, then
  renamed over the target: a crash leaves the old contents or no file.
* A symlink is followed: the file it points to is replaced, the link stays.
* A regular file with other hard links is written in place (truncated, then written), so
  every link sees the new contents; that write is not atomic.
* Anything that is not a regular file (``/dev/null``, a FIFO, ``/dev/stdout``, a terminal)
  and every path under ``/dev`` or ``/proc`` is opened and written directly.

The mode of a replaced file is kept; a new file gets ``0o666`` less the umask, applied by
the kernel when the temporary file is created, so the process umask is never changed.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

_DIRECT_ROOTS = ("/dev/", "/proc/")


def write_atomic(path: str | os.PathLike[str], data: str | bytes) -> Path:
    """Write ``data`` to ``path`` (see the module docstring for what happens to what is there)."""
    target = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    try:
        existing = os.stat(target)  # follows symlinks
    except FileNotFoundError:
        existing = None
    if str(target).startswith(_DIRECT_ROOTS) or (existing is not None and not stat.S_ISREG(existing.st_mode)):
        _write_through(target, payload, truncate=False)
        return target
    if existing is not None and existing.st_nlink > 1:
        _write_through(target, payload, truncate=True)
        return target
    resolved = Path(os.path.realpath(target)) if target.is_symlink() else target
    resolved.parent.mkdir(parents=True, exist_ok=True)
    _replace(resolved, payload, None if existing is None else stat.S_IMODE(existing.st_mode))
    return target


def _write_through(target: Path, payload: bytes, truncate: bool) -> None:
    flags = os.O_WRONLY | (os.O_TRUNC if truncate else 0)
    fd = os.open(target, flags)
    with os.fdopen(fd, "wb") as f:
        f.write(payload)


def _replace(target: Path, payload: bytes, mode: int | None) -> None:
    # A short temporary name: the target's own name may already be as long as a name can be.
    tmp = target.parent / f".torchatlas-{secrets.token_hex(6)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the kernel applies the umask
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
