"""Input and output shapes of every module call.

A call's inputs are the values its forward ops (at any depth) read that were produced
outside it, parameters and buffers excepted, those it was given first in argument order
(``GraphIR.call_inputs``); its outputs are ``scope.outputs``. Backward ops recorded in a
call (``backward=True``) read gradients, which are not what the call was given.
"""

from __future__ import annotations

from typing import Any

from torchatlas._ir import GraphIR, Ref, read_locally
from torchatlas._passes._common import MetaUpdate, Pass, subtree_ends

_STATE_KINDS = frozenset({"param", "buffer"})


def scope_inputs(ir: GraphIR) -> dict[str, list[Ref]]:
    """Scope id -> the values read from outside it, as ``GraphIR.call_inputs`` orders them."""
    position = {s.id: i for i, s in enumerate(ir.scopes)}
    ends = subtree_ends(ir)
    found: dict[str, dict[Ref, None]] = {s.id: {} for s in ir.scopes}
    for n in ir.nodes:
        if n.kind != "op" or n.meta.get("phase") == "backward":
            continue
        for ref in n.inputs:
            producer = ir.node(ref)
            if producer.kind in _STATE_KINDS:
                continue
            # Model inputs come from outside every call, the root included.
            where = -1 if producer.kind == "input" else position[producer.scope]
            # Walk up from the reading scope until one contains the producer.
            cur: str | None = n.scope
            while cur is not None and not position[cur] <= where <= ends[cur]:
                found[cur].setdefault(ref, None)
                cur = ir.scope(cur).parent
    return {sid: ir.call_inputs(ir.scope(sid), list(refs)) for sid, refs in found.items()}


def io_shapes(ir: GraphIR) -> GraphIR:
    """Annotate scopes with ``input_shapes`` and ``output_shapes`` (lists of size lists) and
    ``input_dtypes`` and ``output_dtypes`` (their dtypes, in the same order)."""
    return io_shapes_update(ir).apply(ir)


def io_shapes_update(ir: GraphIR) -> MetaUpdate:
    """The meta :func:`io_shapes` adds, not yet applied."""
    inputs = scope_inputs(ir)
    scope_meta: dict[str, dict[str, Any]] = {}
    for s in ir.scopes:
        outs = [ir.value_meta(ref) for ref in s.outputs]
        ins = read_locally([ir.value_meta(ref) for ref in inputs[s.id]], outs)
        scope_meta[s.id] = {
            "input_shapes": [list(m.shape) for m in ins if m is not None],
            "output_shapes": [list(m.shape) for m in outs if m is not None],
            "input_dtypes": [m.dtype for m in ins if m is not None],
            "output_dtypes": [m.dtype for m in outs if m is not None],
        }
    return MetaUpdate(scopes=scope_meta)


PASS = Pass(
    "io_shapes",
    io_shapes_update,
    scope_keys=frozenset({"input_shapes", "output_shapes", "input_dtypes", "output_dtypes"}),
)
