"""What crosses a module call's boundary: the model's inputs when the first call opens,
and what each call returns when it closes, for one capture level.

A call that returns a value it was given (eval Dropout, Identity, a user module
returning its argument) becomes one node in its own scope, so the call sits on the
data path as it ran; later readers that got its result read through it, and readers on
other paths read what it was given (``_passthrough.py``). So does a call that ran no op
and returned a value made before it that it was not given: its own parameter, or a tensor
an ``lru_cache`` kept from an earlier call or an earlier forward.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch

from ._dataflow import DataFlow, raw_meta
from ._passthrough import PassThroughs
from ._records import NodeRecord, Recording, Slot
from ._scopes import ScopeTracker
from ._values import TensorArg, iter_tensors, tensors_flat

Tensor = torch.Tensor
IDENTITY = "torchatlas.identity"
"""Target of the node a module call that ran no op and returned its input becomes."""

PassedBy = Callable[[int, Tensor], tuple[str, list[Any], dict[str, Any] | None] | None]
"""(scope, tensor) -> (target, args template, kwargs template) of the op that returned the tensor
unchanged inside that call, if the level saw one."""


# module class -> its forward's positional parameter names; weak, so a class (and the code and
# globals of its forward) is not kept alive by having been traced
_POSITIONAL: weakref.WeakKeyDictionary[type, tuple[str, ...]] = weakref.WeakKeyDictionary()


def parameter_names(cls: type, positional: int) -> list[str]:
    """The names ``cls.forward`` gives its first ``positional`` arguments (``args[2]`` past its
    parameters or where it has no signature)."""
    names = _POSITIONAL.get(cls)
    if names is None:
        # read from the code object: inspect.signature may free objects the user froze (gc.freeze)
        func = getattr(cls, "forward", None)
        for _ in range(100):
            if not hasattr(func, "__wrapped__"):
                break
            func = func.__wrapped__  # type: ignore[union-attr]
        code = getattr(func, "__code__", None)
        names = _POSITIONAL[cls] = tuple(code.co_varnames[1 : code.co_argcount]) if code is not None else ()
    return [names[i] if i < len(names) else f"args[{i}]" for i in range(positional)]


def function_parameter_names(called: Any, positional: int) -> list[str]:
    """The names a plain callable (a function, a lambda, a bound method, an object with
    ``__call__``) gives its first ``positional`` arguments, as ``parameter_names``."""
    skip = 0
    if hasattr(called, "__func__") or not hasattr(called, "__code__"):  # a method: its function, past self
        called, skip = getattr(called, "__func__", None) or type(called).__call__, 1  # it was called: its type has one
    code = getattr(called, "__code__", None)
    names = code.co_varnames[skip : code.co_argcount] if code is not None else ()
    return [names[i] if i < len(names) else f"args[{i}]" for i in range(positional)]


class Boundaries:
    """Scope listener of one level: records inputs, and each call's outputs when it returns."""

    def __init__(
        self,
        recording: Recording,
        flow: DataFlow,
        tracker: ScopeTracker,
        inputs: list[tuple[str, Tensor]],
        passed_by: PassedBy | None = None,
    ) -> None:
        self.recording = recording
        self.flow = flow
        self.tracker = tracker
        self._inputs = inputs
        self._passed_by = passed_by
        self._first: dict[int, int] = {}  # scope index -> its first record index
        # module class -> parameter_names: one look-up per call in a plain dict, for this trace only
        self._positional: dict[type, list[str]] = {}
        self.passes = flow.passes = PassThroughs(tracker.running, tracker.call_sites)

    def scope_entered(self, index: int, module: Any, args: tuple, kwargs: dict) -> None:
        if index == 0:
            seen: set[int] = set()
            with torch._C.DisableTorchFunction():  # the recording mode is on: t.shape must not reach it
                for path, t in self._inputs:
                    if id(t) not in seen:  # one tensor passed twice is one input, under its first path
                        seen.add(id(t))
                        self.flow.new_leaf("input", path, t)
            self._inputs = []
        given = self._given(module, args, kwargs)
        if isinstance(module, torch.nn.Module) and (module._forward_hooks or module._forward_pre_hooks):
            self._hooked_call_started(index, args, kwargs)
        if given:
            self.recording.scope_inputs[index] = list(given)
            self.recording.scope_input_names[index] = list(given.values())
            self._works_on(index, args, list(given))
        self._first[index] = len(self.recording.nodes)

    def _given(self, module: Any, args: tuple, kwargs: dict) -> dict[Slot, str]:
        """What the call was given, in argument order: each tensor's value as recorded so far, and
        the parameter it was passed as (``key_value_states``; inside a list, the list's)."""
        cls = type(module)
        positional = self._positional.get(cls)
        if not isinstance(module, torch.nn.Module):  # a plain callable, the root's: its own parameters
            positional = function_parameter_names(module, len(args))
        elif positional is None or len(positional) < len(args):
            positional = self._positional[cls] = parameter_names(cls, len(args))
        given: dict[Slot, str] = {}
        if not kwargs and len(args) == 1 and isinstance(args[0], Tensor):  # most calls: one tensor
            slot = self.flow.lookup(args[0])
            if slot is not None:
                given[slot] = positional[0]
            return given
        names = [*positional[: len(args)], *kwargs]
        for name, arg in zip(names, (*args, *kwargs.values()), strict=True):
            tensors: list[Tensor] = []
            tensors_flat(arg, tensors)
            for t in tensors:
                slot = self.flow.lookup(t)
                if slot is not None and slot not in given:
                    given[slot] = name
        return given

    def _hooked_call_started(self, index: int, args: tuple, kwargs: dict) -> None:
        """A call whose hooks may keep what it was given: each tensor given, with its value now."""
        tensors: list[Tensor] = []
        for arg in (*args, *kwargs.values()):
            tensors_flat(arg, tensors)
        for t in tensors:
            value = self.flow.lookup(t)
            if value is not None:
                self.passes.hooked.started(index, t, value, self.passes.latest)

    def _works_on(self, index: int, args: tuple, given: list[Slot]) -> None:
        """A call given a list first (a dense layer's ``features``) works on its last tensor:
        ``works_on``, its index among the values given."""
        if not args or not isinstance(args[0], (list, tuple)):
            return
        tensors: list[Tensor] = []
        tensors_flat(args[0], tensors)
        last = self.flow.lookup(tensors[-1]) if len(tensors) > 1 else None
        if last is not None and last in given and given.index(last) > 0:
            scope = self.tracker.scopes[index]
            scope.extra = {**(scope.extra or {}), "works_on": given.index(last)}

    def scope_exited(self, index: int, module: Any, output: Any) -> None:
        if isinstance(output, Tensor):
            tensors = [output]
        elif output is not None:
            tensors = [t for _, t in iter_tensors(output, "")]
        else:
            tensors = []
        first = self._first.pop(index, 0)
        root = self.tracker.scopes[index].parent is None  # the model's own call: its outputs are the graph's
        flow = self.flow
        flow.returning = index  # a pass-through's value is read here only if this call returns it
        here: dict[int, Slot] = {}  # one tensor returned twice is one value of this call
        passed: list[Tensor] = []
        try:
            for t in tensors:  # what each value is now (a value updated through a view is, here)
                if id(t) in here:
                    continue
                latest = flow.latest(t, index)  # the record that last made or wrote its value
                found = here[id(t)] = flow.ref(t) if latest is None else latest[1]
                if found[0] in self.passes.nodes:  # returned on: this call's caller got it
                    parent = self.tracker.scopes[index].parent
                    self.passes.returned(t, found, index, parent, self._site(index, root))
                elif self.passes:  # what a pass-through was given, if one ran on it: so did the caller
                    parent = self.tracker.scopes[index].parent
                    self.passes.returned_original(t, found, parent, self._site(index, root))
                if (latest is None or latest[0] < first) and not root:  # made before the call: passed through
                    passed.append(t)
            for t in passed:  # then the call's own nodes, once every value it returns is read
                here[id(t)] = self._passthrough(index, t, here[id(t)])
        finally:
            flow.returning = None
        refs = [here[id(t)] for t in tensors]
        self.passes.hooked.ended(index, here, self.passes.latest)
        self.recording.scope_outputs[index] = refs
        self.recording.timeline.append(-(index + 1))

    def release(self) -> None:
        self._inputs = []
        self._first.clear()
        self._positional.clear()
        self.passes.clear()

    def _site(self, index: int, root: bool) -> tuple[int, Any, int] | None:
        """Where call ``index`` was made (None for the model's own call: its result is the graph's)."""
        return None if root else self.tracker.call_sites.get(index)

    def _passthrough(self, index: int, t: Tensor, value: Slot) -> Slot:
        scope = self.tracker.scopes[index]
        scope.passthrough = True
        passed = self._passed_by(index, t) if self._passed_by is not None else None
        target, template, kw_template = passed if passed is not None else (IDENTITY, [TensorArg(0)], None)
        nodes = self.recording.nodes
        record = len(nodes)
        nodes.append(
            NodeRecord("op", index, [value], target, None, [raw_meta(t)], template, kw_template, False,
                       scope.code, scope.line, scope.frame, extra={"passthrough": True})
        )
        self.flow.produced(record, [t], [])
        self.passes.add(t, (record, 0), value, scope.parent, self.tracker.call_sites.get(index))
        return record, 0
