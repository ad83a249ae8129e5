"""Finding tensors inside Python values, and turning the rest into JSON constants."""

from __future__ import annotations

import dataclasses
import math
import types
from collections.abc import Iterator
from typing import Any

import torch

from . import _distributed

Tensor = torch.Tensor
_PLAIN = (Tensor, torch.nn.Parameter)
_MAX_REPR = 120
_MAX_ITEMS = 64


def iter_tensors(value: Any, path: str, attributes: bool = False) -> Iterator[tuple[str, Tensor]]:
    """(path, tensor) for each tensor in nested tuples, lists, dicts, dataclasses and ModelOutputs;
    with ``attributes``, also in the attributes of plain objects (a transformers ``DynamicCache``
    passed in: ``.layers[0].keys``), as for the model's inputs. What a model returns inside such
    an object (the cache it hands back) is not listed: its tensors are where the ops made them."""
    return _tensors_in(value, path, 0, set() if attributes else None)


def _tensors_in(value: Any, path: str, depth: int, seen: set[int] | None) -> Iterator[tuple[str, Tensor]]:
    if isinstance(value, Tensor):
        yield path, value
    elif depth > 32 or value is None or isinstance(value, _SCALARS):
        return
    elif isinstance(value, dict):  # includes transformers' ModelOutput (an OrderedDict)
        for key, item in value.items():
            yield from _tensors_in(item, f"{path}[{key!r}]", depth + 1, seen)
    elif isinstance(value, tuple) and hasattr(value, "_fields"):  # namedtuple
        for key, item in zip(value._fields, value):
            yield from _tensors_in(item, f"{path}.{key}", depth + 1, seen)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _tensors_in(item, f"{path}[{i}]", depth + 1, seen)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield from _tensors_in(getattr(value, f.name, None), f"{path}.{f.name}", depth + 1, seen)
    elif seen is not None and _holds_attributes(value) and id(value) not in seen:
        seen.add(id(value))  # objects may refer to each other in cycles
        try:
            attributes = list(vars(value).items())
        except Exception:  # a hostile __dict__: its values stay out of sight, as before
            return
        for key, item in attributes:
            if isinstance(key, str) and not key.startswith("_"):
                yield from _tensors_in(item, f"{path}.{key}", depth + 1, seen)


_SCALARS = (bool, int, float, complex, str, bytes, torch.dtype, torch.device, torch.Size)


def _holds_attributes(value: Any) -> bool:
    """A plain Python object whose attributes may hold tensors: not a module (its parameters
    are the model's, not values passed around), a class, a function or a Python module. An
    object whose ``__getattr__`` raises what it likes (a proxy, a lazy config) holds none we read."""
    try:
        return (
            hasattr(value, "__dict__")
            and not isinstance(value, (torch.nn.Module, type, types.FunctionType, types.MethodType, types.ModuleType))
            and not callable(getattr(value, "__torch_function__", None))  # a tensor-like subclass wrapper
        )
    except Exception:
        return False


def tensors_flat(value: Any, out: list[Tensor]) -> None:
    """Append the tensors in a torch call's arguments (tuples, lists and dicts only) to ``out``, in
    order, as torch's pytree finds them; a container inside itself is not entered again, and any
    depth is walked (a loop, not recursion)."""
    if isinstance(value, Tensor):
        out.append(value)
        return
    if not isinstance(value, (list, tuple, dict)):
        return
    stack = [iter(value.values() if isinstance(value, dict) else value)]
    inside = [id(value)]  # the containers being walked, outermost first
    while stack:
        for item in stack[-1]:
            if isinstance(item, Tensor):
                out.append(item)
            elif isinstance(item, (list, tuple, dict)) and id(item) not in inside:
                stack.append(iter(item.values() if isinstance(item, dict) else item))
                inside.append(id(item))
                break
        else:
            stack.pop()
            inside.pop()


class TensorArg(int):
    """In an argument template: the tensor at this position of the op's inputs."""

    __slots__ = ()


TENSOR_ARGS = [TensorArg(i) for i in range(64)]  # shared: most calls read a few tensors


class ShapeArg(int):
    """In an argument template: the tensor at this position of the op's shape inputs."""

    __slots__ = ()


def split_tensors(value: Any, tensors: list[Tensor]) -> Any:
    """A template of a torch call argument: each tensor is appended to ``tensors`` and
    replaced by its ``TensorArg`` position, so the record keeps no tensor alive."""
    if isinstance(value, Tensor):
        tensors.append(value)
        i = len(tensors) - 1
        return TENSOR_ARGS[i] if i < 64 else TensorArg(i)
    kind = type(value)
    if kind is list or kind is tuple:
        return [split_tensors(v, tensors) for v in value]
    if kind is dict:
        return {k: split_tensors(v, tensors) for k, v in value.items()}
    return value


def encode_arguments(values: list[Any]) -> list[Any]:
    """:func:`encode` of a call's positional template, with its usual items (tensors, ints,
    bools, None, finite floats) handled inline: this runs once per recorded op."""
    out = []
    for v in values:
        kind = type(v)
        if kind is TensorArg:
            out.append({"tensor": int(v)})
        elif kind is int or kind is bool or v is None or (kind is float and math.isfinite(v)):
            out.append(v)
        elif kind is list and len(v) <= _MAX_ITEMS and all(type(x) is int for x in v):
            out.append(v[:])  # sizes, dims, paddings: already JSON
        else:
            out.append(encode(v, 1))
    return out


def encode(value: Any, depth: int = 0) -> Any:
    """The JSON form of an argument template; a ``TensorArg`` becomes ``{"tensor": i}``."""
    if isinstance(value, TensorArg):
        return {"tensor": int(value)}
    if isinstance(value, ShapeArg):
        return {"shape_of": int(value)}
    if value is None or isinstance(value, (bool, int, str)):
        return value if not isinstance(value, str) or len(value) <= _MAX_REPR else value[:_MAX_REPR] + "…"
    if isinstance(value, float):
        return value if math.isfinite(value) else {"float": repr(value)}
    if isinstance(value, Tensor):
        return {"repr": "tensor"}
    if depth > 4:
        return {"repr": "…"}
    if isinstance(value, (list, tuple)):
        items = [encode(v, depth + 1) for v in value[:_MAX_ITEMS]]
        return items + ([{"repr": f"… {len(value) - _MAX_ITEMS} more"}] if len(value) > _MAX_ITEMS else [])
    if isinstance(value, slice):
        return {"slice": [encode(value.start), encode(value.stop), encode(value.step)]}
    if value is Ellipsis:
        return {"ellipsis": True}
    if isinstance(value, torch.dtype):
        return {"dtype": str(value).removeprefix("torch.")}
    if isinstance(value, torch.device):
        return {"device": str(value)}
    if isinstance(value, torch.Size):
        return list(value)
    if isinstance(value, dict):
        return {"dict": {str(k): encode(v, depth + 1) for k, v in list(value.items())[:_MAX_ITEMS]}}
    text = repr(value)
    return {"repr": text if len(text) <= _MAX_REPR else text[:_MAX_REPR] + "…"}


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def shape_of(t: Tensor) -> tuple[Any, ...]:
    return tuple(s if isinstance(s, int) else str(s) for s in t.shape)


def tensor_table(named: list[tuple[str, Tensor]]) -> list[dict[str, Any]]:
    """Every parameter (or buffer) once, with the other names it is shared under."""
    by_id: dict[int, dict[str, Any]] = {}
    for path, t in named:
        entry = by_id.get(id(t))
        if entry is None:
            by_id[id(t)] = {
                "path": path,
                "shape": list(shape_of(t)),
                "dtype": dtype_name(t.dtype),
                "requires_grad": bool(t.requires_grad),
                "shared_with": [],
            }
            placed = _distributed.dist_meta(t) if type(t) not in _PLAIN else None
            if placed is not None:  # a DTensor parameter: this rank holds its local shard
                by_id[id(t)].update(placements=list(placed[0]), local_shape=list(placed[2]))
        else:
            entry["shared_with"].append(path)
    return list(by_id.values())
