"""Model specs for the command line: find a model, build it, and build inputs for it.

A spec is ``path/to/file.py:Name``, ``package.module:Name`` (a class is instantiated
with no arguments, a function is called; modules are found in the current folder as with
``python -m``), or ``hf:<model_type>[/<task>]`` (a transformers architecture built from its
config with random weights, see ``_hf.py``). torch is imported only when a model is loaded,
so the command line starts fast. Failures raise
:class:`SpecError` when the command line names something that is not there, and
:class:`ModelError` when the model is there but fails to import, build or run.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import inspect
import json
import os
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torchatlas._text import error_text

from ._spec import HF_PREFIX, LoadedModel, ModelError, SpecError, Status, no_status

if TYPE_CHECKING:
    import torch

    from torchatlas import Graph

_DTYPES = "float16 bfloat16 float32 float64 half float double int8 uint8 int16 int32 int64 long int bool complex64".split()


@dataclass(frozen=True)
class InputSpec:
    """One ``--input`` value: a shape and a dtype (``None``: float32)."""

    shape: tuple[int, ...]
    dtype: torch.dtype | None = None


@dataclass
class Inputs:
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


# -- parsing command-line values ------------------------------------------------


def parse_shape(text: str, what: str) -> tuple[int, ...]:
    """``"1,3,32,32"`` (or ``1x3x32x32``) as a tuple of non-negative ints."""
    parts = [p.strip() for p in re.split(r"[,x×]", text.strip())]
    try:
        shape = tuple(int(p) for p in parts)
    except ValueError:
        raise SpecError(f"{what} {text!r} is not a shape; expected comma-separated integers like 1,3,32,32") from None
    if any(d < 0 for d in shape):
        raise SpecError(f"{what} {text!r} has a negative size")
    if any(d >= 2**63 for d in shape):
        raise SpecError(f"{what} {text!r} has a size too large for a tensor")
    return shape


def parse_input(text: str) -> InputSpec:
    """``--input 1,3,32,32`` or ``--input 1,128:int64``."""
    shape_text, _, dtype_text = text.partition(":")
    shape = parse_shape(shape_text, "--input")
    if not dtype_text:
        return InputSpec(shape)
    name = dtype_text.strip().removeprefix("torch.")
    if name not in _DTYPES:
        raise SpecError(f"--input {text!r}: unknown dtype {dtype_text!r}; expected one of {', '.join(sorted(_DTYPES))}")
    import torch

    return InputSpec(shape, getattr(torch, name))


def parse_tokens(text: str, option: str = "--tokens") -> tuple[int, int]:
    """``--tokens 1,128``: batch size and sequence length."""
    shape = parse_shape(text, option)
    if len(shape) != 2:
        raise SpecError(f"{option} {text!r} must be BATCH,SEQ_LEN, like 1,128")
    return shape[0], shape[1]


def parse_device(text: str) -> str:
    """``--device``: anything ``torch.device`` accepts (``cpu``, ``cuda:1``, ``meta``...)."""
    import torch

    try:
        return str(torch.device(text))
    except (RuntimeError, ValueError):
        raise SpecError(f"--device {text!r} is not a device; expected e.g. cpu, cuda, cuda:1, mps or meta") from None


def parse_value(text: str) -> Any:
    """A ``--set`` value: int, float, true/false, JSON (lists, objects, null), else the string."""
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for convert in (int, float, json.loads):
        try:
            return convert(text)
        except ValueError:
            continue
    return text


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """``["num_hidden_layers=2", "hidden_size=64"]`` as a dict of parsed values."""
    overrides: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SpecError(f"--set {item!r} must be KEY=VALUE, like num_hidden_layers=2")
        try:
            overrides[key.strip()] = parse_value(value.strip())
        except RecursionError:  # json.loads of lists nested thousands deep
            raise SpecError(f"--set {key.strip()[:40]!r}: its JSON value is nested too deeply") from None
    return overrides


# -- finding and building models ------------------------------------------------


def load_model(
    spec: str,
    *,
    overrides: dict[str, Any] | None = None,
    task: str | None = None,
    device: str | None = None,
    has_inputs: bool | None = None,
    status: Status = no_status,
    warn: Callable[[str], None] | None = None,
) -> LoadedModel:
    """Find and build the model a spec names, on ``device`` (``"meta"``: no memory).

    ``has_inputs=False`` (no ``--input``/``--tokens``) is an error before an ``hf:`` model
    that reads token ids is built; ``status`` shows the build, ``warn`` says when it would
    need more memory than the machine has."""
    overrides = overrides or {}
    if spec.startswith(HF_PREFIX):
        from . import _hf

        return _hf.load(spec, overrides, task, device, has_inputs=has_inputs, status=status, warn=warn)
    if overrides or task:
        raise SpecError("--set and --task apply to hf: specs only")
    target, module = _resolve_target(spec)
    model = _construct(target, spec)
    example = _example_provider(model, target, module)
    if device is not None:
        model = _to_device(model, device, spec)
    return LoadedModel(model, spec, example)


def _split_spec(spec: str) -> tuple[str, str]:
    """``location:name``; a colon inside a path (``C:\\models\\net.py``) is not the separator."""
    location, sep, name = spec.rpartition(":")
    if not sep or re.search(r"[\\/]|\.py$", name):
        return spec, ""
    return location, name


def _resolve_target(spec: str) -> tuple[Any, Any]:
    location, name = _split_spec(spec)
    if not location:
        raise SpecError(
            f"model spec {spec!r} names no file or module; expected path/to/file.py:Name or package.module:Name"
        )
    is_file = location.endswith(".py") or "/" in location or "\\" in location
    module = _import_file(location, spec) if is_file else _import_module(location, spec)
    if not name:
        return _only_model_class(module, spec), module
    target: Any = module
    for part in name.split("."):
        if not hasattr(target, part):
            raise SpecError(f"{location} has no {name!r}{_candidates_hint(module, name)} (spec {spec!r})")
        target = getattr(target, part)
    return target, module


_FILE_MODULES: dict[str, tuple[Path, int, int]] = {}
"""Module name -> (file, mtime, size) of each module this imported from a model file."""


def _import_file(location: str, spec: str) -> Any:
    """The model file as a module named after it (``pair.Net`` in both sides of ``diff pair.py:Net
    pair.py:Net2``, and of ``diff old/model.py:Net new/model.py:Net``): a file imported before and
    unchanged since is that module; another file of that name replaces the one this imported.
    A name an ordinary import holds (``json.py``) gets a private one."""
    path = Path(location)
    if not path.is_file():
        raise SpecError(f"model file not found: {location} (spec {spec!r})")
    stem = re.sub(r"\W", "_", path.stem)
    stat = path.stat()
    key = (path.resolve(), stat.st_mtime_ns, stat.st_size)
    if _FILE_MODULES.get(stem) == key and stem in sys.modules:
        return sys.modules[stem]
    ours = stem in _FILE_MODULES or stem not in sys.modules
    name = stem if stem.isidentifier() and ours else f"_torchatlas_model_{stem}_{len(sys.modules)}"
    module_spec = importlib.util.spec_from_file_location(name, path.resolve())
    if module_spec is None or module_spec.loader is None:
        raise SpecError(f"cannot import {location} as Python (spec {spec!r})")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    # The file's own folder is importable while it runs, as for `python file.py`.
    folder = str(path.resolve().parent)
    sys.path.insert(0, folder)
    try:
        module_spec.loader.exec_module(module)
    except Exception as e:
        del sys.modules[name]
        _FILE_MODULES.pop(name, None)
        raise ModelError(f"importing {location} failed: {error_text(e)}{user_location(e)}") from e
    finally:
        sys.path.remove(folder)
    _FILE_MODULES[name] = key
    return module


@contextmanager
def _current_folder_importable() -> Iterator[None]:
    """The current folder first on ``sys.path`` while a spec's module imports, as ``python -m`` has it
    (the ``torchatlas`` script's own ``sys.path[0]`` is its bin folder)."""
    here = os.getcwd()
    added = here not in sys.path and "" not in sys.path
    if added:
        sys.path.insert(0, here)
    try:
        yield
    finally:
        if added and here in sys.path:
            sys.path.remove(here)


def _import_module(location: str, spec: str) -> Any:
    try:
        with _current_folder_importable():
            return importlib.import_module(location)
    except ModuleNotFoundError as e:
        if e.name and (location == e.name or location.startswith(e.name + ".")):
            raise SpecError(f"no module named {e.name!r} (spec {spec!r})") from None
        raise ModelError(f"importing {location} failed: {error_text(e)}") from e
    except Exception as e:
        raise ModelError(f"importing {location} failed: {error_text(e)}{user_location(e)}") from e


def _module_classes(module: Any) -> list[str]:
    import torch

    return sorted(
        n
        for n, v in vars(module).items()
        if inspect.isclass(v) and issubclass(v, torch.nn.Module) and v.__module__ == module.__name__
    )


def _only_model_class(module: Any, spec: str) -> Any:
    classes = _module_classes(module)
    if len(classes) == 1:
        return getattr(module, classes[0])
    found = f"classes here: {', '.join(classes)}" if classes else "it defines no nn.Module class"
    raise SpecError(f"model spec {spec!r} needs a name after ':' ({found})")


def _candidates_hint(module: Any, name: str) -> str:
    names = [n for n in vars(module) if not n.startswith("_")]
    close = difflib.get_close_matches(name, names, n=1)
    if close:
        return f"; did you mean {close[0]!r}?"
    classes = _module_classes(module)
    return f"; model classes here: {', '.join(classes)}" if classes else ""


def _construct(target: Any, spec: str) -> Any:
    import torch

    if isinstance(target, torch.nn.Module):
        return target
    if not callable(target):
        raise SpecError(f"{spec!r} is a {type(target).__name__}, not a model class, factory or module instance")
    try:
        model = target()
    except Exception as e:
        raise ModelError(f"building {spec} failed: {error_text(e)}{user_location(e)}") from e
    if not callable(model):
        raise ModelError(f"{spec}() returned a {type(model).__name__}, which cannot be called as a model")
    return model


def _example_provider(model: Any, target: Any, module: Any) -> Callable[[], Any] | None:
    for owner in (model, target, module):
        provider = getattr(owner, "example_input", None)
        if callable(provider):
            return provider
    return None


def _to_device(model: Any, device: str, spec: str) -> Any:
    import torch

    if not isinstance(model, torch.nn.Module):
        return model
    try:
        return model.to(device)
    except Exception as e:
        raise ModelError(f"moving {spec} to device {device!r} failed: {error_text(e)}") from e


# -- inputs -----------------------------------------------------------------------


def vocab_size(model: Any) -> int | None:
    """``config.vocab_size``, or its text part's (``text_config``: CLIP, LLaVA) for a multi-modal model."""
    config = getattr(model, "config", None)
    vocab = getattr(config, "vocab_size", None)
    return vocab if vocab is not None else getattr(getattr(config, "text_config", None), "vocab_size", None)


def build_inputs(
    loaded: LoadedModel,
    inputs: list[InputSpec],
    tokens: tuple[int, int] | None,
    device: str | None = None,
    decoder_tokens: tuple[int, int] | None = None,
) -> Inputs:
    """Random tensors for the ``--input`` shapes and ``--tokens``, or the spec's example input.

    ``hf:`` models also get what their forward needs besides: decoder token ids, audio
    features or pixels sized from the config (``_hf.model_inputs``)."""
    import torch

    import torchatlas

    target = torch.device(device) if device else torchatlas.model_device(loaded.model)
    vocab = vocab_size(loaded.model)
    if tokens is not None and vocab is None:
        raise SpecError(f"--tokens needs a model with config.vocab_size; {loaded.spec} has none: use --input B,S:int64")
    if tokens is not None and decoder_tokens is not None and tokens[0] != decoder_tokens[0]:
        raise SpecError(
            f"--tokens and --decoder-tokens must have one batch size, not {tokens[0]} and {decoder_tokens[0]}"
        )

    def allocate(option: str, shape: tuple[int, ...], dtype: torch.dtype, high: int) -> torch.Tensor:
        try:
            return torchatlas.random_input(shape, dtype, target, high)
        except (RuntimeError, MemoryError, OverflowError, ValueError) as e:  # too big, or a size overflows
            shown = ",".join(map(str, shape))
            raise SpecError(f"{option} {shown} ({dtype}) cannot be allocated on {target}: {error_text(e)}") from None

    args = tuple(allocate("--input", i.shape, i.dtype or torch.float32, vocab or 2) for i in inputs)
    kwargs = {"input_ids": allocate("--tokens", tokens, torch.int64, vocab)} if tokens else {}
    if loaded.spec.startswith(HF_PREFIX):
        from . import _hf

        kwargs.update(_hf.model_inputs(loaded.model, args, tokens, decoder_tokens, target))
    elif decoder_tokens is not None:
        raise SpecError("--decoder-tokens applies to hf: encoder-decoder models only")
    if args or kwargs:
        return Inputs(args, kwargs)
    if loaded.example_input is None:
        raise SpecError(f"{loaded.spec} has no example_input(); give inputs with --input SHAPE or --tokens BATCH,SEQ")
    try:
        example = loaded.example_input()
    except Exception as e:
        raise ModelError(f"example_input() of {loaded.spec} failed: {error_text(e)}{user_location(e)}") from e
    return _on_device(_as_inputs(example), target)


def user_location(exc: BaseException) -> str:
    """`` (file.py:12)``: where in user code ``exc`` was raised, or ``""``."""
    import torchatlas

    return torchatlas.user_location(exc)


def _as_inputs(example: Any) -> Inputs:
    if isinstance(example, dict):
        return Inputs((), dict(example))
    if isinstance(example, (tuple, list)):
        return Inputs(tuple(example))
    return Inputs((example,))


def _on_device(inputs: Inputs, device: torch.device) -> Inputs:
    import torch

    def move(v: Any) -> Any:
        return v.to(device) if isinstance(v, torch.Tensor) and v.device != device else v

    return Inputs(tuple(move(a) for a in inputs.args), {k: move(v) for k, v in inputs.kwargs.items()})


def describe_inputs(inputs: Inputs) -> str:
    """``args[0] float32[1,3,32,32], kwargs['input_ids'] int64[1,16]``, for error messages."""
    named = [(f"args[{i}]", v) for i, v in enumerate(inputs.args)]
    named += [(f"kwargs[{k!r}]", v) for k, v in inputs.kwargs.items()]
    import torch

    parts = []
    for name, v in named:
        if isinstance(v, torch.Tensor):
            dtype = str(v.dtype).removeprefix("torch.")
            parts.append(f"{name} {dtype}[{','.join(str(d) for d in v.shape)}]")
        else:
            parts.append(f"{name} {type(v).__name__}")
    return ", ".join(parts) or "no inputs"


def check_signature(model: Any, inputs: Inputs, spec: str) -> None:
    """Fail early, naming the inputs, when the model's forward cannot take them at all."""
    forward = getattr(model, "forward", model)
    try:
        signature = inspect.signature(forward)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(*inputs.args, **inputs.kwargs)
    except TypeError as e:
        raise ModelError(f"{spec} cannot take {describe_inputs(inputs)}: {e} (forward{signature})") from None


# -- saved graphs -----------------------------------------------------------------

SAVED_SUFFIXES = (".json", ".pt2")


def is_saved_graph(spec: str) -> bool:
    return spec.lower().endswith(SAVED_SUFFIXES)


def open_saved(spec: str, *, trust_pickle: bool = False) -> Graph:
    """A graph saved by ``Graph.save`` (``.json``) or a ``torch.export`` program (``.pt2``).

    A ``.pt2`` is read as data; ``trust_pickle`` hands it to ``torch.export.load`` (runs its code)."""
    import torchatlas

    path = Path(spec)
    if not path.is_file():
        raise SpecError(f"file not found: {spec}")
    if path.suffix.lower() == ".pt2":
        return _open_exported(path, trust_pickle)
    try:
        return torchatlas.load(path)
    except torchatlas.GraphFormatError as e:
        raise SpecError(str(e)) from e


def _open_exported(path: Path, trust_pickle: bool) -> Graph:
    import torchatlas

    try:
        return torchatlas.from_export(path, trust_pickle=trust_pickle)
    except torchatlas.UnsafeArchiveError as e:
        raise SpecError(str(e)) from None
    except Exception as e:
        raise SpecError(f"{path}: not a torch.export program: {error_text(e)}") from e


MAX_RANKS = 1 << 16
"""The most ranks --tp or --fsdp simulate (torch's process group takes no more than an int32)."""


def sharded_world(tp: int | None, fsdp: int | None, rank: int | None) -> AbstractContextManager[None]:
    """``--tp N`` / ``--fsdp M``: a fake process group of N (M, or N×M for both) ranks while the command traces."""
    if tp is None and fsdp is None:
        if rank is not None:
            raise SpecError("--rank picks a rank of --tp or --fsdp; add one of them")
        return nullcontext()
    world = 1
    for flag, size in (("--tp", tp), ("--fsdp", fsdp)):
        if size is not None:
            if not 1 <= size <= MAX_RANKS:
                raise SpecError(f"{flag} needs a number of ranks from 1 to {MAX_RANKS:,}, not {size}")
            world *= size
    from . import _parallel

    return _parallel.fake_world(world, rank or 0)


def shard(model: Any, tp: int | None, fsdp: int | None, spec: str, mesh: Any = None) -> None:
    """Shard ``model`` in the fake process group of :func:`sharded_world` (on ``mesh`` where given)."""
    if tp is None and fsdp is None:
        return
    from . import _parallel

    _parallel.shard(model, tp, fsdp, spec, mesh)


def expert_parallel(model: Any, mesh: Any, spec: str) -> None:
    """``--ep``: the experts of ``model`` sharded over ``mesh["ep"]`` (see ``_parallel.expert_parallel``)."""
    from . import _parallel

    _parallel.expert_parallel(model, mesh, spec)
