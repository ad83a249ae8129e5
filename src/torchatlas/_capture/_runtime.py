"""What the model did at run time, recorded beside the graph: numbers of each op's outputs,
the outputs the user asked to keep, and time.

* ``_stats.OutputStats`` computes each output's ``min max mean std absmax`` and its NaN, Inf
  and zero counts as the op runs. Only numbers are kept, never an activation.
* :class:`Keeper` keeps (detached copies of) the outputs of the module calls and ops whose
  path matches, and nothing else.
* ``_timing.Timer`` times ops and module calls in untraced passes of their own.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.utils._python_dispatch import _disable_current_modes

from .._ops import op_name
from .._text import error_text
from ._records import Recording
from ._values import iter_tensors

Tensor = torch.Tensor


# -- keeping activations ---------------------------------------------------------------------------

Selector = str | Iterable[str] | Callable[[str], bool]


def matcher(select: Selector) -> Callable[[str, bool], bool]:
    """A path predicate from a glob, a list of globs, or a callable. A module call's path is its
    module path (``layers.0.mlp``, or ``experts:0`` for a ModuleDict key with a colon); an op's
    is ``<module path>:<op name>`` (``layers.0.mlp:relu``). Every glob may select module calls;
    only a glob with a ``:`` selects ops. The predicate takes the path and whether it is an op's."""
    if callable(select):
        return lambda path, is_op: bool(select(path))
    patterns = [select] if isinstance(select, str) else list(select)
    return lambda path, is_op: any(fnmatch.fnmatchcase(path, p) and (":" in p or not is_op) for p in patterns)


class Keeper:
    """Keeps detached copies of the outputs of matching module calls, under ``path`` (``path#k``
    for the k-th later call), and of matching ops, under their node id (``n12``).

    An expanded view (a stride of 0: ``x.expand(...)``) is kept as a copy of the elements it
    shows once, expanded again, so a view over a few numbers never becomes terabytes."""

    def __init__(self, select: Selector, device: str | torch.device | None, recording: Recording) -> None:
        self.matches = matcher(select)
        self.device = torch.device(device) if device is not None else None
        self.recording = recording
        self.kept: dict[str, Any] = {}
        self.refused: dict[str, str] = {}
        """Paths whose output could not be copied, with torch's reason (never the model's failure)."""

    def _keep(self, path: str, value: Any) -> None:
        try:
            with torch._C.DisableTorchFunction(), _disable_current_modes(), torch.no_grad():
                self.kept[path] = torch.utils._pytree.tree_map(self._copy_tensor, value)
        except Exception as exc:
            self.refused[path] = error_text(exc)

    def finish(self) -> None:
        if self.refused:
            listed = "; ".join(f"{path}: {reason}" for path, reason in list(self.refused.items())[:5])
            more = f" (and {len(self.refused) - 5} more)" if len(self.refused) > 5 else ""
            self.recording.meta["save_note"] = f"not kept, as they could not be copied: {listed}{more}"

    def _copy_tensor(self, value: Any) -> Any:
        if not isinstance(value, Tensor):
            return value
        kept = value.detach()
        expanded = kept.layout is torch.strided and not kept.is_nested and 0 in kept.stride() and kept.numel() > 1
        if expanded:
            kept = kept[tuple(slice(0, 1) if step == 0 else slice(None) for step in kept.stride())]
        kept = kept.to(self.device, copy=True) if self.device is not None else kept.clone()
        return kept.expand(value.shape) if expanded else kept

    def op_recorded(self, index: int, outs: list[Tensor]) -> None:
        record = self.recording.nodes[index]
        scope = self.recording.scopes[record.scope].path
        name = op_name(record.target)
        if self.matches(f"{scope}:{name}", True):
            self._keep(f"n{index}", outs[0] if len(outs) == 1 else tuple(outs))

    def scope_entered(self, index: int, module: Any, args: tuple, kwargs: dict) -> None:
        """Nothing: a call is kept when it returns."""

    def scope_exited(self, index: int, module: Any, output: Any) -> None:
        scope = self.recording.scopes[index]
        if scope.parent is not None and self.matches(scope.path, False) and any(True for _ in iter_tensors(output, "")):
            self._keep(scope.path + (f"#{scope.call}" if scope.call else ""), output)
