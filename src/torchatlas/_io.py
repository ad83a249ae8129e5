"""File writes that never leave a half-written file and never replace what is not a file.

What happens is decided by what the path *is*, never by how it is spelled:

* A new path or a regular file (anywhere, ``/dev/shm`` included) is written to a temporary
  file in the same folder, then renamed over the target: a crash leaves the old contents or
  no file.
* A symlink is followed: the file it points to is replaced, the link stays. Links are
  resolved here, so the kernel's ``protected_symlinks`` rule is applied here too: a link in a
  sticky world-writable folder (``/tmp``, ``/dev/shm``) is followed only if it belongs to us
  or to the folder's owner; another user's is refused (``UnsafeLinkError``), since it could
  point our output at any file we may write.
* A regular file with other hard links, or in a folder we may not write, is written in place
  (truncated, then written), so every link sees the new contents; that write is not atomic.
* A file we may not write (mode ``0o444``) is refused, and so is a path spelled as a folder
  (``out/``), as a shell's ``>`` refuses them.
* An open file descriptor of this process (``/dev/fd/N``, ``/proc/self/fd/N``,
  ``/dev/stdout``) is written through that descriptor, at its position: a shell's
  ``> out.json`` or ``>> log`` keeps its meaning.
* Anything else that is not a regular file (``/dev/null``, a terminal, a FIFO) is opened
  and written directly, never created, truncated or replaced.

The mode of a replaced file is kept; a new file gets ``0o666`` less the umask, applied by
the kernel when the temporary file is created, so the process umask is never changed.
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import stat
from pathlib import Path

_MAX_LINKS = 40  # as the kernel's ELOOP limit
_OWN_FD = re.compile(r"/(?:dev/fd|proc/self/fd|proc/thread-self/fd|proc/(?P<pid>\d+)(?:/task/\d+)?/fd)/(?P<fd>\d+)")
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


class UnsafeLinkError(PermissionError):
    """A symlink in a sticky world-writable folder that neither we nor the folder's owner own."""


def write_atomic(path: str | os.PathLike[str], data: str | bytes) -> Path:
    """Write ``data`` to ``path`` (see the module docstring for what happens to what is there)."""
    target = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    if os.fspath(path).endswith(("/", os.sep)):  # a folder by its spelling, as a shell's `> out/` reads it
        raise IsADirectoryError(errno.EISDIR, "Is a directory", os.fspath(path))
    if os.name == "posix":
        # Joined, not normalised: "link/.." is the parent of where the link points, as for the kernel.
        resolved, fd = _resolve(os.path.join(os.getcwd(), target))
    else:
        resolved, fd = Path(os.path.realpath(target)), None
    if fd is not None:
        _write_fd(fd, payload)
        return target
    try:
        existing = os.lstat(resolved)  # resolved: no link left to follow
    except FileNotFoundError:
        existing = None
    if existing is not None and not stat.S_ISREG(existing.st_mode):
        _write_through(resolved, payload, truncate=False)
    elif existing is not None and existing.st_nlink > 1:
        _write_through(resolved, payload, truncate=True)
    elif existing is not None and not os.access(resolved, os.W_OK):
        # renaming over it needs only the folder's permission; a shell's `>` asks the file's
        raise PermissionError(errno.EACCES, "Permission denied", os.fspath(path))
    elif existing is not None and not os.access(resolved.parent, os.W_OK | os.X_OK):
        _write_through(resolved, payload, truncate=True)  # no temporary file can be made beside it
    else:
        resolved.parent.mkdir(parents=True, exist_ok=True)
        _replace(resolved, payload, None if existing is None else stat.S_IMODE(existing.st_mode))
    return target


def _own_fd(path: str) -> int | None:
    """N when ``path`` names this process's open file descriptor N."""
    match = _OWN_FD.fullmatch(path)
    if match is None or (match["pid"] is not None and int(match["pid"]) != os.getpid()):
        return None
    return int(match["fd"])


def _resolve(path: str) -> tuple[Path, int | None]:
    """``path`` with every symlink followed, as the kernel would (``protected_symlinks`` included),
    or the file descriptor it names. Components from the first missing one on are kept as given."""
    done = "/"
    todo = [c for c in path.split("/") if c and c != "."]
    todo.reverse()
    links = 0
    while todo:
        name = todo.pop()
        if name == "..":
            done = os.path.dirname(done)
            continue
        here = os.path.join(done, name)
        if not todo and (fd := _own_fd(here)) is not None:
            return Path(here), fd
        try:
            info = os.lstat(here)
        except FileNotFoundError:
            if ".." in todo:  # the kernel too finds no parent of what is not there
                raise
            return Path(here, *reversed(todo)), None
        if not stat.S_ISLNK(info.st_mode):
            done = here
            continue
        links += 1
        if links > _MAX_LINKS:
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
        _check_link_may_be_followed(here, info, done)
        points_to = os.readlink(here)
        todo.extend(reversed([c for c in points_to.split("/") if c and c != "."]))
        if points_to.startswith("/"):
            done = "/"
    return Path(done), _own_fd(done)


def _check_link_may_be_followed(link: str, info: os.stat_result, folder: str) -> None:
    """The kernel's ``protected_symlinks``: in a sticky world-writable folder, follow a link
    only if it is ours or the folder owner's (links we resolve ourselves skip the kernel's check)."""
    if not hasattr(os, "geteuid"):
        return
    where = os.stat(folder)
    sticky_shared = where.st_mode & stat.S_ISVTX and where.st_mode & stat.S_IWOTH
    if sticky_shared and info.st_uid not in (os.geteuid(), where.st_uid):
        raise UnsafeLinkError(
            f"refusing to write through {link}: a symlink owned by another user (uid {info.st_uid}) "
            f"in the sticky world-writable folder {folder} could point anywhere; remove it or write elsewhere"
        )


def _write_fd(fd: int, payload: bytes) -> None:
    view = memoryview(payload)
    while view:
        view = view[os.write(fd, view):]


def _write_through(target: Path, payload: bytes, truncate: bool) -> None:
    flags = os.O_WRONLY | _NOFOLLOW | (os.O_TRUNC if truncate else 0)
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
