"""Opening a ``.pt2`` file written by ``torch.export.save`` without running code from it.

``torch.export.load`` unpickles whatever the archive asks it to: payloads marked
``use_pickle`` (``torch.load(weights_only=False)``), opaque-object constants
(``pickle.loads``), TorchScript custom objects, legacy pickled members, sample
inputs that ``weights_only=True`` refuses (it then retries without), and symbolic
sizes that it hands to ``sympy.sympify``, which evaluates them as Python. So the
archive is read first, as plain zip and JSON, and refused with a one-line
:class:`UnsafeArchiveError` naming the member at the first such payload, unless
the caller says it trusts the file (``trust_pickle=True``, ``--trust-pickle``).
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import logging
import os
import re
import warnings
import zipfile
from collections.abc import Iterator
from typing import Any

import torch

# Record names relative to the archive's root folder (torch/csrc/export/pt2_archive_constants.h).
_WEIGHTS_DIR = "data/weights/"
_CONSTANTS_DIR = "data/constants/"
_SAMPLE_INPUTS_DIR = "data/sample_inputs/"
_MODELS_DIR = "models/"
_PICKLED_OBJECT_PREFIXES = ("custom_obj_", "opaque_obj_")
# Members of the pre-2.7 archive layout, which torch.export.load still reads (with pickle)
# when the current layout fails to load.
_LEGACY_MEMBERS = ("serialized_state_dict.pt", "serialized_constants.pt", "serialized_example_inputs.pt")

# A symbolic size is sympy's srepr text, ``Add(Symbol('s0', integer=True), Integer(1))``,
# which sympify evaluates as Python. It is parsed (never run) and must use only these
# calls, symbol names, numbers and boolean keyword flags.
_SYMBOL = re.compile(r"[a-z]+[0-9]+")
_SYMPY_NAMES = frozenset(
    """Symbol Integer Rational Float Max Min Mod Abs Eq Ne Lt Le Gt Ge StrictLessThan StrictGreaterThan
    LessThan GreaterThan Equality Unequality And Or Not Xor Piecewise ITE floor ceiling sqrt Pow Mul Add
    oo zoo nan true false int_oo IntInfinity NegativeIntInfinity S Half One Zero NegativeOne""".split()
)
_EXPRESSION_NODES = (
    ast.Expression, ast.Call, ast.Name, ast.Load, ast.Constant, ast.keyword, ast.BinOp, ast.UnaryOp,
    ast.Compare, ast.BoolOp, ast.operator, ast.unaryop, ast.cmpop, ast.boolop, ast.Tuple,
)


class UnsafeArchiveError(ValueError):
    """A ``.pt2`` file holds a payload that loading would unpickle or evaluate."""


def load_exported(path: str | os.PathLike[str], *, trust_pickle: bool = False) -> Any:
    """The ``ExportedProgram`` in ``path``; refuses pickled or evaluated payloads unless trusted."""
    if not trust_pickle:
        check_archive(path)
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


def check_archive(path: str | os.PathLike[str]) -> None:
    """Raise :class:`UnsafeArchiveError` at the first member that loading would unpickle or evaluate."""
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError):
        return  # not an archive at all: torch.export.load fails on it without unpickling anything
    with archive:
        names = archive.namelist()
        records = _records(names)
        where = os.fspath(path)
        for name in names:
            if name.rsplit("/", 1)[-1] in _LEGACY_MEMBERS:
                _refuse(where, name, "is a pickle of the pre-2.7 .pt2 layout")
        if "archive_format" not in records:
            _refuse(where, names[0] if names else "(empty)", "belongs to no current torch.export archive layout")
        for record, member in records.items():
            _check_record(archive, where, record, member)


def _records(names: list[str]) -> dict[str, str]:
    """Record name relative to the archive's root folder -> zip member name."""
    root = names[0].split("/", 1)[0] + "/" if names and "/" in names[0] else ""
    return {n[len(root):]: n for n in names if n.startswith(root) and not n.endswith("/")}


def _check_record(archive: zipfile.ZipFile, where: str, record: str, member: str) -> None:
    folder, _, base = record.rpartition("/")
    folder += "/"
    if folder in (_WEIGHTS_DIR, _CONSTANTS_DIR):
        if base.startswith(_PICKLED_OBJECT_PREFIXES):
            _refuse(where, member, "is a pickled Python object")
        if base.endswith(".pt"):
            _refuse(where, member, "is a pickle of the legacy weights layout")
        if base.endswith("_config.json"):
            _check_payload_config(_json(archive, member), where, member, folder)
    elif folder == _SAMPLE_INPUTS_DIR:
        _check_sample_inputs(archive.read(member), where, member)
    elif folder == _MODELS_DIR and base.endswith(".json"):
        for expression in _expressions(_json(archive, member)):
            _check_expression(expression, where, member)


def _check_payload_config(config: Any, where: str, member: str, folder: str) -> None:
    entries = config.get("config") if isinstance(config, dict) else None
    for fqn, payload in (entries or {}).items() if isinstance(entries, dict) else ():
        if not isinstance(payload, dict):
            continue  # torch cannot read such an entry either
        file = str(payload.get("path_name", ""))
        if payload.get("use_pickle"):
            _refuse(where, member, f"marks {fqn!r} ({folder}{file}) as a pickle (use_pickle)")
        if file.startswith(_PICKLED_OBJECT_PREFIXES):
            _refuse(where, member, f"loads {fqn!r} from the pickled object {folder}{file}")


def _check_sample_inputs(data: bytes, where: str, member: str) -> None:
    """torch retries a sample-inputs pickle with ``weights_only=False`` when the safe load fails."""
    if not data:
        return
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch warns again when it loads the same bytes
            torch.load(io.BytesIO(data), weights_only=True)
    except Exception as e:  # anything the restricted unpickler refuses
        _refuse(where, member, f"is a pickle that only an unrestricted load accepts ({type(e).__name__})")


def _expressions(value: Any) -> Iterator[str]:
    """Every symbolic-size expression (``expr_str``) in a serialized program."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            expression = item.get("expr_str")
            if isinstance(expression, str):
                yield expression
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _check_expression(expression: str, where: str, member: str) -> None:
    if not _is_size_expression(expression):
        _refuse(where, member, f"has a symbolic size that is not a sympy expression: {expression[:80]!r}")


def _is_size_expression(expression: str) -> bool:
    try:
        tree = ast.parse(expression, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    allowed = _SYMPY_NAMES | _torch_sympy_functions()
    for node in ast.walk(tree):
        if not isinstance(node, _EXPRESSION_NODES):
            return False
        if isinstance(node, ast.Name) and node.id not in allowed and not _SYMBOL.fullmatch(node.id):
            return False
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id in allowed):
            return False
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and not _SYMBOL.fullmatch(node.value):
            return False
        if isinstance(node, ast.Constant) and not isinstance(node.value, (int, float, str)):
            return False
    return True


def _torch_sympy_functions() -> frozenset[str]:
    """The sympy functions torch defines for sizes (FloorDiv, ModularIndexing...), which it writes by name."""
    import torch.utils._sympy.functions as functions

    return frozenset(n for n, v in vars(functions).items() if isinstance(v, type) and not n.startswith("_"))


def _json(archive: zipfile.ZipFile, member: str) -> Any:
    """The member's JSON; None when it is not JSON (torch then fails to read it too, running nothing)."""
    try:
        return json.loads(archive.read(member))
    except (ValueError, RecursionError):
        return None


def _refuse(where: str, member: str, why: str) -> None:
    raise UnsafeArchiveError(
        f"{where}: refusing to load: member {member!r} {why}; loading it can run code. "
        "Open it only if you trust the file: trust_pickle=True (CLI: --trust-pickle)"
    )


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
