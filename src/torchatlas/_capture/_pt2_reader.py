"""Reading a ``.pt2`` file written by ``torch.export.save`` as data: its program's JSON, and
nothing else.

``torch.export.load`` unpickles payloads, ``dlopen``s AOTInductor libraries it extracts,
loads every ``models/`` member as a program and evaluates symbolic sizes with sympy, all
through a zip reader (miniz) that reads names and offsets differently from Python's. So
no member is handed to torch: one ``zipfile`` parse reads exactly two allow-listed members
(``archive_format`` and the program's ``models/<name>.json``), each capped by its declared
size before reading and again while inflating, and the graph is built from the program's
JSON (nodes, targets, arguments, tensor metadata, ``nn_module_stack``, signature). Symbolic
sizes become text (``_export_graph.size_text``); weights, constants, sample inputs and
libraries are never opened. An archive laid out to be read differently by another zip
reader (data before the first entry, a central directory that is not where its end record
says, names repeated or differing only in case, absolute or ``..`` names) is refused in one
line naming the member.
"""

from __future__ import annotations

import functools
import json
import keyword
import lzma
import os
import re
import zipfile
import zlib
from typing import Any

from .._ir import TensorMeta, is_count
from ._export_graph import ExportLeaf, ExportOp, ExportProgram, SizeExpressionError, Use, size_text
from ._fx_import import _module_path

MAX_PROGRAM_BYTES = 64 << 20
"""The largest program JSON read (a 2-layer Llama's is about 0.3 MB)."""
MAX_JSON_VALUES = 8_000_000
"""The most values (commas and containers, counted before parsing) a program's JSON may hold:
a few hundred MiB parsed, where 64 MiB of ``[],`` would make 21 million lists."""
MAX_MEMBERS = 1 << 18
MAX_DIRECTORY_BYTES = 64 << 20
_CHUNK = 1 << 20
UNKNOWN_SIZE = "?"
"""The text of a static size that no tensor has (torch writes none: the file was edited)."""
_PROGRAM = "model"
"""The program ``torch.export.save`` writes; another is read only when it is the archive's one program."""


class UnsafeArchiveError(ValueError):
    """A ``.pt2`` file refused: laid out to be read differently than it looks, past a size cap,
    or holding a program that is not the JSON ``torch.export.save`` writes."""


def read_program(path: str | os.PathLike[str]) -> ExportProgram:
    """The records of the program in a ``.pt2`` file, read as data."""
    where = os.fspath(path)
    with open(path, "rb") as file:
        archive = _open_archive(file, where)
        with archive:
            infos = archive.infolist()
            for info in infos:
                _check_name(info.filename, where)
            root = infos[0].filename.split("/", 1)[0] + "/" if "/" in infos[0].filename else ""
            layout = _read(archive, infos, root + "archive_format", 64, where)
            if layout is None or layout.strip() != b"pt2":
                raise UnsafeArchiveError(
                    f"{where}: not a torch.export program of the current layout: no {root}archive_format saying pt2 "
                    "(an older layout is read only by torch.export.load, with trust=True)"
                )
            name = _program_name(infos, root, where)
            member = root + "models/" + name + ".json"
            data = _read(archive, infos, member, MAX_PROGRAM_BYTES, where)
            weights = _weights_config(archive, infos, f"{root}data/weights/{name}_weights_config.json", where)
    if data is None:
        raise UnsafeArchiveError(f"{where}: member {member!r} is missing")
    values = data.count(b",") + data.count(b"[") + data.count(b"{")
    if values > MAX_JSON_VALUES:
        raise UnsafeArchiveError(f"{where}: member {member!r} holds about {values} JSON values (at most {MAX_JSON_VALUES} are parsed)")
    try:
        document = json.loads(data)
    except (ValueError, RecursionError) as e:  # bad JSON, an int too long to convert, nesting too deep
        raise UnsafeArchiveError(f"{where}: member {member!r} is not JSON: {str(e)[:120]}") from None
    try:
        program = _ProgramReader(document).program()
    except SizeExpressionError as e:
        raise UnsafeArchiveError(f"{where}: member {member!r} has {e}; it is read as text, never evaluated") from None
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, RecursionError, RuntimeError, OverflowError) as e:
        raise UnsafeArchiveError(
            f"{where}: member {member!r} is not a torch.export program: {type(e).__name__}: {str(e)[:120]}"
        ) from None
    program.tied = _tied(weights, [leaf.path for leaf in program.leaves if leaf.kind == "param"])
    return program


def _weights_config(archive: zipfile.ZipFile, infos: list[zipfile.ZipInfo], member: str, where: str) -> bytes | None:
    """The weights config, for which parameters are one tensor: only a hint, so one that would
    be refused (spelled two ways, too large) is left unread rather than refusing the program."""
    try:
        return _read(archive, infos, member, MAX_PROGRAM_BYTES, where)
    except UnsafeArchiveError:
        return None


def _tied(config: bytes | None, names: list[str]) -> list[list[str]]:
    """Groups of parameter names saved as one tensor: the same weights file, sizes, strides and
    offset in the weights config ``torch.export.save`` writes. Only a hint: a config that
    cannot be read, or that says otherwise, ties nothing."""
    try:
        entries = json.loads(config)["config"] if config is not None and config.count(b"{") < MAX_JSON_VALUES else {}
        groups: dict[str, list[str]] = {}
        for name in names:
            entry = entries.get(name) if isinstance(entries, dict) else None
            if isinstance(entry, dict) and entry.get("is_param") and isinstance(entry.get("path_name"), str):
                meta = entry.get("tensor_meta") or {}
                key = json.dumps([entry["path_name"], meta.get("sizes"), meta.get("strides"), meta.get("storage_offset")], sort_keys=True)
                groups.setdefault(key, []).append(name)
    except (ValueError, RecursionError, TypeError, AttributeError):
        return []
    return [group for group in groups.values() if len(group) > 1]


def _open_archive(file: Any, where: str) -> zipfile.ZipFile:
    """One ``zipfile`` parse, refused when its end record promises more than the caps allow or
    when another reader would find other members at other offsets."""
    try:
        end = zipfile._EndRecData(file)  # the end record alone, before the directory is read
    except OSError:
        end = None
    if end is None:
        raise UnsafeArchiveError(f"{where}: not a torch.export program: not a zip archive (no end of central directory)")
    if end[zipfile._ECD_ENTRIES_TOTAL] > MAX_MEMBERS or end[zipfile._ECD_SIZE] > MAX_DIRECTORY_BYTES:
        raise UnsafeArchiveError(
            f"{where}: the archive declares {end[zipfile._ECD_ENTRIES_TOTAL]} members in "
            f"{end[zipfile._ECD_SIZE]} bytes of directory (at most {MAX_MEMBERS} in {MAX_DIRECTORY_BYTES})"
        )
    try:
        archive = zipfile.ZipFile(file)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError, NotImplementedError) as e:
        raise UnsafeArchiveError(f"{where}: not a torch.export program: not a readable zip archive: {str(e)[:120]}") from None
    infos = archive.infolist()
    if not infos:
        archive.close()
        raise UnsafeArchiveError(f"{where}: not a torch.export program: the zip archive holds no members")
    file.seek(0)
    # Python shifts every offset by the bytes before the directory it did not expect (a
    # self-extractor stub); other readers, torch's included, do not. Both must agree.
    if archive.start_dir != end[zipfile._ECD_OFFSET] or min(i.header_offset for i in infos) != 0 \
            or file.read(4) != b"PK\x03\x04":
        archive.close()
        first = infos[0].filename
        raise UnsafeArchiveError(
            f"{where}: member {first!r} is not where the archive's directory says: data before the first "
            "member or a second central directory (another zip reader would read other members)"
        )
    return archive


def _check_name(name: str, where: str) -> None:
    parts = name.replace("\\", "/").split("/")
    if name.startswith(("/", "\\")) or re.match(r"[A-Za-z]:", name) or ".." in parts:
        raise UnsafeArchiveError(f"{where}: member {name!r} is an absolute or '..' path (it would be written outside the archive)")


def _program_name(infos: list[zipfile.ZipInfo], root: str, where: str) -> str:
    """``model``, what ``torch.export.save`` writes, unless another is the archive's one program
    (a name only in another case is refused when read, by :func:`_read`)."""
    folder = root + "models/"
    names = {i.filename[len(folder):-len(".json")] for i in infos if i.filename.startswith(folder) and i.filename.endswith(".json")}
    if not names or any(name.casefold() == _PROGRAM for name in names):
        return _PROGRAM
    if len(names) > 1:
        raise UnsafeArchiveError(
            f"{where}: the archive holds several programs ({', '.join(sorted(names)[:8])}) and none named "
            f"{_PROGRAM!r}: torchatlas reads one, so it refuses to choose"
        )
    return names.pop()


def _read(archive: zipfile.ZipFile, infos: list[zipfile.ZipInfo], name: str, cap: int, where: str) -> bytes | None:
    """The bytes of the one member named exactly ``name``, at most ``cap``; None when absent."""
    same = [i for i in infos if i.filename.casefold() == name.casefold()]
    if not same:
        return None
    if len(same) > 1 or same[0].filename != name:
        spelled = ", ".join(repr(i.filename) for i in same[:4])
        raise UnsafeArchiveError(
            f"{where}: member {name!r} is spelled {len(same)} ways ({spelled}): zip readers that ignore case "
            "or keep the last copy would read another one"
        )
    info = same[0]
    if info.file_size > cap:
        raise UnsafeArchiveError(f"{where}: member {name!r} declares {info.file_size} bytes (at most {cap} are read)")
    chunks, total = [], 0
    try:
        with archive.open(info) as stream:
            while chunk := stream.read(_CHUNK):
                total += len(chunk)
                if total > min(cap, info.file_size):
                    raise UnsafeArchiveError(f"{where}: member {name!r} inflates past its declared {info.file_size} bytes")
                chunks.append(chunk)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError, RuntimeError, zlib.error, lzma.LZMAError) as e:
        if isinstance(e, UnsafeArchiveError):
            raise
        raise UnsafeArchiveError(f"{where}: member {name!r} cannot be read: {str(e)[:120]}") from None
    return b"".join(chunks)


# -- the program's JSON -------------------------------------------------------------


def _one(value: Any) -> tuple[str, Any]:
    """A union of torch's schema: a dict of exactly one field."""
    if not isinstance(value, dict) or len(value) != 1:
        raise TypeError(f"expected a one-field union, got {type(value).__name__}")
    return next(iter(value.items()))


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value


def _int(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"expected an int, got {type(value).__name__}")
    return value


def _float(value: Any) -> float:
    if isinstance(value, str) and value in ("Infinity", "-Infinity", "NaN"):  # how torch writes them
        return float(value.lower().replace("infinity", "inf"))
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise TypeError(f"expected a float, got {type(value).__name__}")
    return float(value)


def _list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError(f"expected a list, got {type(value).__name__}")
    return value


def _dict(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError(f"expected an object, got {type(value).__name__}")
    return value


class _ProgramReader:
    """An ``ExportedProgram``'s JSON (torch/_export/serde/schema.py) -> ``ExportProgram`` records."""

    def __init__(self, document: Any) -> None:
        module = _dict(_dict(document)["graph_module"])
        self.graph = _dict(module["graph"])
        self.signature = _dict(module["signature"])
        self.calls = _list(module.get("module_call_graph") or [])
        self.namedtuples = module.get("treespec_namedtuple_fields") or {}
        self.tensors = _dict(self.graph.get("tensor_values") or {})
        from torch._export.serde.serialize import (
            _SERIALIZE_TO_TORCH_DTYPE,
            _SERIALIZE_TO_TORCH_LAYOUT,
            _SERIALIZE_TO_TORCH_MEMORY_FORMAT,
        )

        self.dtypes, self.layouts = _SERIALIZE_TO_TORCH_DTYPE, _SERIALIZE_TO_TORCH_LAYOUT
        self.memory_formats = _SERIALIZE_TO_TORCH_MEMORY_FORMAT

    def program(self) -> ExportProgram:
        nodes = [_dict(n) for n in _list(self.graph["nodes"])]
        targets = [_str(n["target"]) for n in nodes]
        stacks = [_stack(_dict(n.get("metadata") or {}).get("nn_module_stack")) for n in nodes]
        root = next((cls for stack in stacks for _, raw, cls in stack if _module_path(raw) == ""), None)
        aten = bool(targets) and all(_is_op_overload(t) for t in targets)
        program = ExportProgram(model=root, level="aten" if aten else "python")
        self._leaves(program)
        for node, target, stack in zip(nodes, targets, stacks):
            program.ops.append(self._op(node, target, stack))
        self._outputs(program)
        return program

    def _leaves(self, program: ExportProgram) -> None:
        inputs, specs = _list(self.graph["inputs"]), _list(self.signature["input_specs"])
        user_paths = iter(self._input_paths())
        for i, spec in enumerate(specs):
            kind, fields = _one(spec)
            fields = _dict(fields)
            value_kind, value = _one(inputs[i]) if i < len(inputs) else ("as_none", None)
            name = _value_name(value_kind, value) or _str(_dict(fields.get("arg") or fields).get("name") or f"arg{i}")
            if kind in ("parameter", "buffer", "tensor_constant", "custom_obj"):
                label = {"parameter": "param", "buffer": "buffer"}.get(kind, "constant")
                path = _str(fields[{"parameter": "parameter_name", "buffer": "buffer_name",
                                    "tensor_constant": "tensor_constant_name", "custom_obj": "custom_obj_name"}[kind]])
            elif kind in ("user_input", "constant_input"):
                label, path = "input", next(user_paths, name)
            else:  # a token
                label, path = "constant", name
            outputs = [self._meta(name)] if value_kind == "as_tensor" else []
            program.leaves.append(ExportLeaf(name, label, path, outputs))

    def _op(self, node: dict[str, Any], target: str, stack: list[tuple[str, str, str]]) -> ExportOp:
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        for item in _list(node["inputs"]):
            item = _dict(item)
            value, name = self._argument(item["arg"]), _str(item.get("name", ""))
            if item.get("kind") == 2 and name and not keyword.iskeyword(name):
                kwargs[name] = value
            else:
                args.append(value)
        results, outputs = self._results(_list(node["outputs"]))
        metadata = _dict(node.get("metadata") or {})
        name = _str(node.get("name") or next(iter(results), ""))
        trace = metadata.get("stack_trace")
        return ExportOp(
            name=name, target=_target(target), args=args, kwargs=kwargs, results=results, outputs=outputs,
            stack=stack, stack_trace=trace if isinstance(trace, str) else None, inplace=_writes(target),
        )

    def _results(self, values: list[Any]) -> tuple[dict[str, int], list[TensorMeta]]:
        """Each value an op makes -> its output slot (tensors before it), and its tensors' metadata;
        as an ``ExportedProgram``'s ``getitem`` nodes pick them."""
        results: dict[str, int] = {}
        outputs: list[TensorMeta] = []
        if len(values) == 1 and _one(values[0])[0] == "as_tensors":  # one Tensor[] result
            values = [{"as_tensor": v} for v in _one(values[0])[1]]
        for value in values:
            kind, field = _one(value)
            if kind == "as_tensor":
                results[_str(_dict(field)["name"])] = len(outputs)
                outputs.append(self._meta(_str(field["name"])))
            elif kind in ("as_sym_int", "as_sym_float", "as_sym_bool") and "as_name" in _dict(field):
                results[_str(field["as_name"])] = len(outputs)
            elif kind == "as_tensors":  # a Tensor[] among several results: picked by its own index
                for j, item in enumerate(_list(field)):
                    results[_str(_dict(item)["name"])] = j
                    outputs.append(self._meta(_str(item["name"])))
        return results, outputs

    def _outputs(self, program: ExportProgram) -> None:
        specs = _list(self.signature["output_specs"])
        users = iter(self._spec_paths(self._call_spec("out_spec"), ["output"]))
        paths = []
        for i, spec in enumerate(specs):
            kind, fields = _one(spec)
            if kind == "user_output":
                paths.append(next(users, f"output[{i}]"))
            else:
                target = next((v for k, v in _dict(fields).items() if k.endswith("_name")), None)
                paths.append(f"mutated[{str(target)!r}]")
        returned = [_one(v) for v in _list(self.graph["outputs"])]
        returned = [(kind, value) for kind, value in returned if kind != "as_none"]  # None is no pytree leaf
        for i, (kind, value) in enumerate(returned):
            path = paths[i] if i < len(paths) else (f"output[{i}]" if len(returned) > 1 else "output")
            program.outputs.append((_value_name(kind, value), path))

    def _argument(self, argument: Any) -> Any:
        kind, value = _one(argument)
        if kind == "as_none":
            return None
        if kind in ("as_tensor", "as_custom_obj", "as_graph"):
            return Use(_str(_dict(value)["name"]))
        if kind in ("as_sym_int", "as_sym_float", "as_sym_bool"):
            return self._symbolic(value)
        if kind in ("as_int", "as_bool", "as_string", "as_operator"):
            return {"as_int": _int, "as_bool": _bool, "as_string": _str, "as_operator": _str}[kind](value)
        if kind == "as_float":
            return _float(value)
        if kind == "as_scalar_type":
            return self.dtypes[_int(value)]
        if kind == "as_memory_format":
            return self.memory_formats[_int(value)]
        if kind == "as_layout":
            return self.layouts[_int(value)]
        if kind == "as_device":
            return _device(_dict(value))
        if kind == "as_complex":
            return complex(_float(value["real"]), _float(value["imag"]))
        if kind in ("as_ints", "as_floats", "as_bools", "as_strings"):
            check = {"as_ints": _int, "as_floats": _float, "as_bools": _bool, "as_strings": _str}[kind]
            return [check(v) for v in _list(value)]
        if kind in ("as_int_lists", "as_float_lists"):
            check = _int if kind == "as_int_lists" else _float
            return [[check(v) for v in _list(row)] for row in _list(value)]
        if kind == "as_tensors":
            return [Use(_str(_dict(v)["name"])) for v in _list(value)]
        if kind == "as_nested_tensors":
            return [[Use(_str(_dict(v)["name"])) for v in _list(row)] for row in _list(value)]
        if kind in ("as_sym_ints", "as_sym_floats", "as_sym_bools"):
            return [self._symbolic(v) for v in _list(value)]
        if kind == "as_optional_tensors":
            return [self._argument(v) for v in _list(value)]
        if kind == "as_optional_tensor":
            return self._argument(value)
        if kind == "as_string_to_argument":
            return {_str(k): self._argument(v) for k, v in _dict(value).items()}
        raise ValueError(f"an argument of unknown kind {kind!r}")

    def _symbolic(self, value: Any) -> Any:
        kind, field = _one(value)
        if kind == "as_name":
            return Use(_str(field))
        return {"as_int": _int, "as_float": _float, "as_bool": _bool}[kind](field)

    def _meta(self, name: str) -> TensorMeta:
        meta = _dict(self.tensors[name])
        shape = []
        for size in _list(meta["sizes"]):
            kind, value = _one(size)
            if kind == "as_int":  # a size no tensor has (negative, 2**63 or more) reads as unknown
                shape.append(_int(value) if is_count(value) else UNKNOWN_SIZE)
            else:
                shape.append(size_text(_str(_dict(value)["expr_str"])))
        dtype = str(self.dtypes[_int(meta["dtype"])]).removeprefix("torch.")
        return TensorMeta(tuple(shape), dtype, str(_device(_dict(meta["device"]))))

    def _call_spec(self, which: str) -> str | None:
        for call in self.calls:
            call = _dict(call)
            if call.get("fqn") == "" and isinstance(call.get("signature"), dict):
                spec = call["signature"].get(which)
                return spec if isinstance(spec, str) else None
        return None

    def _input_paths(self) -> list[str]:
        text = self._call_spec("in_spec")
        if text is None:
            return []
        children = _dict(_spec_root(text)).get("children_spec") or []
        paths: list[str] = []
        for prefix, child in zip(("args", "kwargs"), _list(children)):
            paths += _leaf_paths(child, prefix, self.namedtuples, 0)
        return paths

    def _spec_paths(self, text: str | None, prefix: list[str]) -> list[str]:
        return [] if text is None else _leaf_paths(_spec_root(text), prefix[0], self.namedtuples, 0)


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"expected a bool, got {type(value).__name__}")
    return value


def _device(value: dict[str, Any]) -> Any:
    import torch

    index = value.get("index")
    return torch.device(_str(value["type"]), _int(index)) if index is not None else torch.device(_str(value["type"]))


def _value_name(kind: str, value: Any) -> str | None:
    if kind in ("as_tensor", "as_custom_obj"):
        return _str(_dict(value)["name"])
    if kind in ("as_sym_int", "as_sym_float", "as_sym_bool"):
        field_kind, field = _one(value)
        return _str(field) if field_kind == "as_name" else None
    return None


def _stack(text: Any) -> list[tuple[str, str, str]]:
    """``nn_module_stack`` as torch writes it: ``key,path,class`` items joined by ``;``, where a
    path may hold commas inside brackets."""
    if not text:
        return []
    stack = []
    for item in _str(text).split(";"):
        parts, start, depth = [], 0, 0
        for end, c in enumerate(item):
            if c in "[(":
                depth += 1
            elif c in ")]":
                depth -= 1
            elif c == "," and depth == 0:
                parts.append(item[start:end])
                start = end + 1
        parts.append(item[start:])
        if len(parts) != 3:
            raise ValueError(f"an nn_module_stack item of {len(parts)} fields: {item[:80]!r}")
        stack.append((parts[0], parts[1], parts[2]))
    return stack


_OP_OVERLOAD = re.compile(r"torch\.ops\.(?!higher_order\.)[A-Za-z_]\w*\.\w+\.\w+")


def _is_op_overload(target: str) -> bool:
    return bool(_OP_OVERLOAD.fullmatch(target))


def _target(target: str) -> str:
    """The name an ``ExportedProgram``'s node target has in memory: ``aten.linear.default``."""
    if _is_op_overload(target):
        return target.removeprefix("torch.ops.")
    if target.startswith("_operator."):
        return target[1:]
    return target


@functools.lru_cache(maxsize=4096)
def _writes(target: str) -> bool:
    """Whether the op's registered schema writes one of its arguments in place (``add_``): looked
    up by name among the ops this process registered, never loaded."""
    if not _is_op_overload(target):
        return False
    import torch

    namespace, op, overload = target.removeprefix("torch.ops.").split(".")
    try:
        schema = torch._C._get_schema(f"{namespace}::{op}", "" if overload == "default" else overload)
    except RuntimeError:  # an op this process has not registered: its schema is unknown
        return False
    return any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)


_MAX_SPEC_DEPTH = 64


def _spec_root(text: str) -> Any:
    """A pytree spec as ``treespec_dumps`` writes it: ``[protocol, node]``."""
    loaded = json.loads(text)
    if not (isinstance(loaded, list) and len(loaded) == 2):
        raise ValueError("a pytree spec that is not [protocol, node]")
    return loaded[1]


def _leaf_paths(node: Any, prefix: str, namedtuples: Any, depth: int) -> list[str]:
    """``prefix[0]``, ``prefix['logits']``, ``prefix.field``... for each leaf of a serialized pytree spec,
    as ``pytree.keystr`` writes the keys of each container kind."""
    if depth > _MAX_SPEC_DEPTH:
        raise ValueError(f"a pytree spec nested over {_MAX_SPEC_DEPTH} deep")
    node = _dict(node)
    kind = node.get("type")
    if kind is None:
        return [prefix]
    children = _list(node.get("children_spec") or [])
    context = json.loads(node["context"]) if isinstance(node.get("context"), str) else None
    if isinstance(context, dict) and "dict_context" in context:  # a defaultdict
        context = context["dict_context"]
    if kind == "collections.namedtuple" and isinstance(namedtuples, dict):
        fields = _dict(namedtuples.get(context) or {}).get("field_names") or []
        keys = [f".{f}" for f in fields] if len(fields) == len(children) else [f"[{i}]" for i in range(len(children))]
    elif kind not in ("builtins.tuple", "builtins.list") and isinstance(context, list) and len(context) == len(children):
        keys = [f"[{k!r}]" for k in context]
    else:
        keys = [f"[{i}]" for i in range(len(children))]
    paths: list[str] = []
    for key, child in zip(keys, children):
        paths += _leaf_paths(child, prefix + key, namedtuples, depth + 1)
    return paths
