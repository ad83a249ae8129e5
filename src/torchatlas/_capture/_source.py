"""Which user source line made a call, and which variable its result was assigned to."""

from __future__ import annotations

import ast
import inspect
import linecache
import os
import re
import textwrap
import tokenize
import traceback
import types
from functools import lru_cache

import torch

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_OWN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_INTERNAL_PREFIXES = (_TORCH_DIR, _OWN_DIR)
# The bundled example is user code that happens to ship inside the package.
_EXAMPLE_FILE = os.path.join(_OWN_DIR, "_example.py")

# ``name = ...``, ``a, b = ...``, ``(a, b) = ...``, ``x += ...``, ``x: T = ...``;
# not ``==`` and not keyword arguments (those never start a line).
_ASSIGN = re.compile(
    r"^\s*\(?\s*(?P<targets>[A-Za-z_][\w.]*(?:\s*,\s*[A-Za-z_][\w.]*)*)\s*,?\s*\)?"
    r"\s*(?::[^=]+)?(?:[-+*/@%&|^]|//|\*\*|>>|<<)?=(?!=)"
)

@lru_cache(maxsize=4096)
def _is_internal_file(filename: str) -> bool:
    """Keyed by file name, not code object: a cache of code objects would keep every traced
    model's code alive, and grow with every generated model."""
    return (filename.startswith(_INTERNAL_PREFIXES) and filename != _EXAMPLE_FILE) or filename.startswith("<frozen")


def is_user_file(filename: str) -> bool:
    """Neither torch's nor ours: the files a recorded op's source line may come from."""
    return not _is_internal_file(filename)


def is_library_file(filename: str) -> bool:
    """Code of torch's or torchatlas's own, which lives as long as the process."""
    return filename.startswith(_INTERNAL_PREFIXES)


class FrameSerials:
    """A number for each run of a user function, for one trace: what tells a line's run in one
    call from the same line's run in the next. A frame's ``id()`` cannot: a frame that returned
    frees its address, and the next call's frame often gets it.

    The frames seen are held, so no address is reused while they are, on a stack in the order
    they were first seen. A frame's event drops the frames above it (they have returned), and a
    new frame drops those that are not its callers; a dropped frame is never held past its
    caller's next event, so no function's locals live long."""

    __slots__ = ("_stack", "_position", "_count", "callers")

    def __init__(self) -> None:
        self._stack: list[tuple[types.FrameType, int]] = []  # (frame, serial), oldest first
        self._position: dict[int, int] = {}  # id of a held frame -> its place in the stack
        self._count = 0
        self.callers: dict[int, tuple[types.CodeType, int]] = {}
        """Serial of a helper function's run -> (code, line) of the user line that called it."""

    def __call__(self, frame: types.FrameType | None) -> int:
        """The serial of ``frame``'s run (0 for none)."""
        if frame is None:
            return 0
        stack = self._stack
        if stack and stack[-1][0] is frame:
            return stack[-1][1]
        # A held frame is alive, so an id found here is that very frame.
        place = self._position.get(id(frame))
        if place is None:
            caller = frame.f_back
            while caller is not None and id(caller) not in self._position:
                caller = caller.f_back
            self._drop_above(-1 if caller is None else self._position[id(caller)])
            self._count += 1
            called_from = frame.f_back
            if called_from is not None and not _is_internal_file(called_from.f_code.co_filename):
                self.callers[self._count] = (called_from.f_code, called_from.f_lineno)
            self._position[id(frame)] = len(stack)
            stack.append((frame, self._count))
            return self._count
        self._drop_above(place)
        return stack[place][1]

    def _drop_above(self, place: int) -> None:
        for frame, _ in self._stack[place + 1 :]:
            del self._position[id(frame)]
        del self._stack[place + 1 :]

    def close(self) -> None:
        """Let go of every frame."""
        self._stack.clear()
        self._position.clear()


def returned_names(code: types.CodeType) -> frozenset[str]:
    """The variables a function returns, where each of its ``return`` statements returns one
    plain name (``return values``); else none."""
    return _returned_names(code.co_filename, code.co_firstlineno, code.co_name)


@lru_cache(maxsize=4096)
def _returned_names(filename: str, first_line: int, name: str) -> frozenset[str]:
    lines = linecache.getlines(filename)
    if not lines or first_line > len(lines):
        return frozenset()
    try:
        block = inspect.getblock(lines[first_line - 1 :])
        tree = ast.parse(textwrap.dedent("".join(block)))
    except (SyntaxError, IndentationError, tokenize.TokenError):
        return frozenset()
    func = tree.body[0] if tree.body else None
    if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)) or func.name != name:
        return frozenset()
    returned: set[str] = set()
    pending: list[ast.AST] = list(func.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue  # a nested function's returns are not this one's
        if isinstance(node, ast.Return):
            if not isinstance(node.value, ast.Name):
                return frozenset()
            returned.add(node.value.id)
        pending.extend(ast.iter_child_nodes(node))
    return frozenset(returned)


def user_frame(frame: types.FrameType | None) -> types.FrameType | None:
    """The first frame at or above ``frame`` that is neither torch's nor ours."""
    while frame is not None and _is_internal_file(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def user_frame_and_entry(frame: types.FrameType | None) -> tuple[types.FrameType | None, types.CodeType | None]:
    """The user frame at or above ``frame``, and the code of the torch function that user line
    called (the frame just below it; None when the user line is ``frame`` itself)."""
    entry = None
    while frame is not None and _is_internal_file(frame.f_code.co_filename):
        entry = frame.f_code
        frame = frame.f_back
    return frame, entry


def user_traceback_code(exc: BaseException) -> tuple[types.CodeType | None, int]:
    """(code, line) of the innermost frame of ``exc``'s traceback that is neither torch's nor ours."""
    found: tuple[types.CodeType | None, int] = (None, 0)
    tb = exc.__traceback__
    while tb is not None:
        if not _is_internal_file(tb.tb_frame.f_code.co_filename):
            found = (tb.tb_frame.f_code, tb.tb_lineno)
        tb = tb.tb_next
    return found


def user_traceback_frame(exc: BaseException) -> traceback.FrameSummary | None:
    """The innermost frame of ``exc``'s traceback that is neither torch's nor ours."""
    frames = [
        fs
        for fs in traceback.extract_tb(exc.__traceback__)
        if not fs.filename.startswith(_INTERNAL_PREFIXES) and not fs.filename.startswith("<frozen")
    ]
    return frames[-1] if frames else None


@lru_cache(maxsize=65536)
def line_text(filename: str, lineno: int) -> str:
    return linecache.getline(filename, lineno).strip()


@lru_cache(maxsize=65536)
def assignment_targets(filename: str, lineno: int) -> tuple[str, ...]:
    """Variable names a source line assigns to, outermost first; empty when it assigns none."""
    text = linecache.getline(filename, lineno)
    match = _ASSIGN.match(text)
    if not match or (";" in text and _statement_count(text) > 1):
        return ()  # ``a = f(x); b = g(a)``: which value each name got, the line alone cannot say
    names = tuple(t.strip() for t in match.group("targets").split(","))
    return tuple(n.removeprefix("self.") for n in names)


def _statement_count(text: str) -> int:
    """Statements on a source line; 1 when it is not a whole statement (a continued line)."""
    try:
        return len(ast.parse(text.strip()).body)
    except SyntaxError:
        return 1


_LOOP = re.compile(r"(for|while)\b")


@lru_cache(maxsize=1024)
def enclosing_loop(filename: str, lineno: int) -> tuple[int, str] | None:
    """(line, text) of the ``for``/``while`` header that holds ``lineno``: the nearest line
    above it, indented less, that starts a loop (None when none is found near it)."""
    text = linecache.getline(filename, lineno)
    indent = len(text) - len(text.lstrip())
    for above in range(lineno - 1, max(0, lineno - 200), -1):
        line = linecache.getline(filename, above)
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        depth = len(line) - len(line.lstrip())
        if depth < indent:
            if _LOOP.match(stripped):
                return above, stripped
            if stripped.startswith(("def ", "class ", "async def ")):
                return None
            indent = depth
    return None
