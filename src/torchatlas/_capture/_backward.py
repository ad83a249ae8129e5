"""Backward at the ATen level, and what autograd saves between forward and backward.

The forward pass runs as at level "aten". Each forward record learns the
autograd node (``grad_fn``) its outputs got; during backward,
``torch._C._current_autograd_node()`` names the node running, so each backward
ATen op is tied to the forward op it differentiates and takes that op's module
scope, and each backward op that reads a forward value (a tensor autograd saved)
names the forward op that saved it. Once forward has finished, the autograd
nodes' saved tensors give the activation bytes kept for backward per module.
Gradients are taken with ``torch.autograd.grad``, so no ``.grad`` attribute of
the model changes.
"""

from __future__ import annotations

import functools
import operator
from typing import Any

import torch

from .._text import error_text
from ._aten import AtenLevel
from ._dataflow import raw_meta, storage_key
from ._values import dtype_name, iter_tensors, shape_of, tensors_flat

Tensor = torch.Tensor


def default_loss(output: Any) -> Tensor:
    """The sum of every floating-point output that requires grad."""
    terms = []
    for _, t in iter_tensors(output, ""):
        if t.is_floating_point() and t.requires_grad:
            try:
                terms.append(t.sum())
            except (RuntimeError, NotImplementedError) as exc:  # float8, mkldnn, a strided nested tensor
                raise ValueError(
                    f"torchatlas: the default loss cannot sum a {dtype_name(t.dtype)} output of layout "
                    f"{str(t.layout).replace('torch.', '')} ({error_text(exc)}); pass loss_fn"
                ) from exc
    if not terms:
        raise ValueError("torchatlas: no floating-point output requires grad, so there is no backward pass to record")
    return functools.reduce(operator.add, terms)


class BackwardFacts:
    """The backward phase of an :class:`AtenLevel`: which forward op each backward op differentiates."""

    def __init__(self, level: AtenLevel, model: Any) -> None:
        self.level = level
        self.nodes = level.nodes
        self._grad_fns: dict[int, tuple[Any, int]] = {}  # id(autograd node) -> (node, forward record)
        self._pending: list[tuple[int, list[Tensor]]] = []
        self._forward_end = 0  # records before this index were made in forward
        self._output_storages: dict[int, set[Any]] = {}  # forward record -> storages of its outputs
        self.saved_bytes: dict[int, int] = {}  # scope -> activation bytes autograd saved for backward
        self._weights: set[Any] = set()
        if isinstance(model, torch.nn.Module):
            for t in list(model.parameters()) + list(model.buffers()):
                self._weights.add(storage_key(t))
        level.backward = self

    # -- forward: which autograd node each record made --------------------------------------

    def recorded(self, index: int, result: Any) -> None:
        """Autograd sets ``grad_fn`` after the dispatcher returns: read it at the next op."""
        self._resolve_pending()
        if self.level.phase == "forward":
            outs: list[Tensor] = []
            tensors_flat(result if isinstance(result, (tuple, list)) else [result], outs)
            self._pending.append((index, outs))
            return
        grad_of = self._forward_record_of_running_node()
        if grad_of is not None:
            extra = self.nodes[index].extra
            extra["grad_of"] = f"n{grad_of}"
            # An autograd node reads only what its own forward op saved.
            if any(r < self._forward_end for r, _ in self.nodes[index].inputs):
                extra["saved_from"] = [f"n{grad_of}"]

    def start_backward(self) -> None:
        self._resolve_pending()
        self._note_saved_tensors()
        self.level.phase = "backward"
        self._forward_end = len(self.nodes)

    def _resolve_pending(self) -> None:
        for index, outs in self._pending:
            for t in outs:
                grad_fn = t.grad_fn
                if grad_fn is not None:
                    self._grad_fns.setdefault(id(grad_fn), (grad_fn, index))
                    self._output_storages.setdefault(index, set()).add(storage_key(t))
        self._pending = []

    def _forward_record_of_running_node(self) -> int | None:
        node = torch._C._current_autograd_node()
        entry = self._grad_fns.get(id(node)) if node is not None else None
        return entry[1] if entry is not None and entry[0] is node else None

    def scope_now(self) -> int | None:
        """In backward, an op takes the scope of the forward op it differentiates."""
        if self.level.phase != "backward":
            return None
        record = self._forward_record_of_running_node()
        return self.nodes[record].scope if record is not None else 0

    # -- saved tensors -------------------------------------------------------------------------

    def _note_saved_tensors(self) -> None:
        """What each forward op's autograd node saved, read once forward has finished.

        ``saved_tensors_hooks`` would see the same tensors, but installing them changes
        which ``aten.detach`` ops autograd dispatches, so the backward pass recorded
        would not be the one that runs without us; reading the nodes changes nothing.
        """
        counted: set[Any] = set()
        for grad_fn, record in sorted(self._grad_fns.values(), key=lambda entry: entry[1]):
            entries = []
            for t in _saved_tensors(grad_fn):
                key = storage_key(t)
                if key in self._weights or key in counted:
                    continue
                counted.add(key)
                size = _storage_bytes(t)
                scope = self.nodes[record].scope
                self.saved_bytes[scope] = self.saved_bytes.get(scope, 0) + size
                producer = self._producer_of(t, key, record)
                entry: dict[str, Any] = {"shape": list(shape_of(t)), "dtype": dtype_name(t.dtype), "bytes": size}
                if producer is not None:
                    entry["node"] = f"n{producer}"
                entries.append(entry)
            if entries:
                self.nodes[record].extra["saved_for_backward"] = entries

    def _producer_of(self, t: Tensor, key: Any, saver: int) -> int | None:
        found = self.level.flow.made_by(t)
        if found is not None:
            return found
        # A saved output comes back as a new tensor object on the saver's storage.
        return saver if key in self._output_storages.get(saver, ()) else None

    def gradient_outputs(self, targets: list[tuple[str, Tensor]], grads: tuple[Any, ...]) -> None:
        """One output node per gradient, and the saved-activation table in the graph meta."""
        recording = self.level.recording
        for (path, _), grad in zip(targets, grads):
            if grad is not None:
                recording.outputs.append((f"grad[{path!r}]", self.level.flow.ref(grad), raw_meta(grad), {"phase": "backward"}))
        recording.meta.update(
            backward=True,
            saved_activations={f"s{scope}": size for scope, size in sorted(self.saved_bytes.items())},
            saved_activation_bytes=sum(self.saved_bytes.values()),
        )

    def release(self) -> None:
        self._grad_fns.clear()
        self._pending = []


_SAVED_ATTRS: dict[type, list[str]] = {}


def _saved_tensors(grad_fn: Any) -> list[Tensor]:
    """The tensors an autograd node holds for backward (``_saved_*`` of built-in nodes,
    ``saved_tensors`` of custom ``autograd.Function`` nodes)."""
    names = _SAVED_ATTRS.get(type(grad_fn))
    if names is None:
        names = [a for a in dir(grad_fn) if a.startswith("_saved_") or a == "saved_tensors"]
        _SAVED_ATTRS[type(grad_fn)] = names
    found: list[Tensor] = []
    for name in names:
        try:
            value = getattr(grad_fn, name)
        except RuntimeError:  # already freed, or not saved on this call
            continue
        tensors_flat(value if isinstance(value, (tuple, list)) else [value], found)
    return found


def _storage_bytes(t: Tensor) -> int:
    try:
        return int(t.untyped_storage().nbytes())
    except (RuntimeError, NotImplementedError, AttributeError):
        return t.numel() * t.element_size()


def gradient_targets(model: Any, args: tuple, kwargs: dict) -> list[tuple[str, Tensor]]:
    """Parameters (each once) and inputs that require grad, named as in the graph."""
    named: list[tuple[str, Tensor]] = []
    seen: set[int] = set()
    if isinstance(model, torch.nn.Module):
        for path, p in model.named_parameters():
            if p.requires_grad and id(p) not in seen:
                seen.add(id(p))
                named.append((path, p))
    for path, t in list(iter_tensors(args, "args", attributes=True)) + list(iter_tensors(kwargs, "kwargs", attributes=True)):
        if t.requires_grad and id(t) not in seen:
            seen.add(id(t))
            named.append((path, t))
    return named

