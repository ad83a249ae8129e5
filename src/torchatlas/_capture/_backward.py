"""Records forward and backward at the ATen level, and what autograd saves between them.

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
from collections.abc import Callable
from typing import Any

import torch

from .._ir import GraphIR, Node, Ref, TensorMeta
from ._aten import AtenSession, AtenStore
from ._recorder import _storage_key
from ._values import dtype_name, iter_tensors, shape_of, tensors_flat

Tensor = torch.Tensor


def default_loss(output: Any) -> Tensor:
    """The sum of every floating-point output that requires grad."""
    terms = [t.sum() for _, t in iter_tensors(output, "") if t.is_floating_point() and t.requires_grad]
    if not terms:
        raise ValueError("torchatlas: no floating-point output requires grad, so there is no backward pass to record")
    return functools.reduce(operator.add, terms)


class BackwardStore(AtenStore):
    """ATen records for forward and backward, tied together through autograd nodes."""

    def __init__(self, model: Any) -> None:
        super().__init__(model)
        self._grad_fns: dict[int, tuple[Any, int]] = {}  # id(autograd node) -> (node, forward record)
        self._pending: list[tuple[int, list[Tensor]]] = []
        self._forward_end = 0  # records before this index were made in forward
        self._output_storages: dict[int, set[Any]] = {}  # forward record -> storages of its outputs
        self.saved_bytes: dict[int, int] = {}  # scope -> activation bytes autograd saved for backward
        self._weights: set[Any] = set()
        if isinstance(model, torch.nn.Module):
            for t in list(model.parameters()) + list(model.buffers()):
                self._weights.add(_storage_key(t))

    # -- forward: which autograd node each record made --------------------------

    def note_outputs(self, index: int, result: Any) -> None:
        """Autograd sets ``grad_fn`` after the dispatcher returns; read it at the next op."""
        self.resolve_pending()
        if self.phase == "forward":
            outs: list[Tensor] = []
            tensors_flat(result if isinstance(result, (tuple, list)) else [result], outs)
            self._pending.append((index, outs))

    def start_backward(self) -> None:
        self.resolve_pending()
        self.note_saved_tensors()
        self.phase = "backward"
        self._forward_end = len(self.nodes)

    def resolve_pending(self) -> None:
        for index, outs in self._pending:
            for t in outs:
                grad_fn = t.grad_fn
                if grad_fn is not None:
                    self._grad_fns.setdefault(id(grad_fn), (grad_fn, index))
                    self._output_storages.setdefault(index, set()).add(_storage_key(t))
        self._pending = []

    def _forward_record_of_running_node(self) -> int | None:
        node = torch._C._current_autograd_node()
        entry = self._grad_fns.get(id(node)) if node is not None else None
        return entry[1] if entry is not None and entry[0] is node else None

    @property
    def current_scope(self) -> int:
        if self.phase == "backward":
            record = self._forward_record_of_running_node()
            return self.nodes[record].scope if record is not None else 0
        return super().current_scope

    def _user_frame(self) -> Any:
        return None if self.phase == "backward" else super()._user_frame()

    # -- saved tensors ------------------------------------------------------------

    def note_saved_tensors(self) -> None:
        """What each forward op's autograd node saved, read once forward has finished.

        ``saved_tensors_hooks`` would see the same tensors, but installing them changes
        which ``aten.detach`` ops autograd dispatches, so the backward pass recorded
        would not be the one that runs without us; reading the nodes changes nothing.
        """
        counted: set[Any] = set()
        for grad_fn, record in sorted(self._grad_fns.values(), key=lambda entry: entry[1]):
            entries = []
            for t in _saved_tensors(grad_fn):
                key = _storage_key(t)
                if key in self._weights or key in counted:
                    continue
                counted.add(key)
                size = _storage_bytes(t)
                scope = self.nodes[record].scope
                self.saved_bytes[scope] = self.saved_bytes.get(scope, 0) + size
                producer = self._producer_of(t, key, record)
                entry = {"shape": list(shape_of(t)), "dtype": dtype_name(t.dtype), "bytes": size}
                if producer is not None:
                    entry["node"] = f"n{producer}"
                entries.append(entry)
            if entries:
                self.nodes[record].extra["saved_for_backward"] = entries

    def _producer_of(self, t: Tensor, key: Any, saver: int) -> int | None:
        entry = self._producer.get(id(t))
        if entry is not None and entry[0]() is t:
            return entry[1]
        # A saved output comes back as a new tensor object on the saver's storage.
        return saver if key in self._output_storages.get(saver, ()) else None

    def record(self, func: Any, args: tuple, kwargs: dict, result: Any) -> int:
        index = super().record(func, args, kwargs, result)
        if self.phase == "backward":
            grad_of = self._forward_record_of_running_node()
            if grad_of is not None:
                extra = self.nodes[index].extra
                extra["grad_of"] = f"n{grad_of}"
                # An autograd node reads only what its own forward op saved.
                if any(r < self._forward_end for r, _ in self.nodes[index].inputs):
                    extra["saved_from"] = [f"n{grad_of}"]
        return index

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


def _gradient_targets(model: Any, args: tuple, kwargs: dict) -> list[tuple[str, Tensor]]:
    """Parameters (each once) and inputs that require grad, named as in the graph."""
    named: list[tuple[str, Tensor]] = []
    seen: set[int] = set()
    if isinstance(model, torch.nn.Module):
        for path, p in model.named_parameters():
            if p.requires_grad and id(p) not in seen:
                seen.add(id(p))
                named.append((path, p))
    for path, t in list(iter_tensors(args, "args")) + list(iter_tensors(kwargs, "kwargs")):
        if t.requires_grad and id(t) not in seen:
            seen.add(id(t))
            named.append((path, t))
    return named


def capture_backward(
    model: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    loss_fn: Callable[[Any], Tensor] | None = None,
    *,
    progress: Callable[[int], None] | None = None,
) -> tuple[GraphIR, Any]:
    """Run forward, ``loss_fn(output)`` (default: :func:`default_loss`) and backward once,
    recording the ATen ops of all three.

    Returns the graph and the model's output. Every op node has
    ``meta["phase"]`` ``"forward"`` or ``"backward"``; backward ops carry
    ``meta["grad_of"]`` (the forward op they differentiate) and, where they read
    tensors autograd saved, ``meta["saved_from"]`` (the forward ops that saved
    them). ``graph.meta["saved_activations"]`` maps scope ids to the bytes of
    activations autograd saved for backward while that module ran.
    """
    from . import TraceError, _describe_failure, unwrap_model  # the package imports this module

    model = unwrap_model(model)
    store = BackwardStore(model)
    session = AtenSession(model, args, kwargs, progress, store=store, after=store.note_outputs)
    try:
        try:
            with session.py, session.mode:
                session.open_root()
                output = model(*args, **kwargs)
                loss = (loss_fn or default_loss)(output)
        except Exception as exc:
            exc.add_note(_describe_failure(session.py, exc))
            raise
        if not isinstance(loss, Tensor) or not loss.requires_grad:
            raise TraceError("torchatlas: the loss does not require grad, so there is no backward pass to record")
        targets = _gradient_targets(model, args, kwargs)
        if not targets:
            raise TraceError("torchatlas: no parameter or input requires grad, so there is no backward pass to record")
        store.start_backward()
        with session.mode:
            grads = torch.autograd.grad(loss, [t for _, t in targets], allow_unused=True)
        ir = session.build(output)
        return _with_backward_facts(ir, store, targets, grads), output
    finally:
        store.release()


def _with_backward_facts(ir: GraphIR, store: BackwardStore, targets: list[tuple[str, Tensor]], grads: tuple[Any, ...]) -> GraphIR:
    """The graph plus one output node per gradient and the saved-activation table."""
    nodes = list(ir.nodes)
    for (path, _), grad in zip(targets, grads):
        if grad is None:
            continue
        producer, slot = store.ref(grad)
        nodes.append(
            Node(
                id=f"n{len(nodes)}", kind="output", scope="s0", inputs=[Ref(f"n{producer}", slot)],
                path=f"grad[{path!r}]", outputs=[TensorMeta(shape_of(grad), dtype_name(grad.dtype), str(grad.device))],
                meta={"phase": "backward"},
            )
        )
    meta = {
        **ir.meta,
        "backward": True,
        "saved_activations": {f"s{scope}": size for scope, size in sorted(store.saved_bytes.items())},
        "saved_activation_bytes": sum(store.saved_bytes.values()),
    }
    return GraphIR(scopes=ir.scopes, nodes=nodes, meta=meta)
