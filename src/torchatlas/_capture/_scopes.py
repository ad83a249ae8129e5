"""Module calls: the scope stack of one capture, fed by every ``nn.Module`` call.

The model is walked once for module paths and for every parameter and buffer
under each of its names. A ``torch.compile`` wrapper of a submodule is
transparent: its eager module takes the wrapper's path and its call is the
scope (``_orig_mod`` never shows). Modules the model does not register (plain
lists, made inside forward) get one made-up path per object. Each level of the
capture listens to scope entries and exits to record inputs and outputs.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from typing import Any, Protocol

import torch

from . import _distributed, _source
from ._dataflow import storage_key
from ._records import ScopeRecord

_COMPILED_WRAPPER = "OptimizedModule"
# torch's own frames between a line that calls a module and the call (``Module.__call__``).
_MODULE_CALL_CODES = frozenset(
    f.__code__ for f in (getattr(torch.nn.Module, name, None) for name in ("_wrapped_call_impl", "_call_impl"))
    if hasattr(f, "__code__")
)
_ORIG_MOD = "._orig_mod"


class ScopeListener(Protocol):
    def scope_entered(self, index: int, module: Any, args: tuple, kwargs: dict) -> None: ...

    def scope_exited(self, index: int, module: Any, output: Any) -> None: ...


def is_compiled_wrapper(module: Any) -> bool:
    return type(module).__name__ == _COMPILED_WRAPPER and isinstance(getattr(module, "_orig_mod", None), torch.nn.Module)


def _eager_path(name: str) -> str:
    """``blocks.0._orig_mod.fc`` -> ``blocks.0.fc``: the path without compile wrappers."""
    return name.replace(_ORIG_MOD, "")


class ModelIndex:
    """Module paths, and every parameter and buffer of the model under each name it has."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.paths: dict[int, str] = {}
        self.named: dict[int, tuple[str, str]] = {}  # id(param or buffer) -> (kind, path)
        self.shards: dict[int | None, tuple[str, str]] = {}
        """Storage of a DTensor parameter's local shard -> (kind, path): FSDP2 reads the shard's
        storage through tensors of its own."""
        self.parameters: list[tuple[str, torch.Tensor]] = []
        self.buffers: list[tuple[str, torch.Tensor]] = []
        self.compiled_calls: list[torch.nn.Module] = []
        """Modules compiled in place (``module.compile()``)."""
        if isinstance(model, torch.nn.Module):
            self.walk()

    def walk(self) -> None:
        """One walk of the model (in the order of ``named_parameters(remove_duplicate=False)``)."""
        self.parameters, self.buffers, self.compiled_calls = [], [], []
        for raw_name, module in _named_modules(self.model):
            if getattr(module, "_compiled_call_impl", None) is not None:
                self.compiled_calls.append(module)
            name = _eager_path(raw_name)
            self.paths.setdefault(id(module), name)
            prefix = f"{name}." if name else ""
            for table, kind, out in ((module._parameters, "param", self.parameters), (module._buffers, "buffer", self.buffers)):
                for attr, t in table.items():
                    if t is not None:
                        out.append((prefix + attr, t))
                        self.named.setdefault(id(t), (kind, prefix + attr))
                        inner = _distributed.inner_tensor(t)
                        if inner is not None:
                            self.shards.setdefault(storage_key(inner), (kind, prefix + attr))


_MAX_NESTING = 10_000


def _named_modules(model: torch.nn.Module) -> Iterator[tuple[str, torch.nn.Module]]:
    """``model.named_modules(remove_duplicate=False)``, without a generator per nesting level."""
    stack = [("", model, 0)]
    while stack:
        name, module, depth = stack.pop()
        if depth > _MAX_NESTING:
            raise ValueError(f"torchatlas: modules nest deeper than {_MAX_NESTING} levels at '{name[:200]}'; does a module contain itself?")
        yield name, module
        children = module._modules
        if children:
            prefix = f"{name}." if name else ""
            stack.extend((prefix + key, child, depth + 1) for key, child in reversed(children.items()) if child is not None)


class ScopeTracker:
    """The stack of module calls running now, and a record of every call."""

    def __init__(self, index: ModelIndex) -> None:
        self.index = index
        self.scopes: list[ScopeRecord] = []
        self.listeners: list[ScopeListener] = []
        self.stack: list[tuple[int, Any]] = []  # (scope index, module)
        self._calls: dict[str, int] = {}
        self._unregistered: dict[int, tuple[Any, str]] = {}
        self._unregistered_count: dict[str, int] = {}
        self._class_names: dict[type, str] = {}
        self.call_sites: dict[int, tuple[int, Any, int]] = {}
        """Scope index -> (id of the frame that made the call, its code, the call's instruction)."""
        self.frames = _source.FrameSerials()
        """The run of a user function each record's line ran in (``NodeRecord.frame``)."""

    # -- module calls ---------------------------------------------------------------

    def call_started(self, module: Any, args: tuple, kwargs: dict, frame: Any) -> None:
        """A module call begins (``_patches`` calls this from ``Module.__call__``)."""
        cls = type(module)
        name = self._class_names.get(cls)
        if name is None:
            name = self._class_names[cls] = f"{cls.__module__}.{cls.__qualname__}"
        path = self.index.paths.get(id(module))
        unregistered = False
        if path is None:
            path = self.path_of(module)
            unregistered = id(module) not in self.index.paths  # kept in a plain list, made in forward
        self._push(module, path, name, frame, args, kwargs)
        if unregistered:
            self.scopes[-1].extra = {"unregistered": True}

    def call_ended(self, module: Any, output: Any) -> None:
        """A module call returned ``output`` (None when it raised)."""
        # Our tensor queries must reach no torch-function override: not the recording mode, not a
        # user's own mode, not a tensor subclass.
        with torch._C.DisableTorchFunction():
            self.exit(module, output)

    def close(self) -> None:
        self.stack.clear()
        self.call_sites.clear()
        self.frames.close()

    def running(self) -> list[int]:
        """The scope indices of the module calls running now."""
        return [index for index, _ in self.stack]

    # -- the stack -----------------------------------------------------------------

    @property
    def current(self) -> int:
        return self.stack[-1][0] if self.stack else 0

    @property
    def running_module(self) -> Any:
        return self.stack[-1][1] if self.stack else None

    def open_root(self, cls: str, called: Any, args: tuple, kwargs: dict) -> None:
        """For a plain callable (no module call to hook), open the root scope by hand; the
        listeners are told what was called (its parameters name the inputs)."""
        self._push(None, "", cls, None, args, kwargs, called)

    def _push(self, module: Any, path: str, cls: str, frame: Any, args: tuple, kwargs: dict, called: Any = None) -> None:
        site = frame
        while site is not None and site.f_code in _MODULE_CALL_CODES:
            site = site.f_back
        user = _source.user_frame(site)  # torch's call frames skipped above are never the user's
        call = self._calls.get(path, 0)
        self._calls[path] = call + 1
        stack = self.stack
        scopes = self.scopes
        index = len(scopes)
        scopes.append(
            ScopeRecord(
                stack[-1][0] if stack else None, path, cls, call,
                user.f_code if user else None, user.f_lineno if user else 0, self.frames(user),
            )
        )
        stack.append((index, module))
        if site is not None:
            self.call_sites[index] = (id(site), site.f_code, site.f_lasti)
        for listener in self.listeners:
            listener.scope_entered(index, module if called is None else called, args, kwargs)

    def exit(self, module: Any, output: Any) -> None:
        while self.stack:  # unwinds scopes left open by an exception
            index, top = self.stack.pop()
            if top is module:
                break
        else:
            return
        for listener in self.listeners:
            listener.scope_exited(index, module, output)

    # -- names -----------------------------------------------------------------------

    def path_of(self, module: Any) -> str:
        """The qualified path of a module of this model (as in ``named_modules()``)."""
        path = self.index.paths.get(id(module))
        if path is None and isinstance(self.index.model, torch.nn.Module):
            self.index.walk()  # forward may have attached new submodules
            path = self.index.paths.get(id(module))
        return path if path is not None else self._unregistered_path(module)

    def _unregistered_path(self, module: Any) -> str:
        """``parent.<Linear>``, ``parent.<Linear:1>``... for modules the model does not register:
        one path per module object, so calls count right."""
        known = self._unregistered.get(id(module))
        if known is not None and known[0]() is module:
            return known[1]
        parent = self.scopes[self.stack[-1][0]].path if self.stack else ""
        base = f"{parent}.<{type(module).__name__}" if parent else f"<{type(module).__name__}"
        number = self._unregistered_count.get(base, 0)
        self._unregistered_count[base] = number + 1
        path = f"{base}:{number}>" if number else f"{base}>"
        self._unregistered[id(module)] = (weakref.ref(module), path)
        return path

    def classify(self, t: torch.Tensor) -> tuple[str, str | None]:
        """(leaf kind, path) of a tensor nobody produced: a parameter or buffer of the model, an
        attribute of the running module the model does not register, else a constant."""
        named = self.index.named.get(id(t))
        if named is not None:
            return named
        if self.index.shards:
            named = self.index.shards.get(storage_key(t))
            if named is not None:
                return named
        kind = "param" if isinstance(t, torch.nn.Parameter) else "constant"
        module = self.running_module
        if module is None:
            return kind, None
        scope_path = self.scopes[self.stack[-1][0]].path
        for table, table_kind in (("_parameters", "param"), ("_buffers", "buffer"), ("__dict__", kind)):
            for attr, value in (getattr(module, table, None) or {}).items():
                if value is t:
                    return table_kind, f"{scope_path}.{attr}" if scope_path else attr
        return kind, None
