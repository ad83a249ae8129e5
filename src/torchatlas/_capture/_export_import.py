"""Reads a ``torch.export.ExportedProgram`` in memory into the records of ``_export_graph``,
the same records a ``.pt2`` file read as data gives (``_pt2_reader``)."""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx
import torch.utils._pytree as pytree

from .._ir import GraphIR, TensorMeta
from ._export_graph import ExportLeaf, ExportOp, ExportProgram, Use, graph_of, size_text
from ._fx_import import _class_name, _level, _module_path, _target
from ._values import dtype_name


def from_export(ep: Any) -> GraphIR:
    """A ``GraphIR`` of a ``torch.export.ExportedProgram``, with one scope per module call."""
    return graph_of(program_of(ep), "torch.export", torch.__version__)


def program_of(ep: Any) -> ExportProgram:
    from torch.export.graph_signature import InputKind, OutputKind

    gm = ep.graph_module
    root = next(
        (value for n in gm.graph.nodes for value in (n.meta.get("nn_module_stack") or {}).values()
         if isinstance(value, tuple) and _module_path(str(value[0])) == ""),
        None,
    )
    program = ExportProgram(model=_class_name(root[1]) if root else None, level=_level(gm))
    specs = {s.arg.name: s for s in ep.graph_signature.input_specs if hasattr(s.arg, "name")}
    user_paths = iter(_input_paths(ep) or [])
    kinds = {InputKind.PARAMETER: "param", InputKind.BUFFER: "buffer"}
    owner: dict[torch.fx.Node, ExportOp] = {}
    for fx_node in gm.graph.nodes:
        if fx_node.op == "placeholder":
            spec = specs.get(fx_node.name)
            if spec is not None and spec.kind in kinds:
                kind, path = kinds[spec.kind], str(spec.target)
            elif spec is not None and spec.kind == InputKind.USER_INPUT:
                kind, path = "input", next(user_paths, fx_node.name)
            else:
                kind, path = "constant", str(spec.target) if spec is not None and spec.target else fx_node.name
            program.leaves.append(ExportLeaf(fx_node.name, kind, path, _node_metas(fx_node)))
        elif fx_node.op == "output":
            out_spec = getattr(getattr(ep, "call_spec", None), "out_spec", None)
            users = iter(_spec_paths(out_spec, "output") if out_spec is not None else [])
            paths = [
                next(users, f"output[{i}]") if s.kind == OutputKind.USER_OUTPUT else f"mutated[{str(s.target)!r}]"
                for i, s in enumerate(ep.graph_signature.output_specs)
            ]
            returned = pytree.tree_leaves(fx_node.args[0])
            for i, value in enumerate(returned):
                path = paths[i] if i < len(paths) else (f"output[{i}]" if len(returned) > 1 else "output")
                program.outputs.append((value.name if isinstance(value, torch.fx.Node) else None, path))
        elif fx_node.op == "get_attr":
            continue  # a subgraph a higher-order op (cond, a grad-mode region) takes: an argument, no computation
        elif not _picks_slot(fx_node, owner):
            op = _op(fx_node, gm)
            owner[fx_node] = op
            program.ops.append(op)
    program.tied = _tied(ep, [leaf.path for leaf in program.leaves if leaf.kind == "param"])
    return program


def _tied(ep: Any, names: list[str]) -> list[list[str]]:
    """Groups of parameter names that are one tensor in the program's state dict (export keeps
    a placeholder per name, and reads the tensor through one of them)."""
    groups: dict[int, list[str]] = {}
    for name in names:
        tensor = ep.state_dict.get(name)
        if tensor is not None:
            groups.setdefault(id(tensor), []).append(name)
    return [group for group in groups.values() if len(group) > 1]


def _picks_slot(fx_node: torch.fx.Node, owner: dict[torch.fx.Node, ExportOp]) -> bool:
    """``getitem(node, i)`` on a node with several outputs names its tensor output number ``i``."""
    if fx_node.target is not operator.getitem:
        return False
    producer, position = fx_node.args[0], fx_node.args[1]
    values = producer.meta.get("val") if isinstance(producer, torch.fx.Node) else None
    if not isinstance(values, (list, tuple)) or not isinstance(position, int) or producer not in owner:
        return False
    owner[fx_node] = owner[producer]
    owner[fx_node].results[fx_node.name] = sum(isinstance(v, torch.Tensor) for v in values[:position])
    return True


def _op(fx_node: torch.fx.Node, gm: torch.nn.Module) -> ExportOp:
    stack = []
    for key, value in (fx_node.meta.get("nn_module_stack") or {}).items():
        raw, cls = value if isinstance(value, tuple) else (str(value), "")
        stack.append((key, str(raw), _class_name(cls)))
    schema = getattr(fx_node.target, "_schema", None)
    return ExportOp(
        name=fx_node.name, target=_target(fx_node, gm), args=_plain(list(fx_node.args)),
        kwargs=_plain(dict(fx_node.kwargs)), results={}, outputs=_node_metas(fx_node), stack=stack,
        stack_trace=fx_node.meta.get("stack_trace"),
        inplace=bool(schema is not None and any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)),
    )


def _plain(value: Any) -> Any:
    if isinstance(value, torch.fx.Node):
        return Use(str(value.target) if value.op == "get_attr" else value.name)  # a subgraph by its attribute
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _node_metas(fx_node: torch.fx.Node) -> list[TensorMeta]:
    if "val" in fx_node.meta:
        return [
            TensorMeta(tuple(_size(s) for s in t.shape), dtype_name(t.dtype), str(t.device))
            for t in pytree.tree_leaves(fx_node.meta["val"]) if isinstance(t, torch.Tensor)
        ]
    tm = fx_node.meta.get("tensor_meta")
    items = tm if isinstance(tm, (list, tuple)) and not hasattr(tm, "shape") else [tm]
    return [TensorMeta(tuple(_size(s) for s in m.shape), dtype_name(m.dtype), "") for m in items if hasattr(m, "shape")]


def _size(size: Any) -> int | str:
    """An int, or a symbolic size as the text a ``.pt2`` file's copy of it reads as."""
    from torch.fx.experimental.symbolic_shapes import is_concrete_int

    if isinstance(size, int) or is_concrete_int(size):
        return int(size)
    import sympy

    return size_text(sympy.srepr(size.node.expr))


def _spec_paths(spec: Any, prefix: str) -> list[str]:
    """``prefix[0]``, ``prefix['logits']``... for each leaf of a pytree spec."""
    structure = pytree.tree_unflatten(list(range(spec.num_leaves)), spec)
    return [prefix + pytree.keystr(path) for path, _ in pytree.tree_flatten_with_path(structure)[0]]


def _input_paths(ep: Any) -> list[str] | None:
    spec = getattr(getattr(ep, "call_spec", None), "in_spec", None)
    if spec is None:
        return None
    structure = pytree.tree_unflatten(list(range(spec.num_leaves)), spec)
    paths = []
    for path, _ in pytree.tree_flatten_with_path(structure)[0]:
        head, rest = path[0], pytree.keystr(path[1:])
        paths.append(("args" if getattr(head, "idx", 0) == 0 else "kwargs") + rest)
    return paths
