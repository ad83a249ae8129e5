"""What ``make_fx`` records, in the labels of ``_capture_helpers.wiring``.

``op3`` is the fourth ATen op, ``op3.1`` its second tensor output,
``input:args[0]``, ``param:fc.weight``, ``buffer:bn.running_mean`` and
``constant`` the leaves. ``operator.getitem`` nodes are output selections, not ops.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
import torch.fx
import torch.utils._pytree as pytree
from torch.fx.experimental.proxy_tensor import make_fx


def make_fx_wiring(
    fn: Callable[..., Any], inputs: tuple[Any, ...], model: torch.nn.Module, input_paths: list[str], **make_fx_options: Any
) -> list[tuple[str, tuple[str, ...]]]:
    gm = make_fx(fn, **make_fx_options)(*inputs)
    names: dict[int, str] = {}
    for path, p in model.named_parameters():
        names.setdefault(id(p), f"param:{path}")
    for path, b in model.named_buffers():
        names.setdefault(id(b), f"buffer:{path}")
    label: dict[torch.fx.Node, str] = {}
    placeholders = iter(input_paths)
    ops: list[tuple[str, tuple[str, ...]]] = []
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            label[node] = f"input:{next(placeholders)}"
        elif node.op == "get_attr":
            label[node] = names.get(id(getattr(gm, node.target)), "constant")
        elif node.op == "call_function" and node.target is operator.getitem:
            producer, position = node.args
            slot = sum(isinstance(v, torch.Tensor) for v in producer.meta["val"][:position])
            label[node] = label[producer] if slot == 0 else f"{label[producer]}.{slot}"
        elif node.op == "call_function":
            reads = [label[a] for a in pytree.tree_leaves((node.args, node.kwargs)) if isinstance(a, torch.fx.Node)]
            label[node] = f"op{len(ops)}"
            ops.append((str(node.target), tuple(reads)))
    return ops
