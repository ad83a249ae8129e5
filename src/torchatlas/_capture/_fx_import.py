"""Reads graphs other tools recorded: a ``torch.fx.GraphModule`` becomes the same ``GraphIR``
a trace gives. Its scope tracker and naming rules also serve ``torch.export`` programs
(``_export_graph``), read from memory or from a ``.pt2`` file.

Module scopes come from ``node.meta["nn_module_stack"]`` where the producer
recorded one (torch.export, dynamo), keyed per call (export marks a repeated
call with ``@1`` suffixes), or else from ``call_module`` targets' qualified
names. Shapes come from ``node.meta["val"]`` or ``node.meta["tensor_meta"]``.
``operator.getitem`` on a node with several outputs is not a node of its own:
it picks an output slot, as a ``Ref`` does.
"""

from __future__ import annotations

import operator
import re
from typing import Any

import torch
import torch.fx
import torch.utils._pytree as pytree

from .._ir import GraphIR, Node, Ref, Scope, Source, TensorMeta
from .._ops import op_name
from . import _naming, _source
from ._values import dtype_name, encode, shape_of, tensor_table

# One frame's first line, matched at a line's start only, so reading a trace is linear in its length
# (a search from every offset of a crafted one-line trace is quadratic); 18 digits stay an int64.
_FRAME_LINE = re.compile(r'\s*File "(?P<file>[^"]+)", line (?P<line>\d{1,18}), in ')
MAX_STACK_TRACE_CHARS = 64 << 10
"""The end of a node's ``stack_trace`` that is read (innermost frames last; a real one is a few KB)."""
# dynamo spells ``model.layers[0]`` as ``L['self'].layers[0]`` or ``L__self___layers_0``.
_DYNAMO_ROOT = re.compile(r"^L\['self'\]\.?|^L__self__\.?")


def _class_name(cls: Any) -> str:
    if isinstance(cls, type):
        return f"{cls.__module__}.{cls.__qualname__}"
    return str(cls)


def _module_path(raw: str) -> str:
    path = _DYNAMO_ROOT.sub("", raw)
    path = re.sub(r"\._modules\['([^']+)'\]", r".\1", path)
    path = re.sub(r"\[(\d+)\]", r".\1", path)
    path = re.sub(r"\['([^']+)'\]", r".\1", path)
    return re.sub(r"@\d+$", "", path).strip(".")


class _ScopeTracker:
    """Scopes opened and closed as nodes arrive in order, one per module call."""

    def __init__(self, root_cls: str) -> None:
        self.scopes = [Scope("s0", None, "", root_cls, 0)]
        self._open: list[tuple[Any, int]] = [(None, 0)]  # (call key, scope index)
        self._calls: dict[str, int] = {}

    def enter(self, chain: list[tuple[Any, str, str]]) -> str:
        """``chain``: (call key, path, class) from the outermost module call inward."""
        depth = 0
        while depth < len(chain) and depth + 1 < len(self._open) and self._open[depth + 1][0] == chain[depth][0]:
            depth += 1
        del self._open[depth + 1:]
        for key, path, cls in chain[depth:]:
            call = self._calls.get(path, 0)
            self._calls[path] = call + 1
            parent = self.scopes[self._open[-1][1]].id
            self.scopes.append(Scope(f"s{len(self.scopes)}", parent, path, cls, call))
            self._open.append((key, len(self.scopes) - 1))
        return self.scopes[self._open[-1][1]].id


# torch.export's stand-in stack for nodes it made outside any module (sym_size of an input)
_NO_MODULE_STACK = "_empty_nn_module_stack_from_metadata_hook"


def _stack_chain(fx_node: torch.fx.Node) -> list[tuple[Any, str, str]] | None:
    stack = fx_node.meta.get("nn_module_stack")
    if not stack:
        return None
    chain = []
    for key, value in stack.items():
        raw_path, cls = value if isinstance(value, tuple) else (str(value), "")
        if key == _NO_MODULE_STACK:
            continue
        path = _module_path(str(raw_path))
        if path:  # the root module call is scope s0 already
            chain.append((key, path, _class_name(cls)))
    return chain


def _target_chain(gm: torch.nn.Module, target: str, call_key: Any) -> list[tuple[Any, str, str]]:
    """Scopes for a ``call_module`` node: each enclosing module, then this call itself."""
    parts = target.split(".")
    chain = []
    for depth in range(1, len(parts) + 1):
        path = ".".join(parts[:depth])
        try:
            cls = _class_name(type(gm.get_submodule(path)))
        except AttributeError:
            cls = "torch.nn.Module"
        chain.append((path if depth < len(parts) else call_key, path, cls))
    return chain


def _metas(value: Any) -> list[TensorMeta]:
    found: list[TensorMeta] = []
    for leaf in pytree.tree_leaves(value):
        if isinstance(leaf, torch.Tensor):
            found.append(TensorMeta(shape_of(leaf), dtype_name(leaf.dtype), str(leaf.device)))
    return found


def _node_metas(fx_node: torch.fx.Node) -> list[TensorMeta]:
    if "val" in fx_node.meta:
        return _metas(fx_node.meta["val"])
    tm = fx_node.meta.get("tensor_meta")
    if tm is None:
        return []
    items = tm if isinstance(tm, (list, tuple)) and not hasattr(tm, "shape") else [tm]
    return [
        TensorMeta(tuple(s if isinstance(s, int) else str(s) for s in m.shape), dtype_name(m.dtype), "")
        for m in items
        if hasattr(m, "shape")
    ]


def _user_source(trace: str | None) -> Source | None:
    """The innermost user frame of a node's ``stack_trace``."""
    if not trace:
        return None
    lines = trace[-MAX_STACK_TRACE_CHARS:].split("\n")
    innermost = None  # a trace lists the innermost frame last
    for line, code in zip(lines, lines[1:]):
        frame = _FRAME_LINE.match(line)
        if frame is not None and not frame["file"].startswith(_source._INTERNAL_PREFIXES):
            innermost = Source(frame["file"], int(frame["line"]), code.strip())
    return innermost


# A torch.nn leaf whose call is one functional op reads as that op, as a trace of the module
# records it: symbolic_trace's call_module node of a Conv2d is conv2d(x, conv.weight, conv.bias).
_MODULE_OPS = {
    "Linear": "torch.nn.functional.linear",
    "Conv1d": "torch.conv1d", "Conv2d": "torch.conv2d", "Conv3d": "torch.conv3d",
    "ConvTranspose1d": "torch.conv_transpose1d", "ConvTranspose2d": "torch.conv_transpose2d",
    "ConvTranspose3d": "torch.conv_transpose3d",
}
_MODULE_OP_PARAMETERS = ("weight", "bias")
"""Read by each of those ops after its input, in this order."""


def _module_op(fx_node: torch.fx.Node, gm: torch.nn.Module) -> tuple[str, Any] | None:
    """(functional target, module) of a ``call_module`` node of one of ``_MODULE_OPS``."""
    if fx_node.op != "call_module":
        return None
    module = gm.get_submodule(str(fx_node.target))
    cls = type(module)
    target = _MODULE_OPS.get(cls.__name__) if cls.__module__.startswith("torch.nn.modules.") else None
    return (target, module) if target is not None else None


def _target(fx_node: torch.fx.Node, gm: torch.nn.Module) -> str:
    if fx_node.op == "call_method":
        return f"torch.Tensor.{fx_node.target}"
    if fx_node.op == "call_module":
        return _class_name(type(gm.get_submodule(str(fx_node.target))))
    target = fx_node.target
    if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return str(target)
    if getattr(target, "__module__", None) == "_operator":
        return f"operator.{target.__name__}"
    return _naming.target_name(target) if callable(target) else str(target)


class _GraphReader:
    """Turns fx nodes into IR nodes, in graph order."""

    def __init__(self, gm: torch.nn.Module, root_cls: str) -> None:
        self.gm = gm
        self.tracker = _ScopeTracker(root_cls)
        self.nodes: list[Node] = []
        self.value: dict[torch.fx.Node, tuple[str, int]] = {}  # fx node -> (IR node id, slot)
        self._parameters: dict[str, str] = {}  # path -> node id, of parameters read by module ops

    def leaf(self, fx_node: torch.fx.Node, kind: str, path: str) -> None:
        self._add(fx_node, Node(id="", kind=kind, scope="s0", path=path, outputs=_node_metas(fx_node)))

    def parameter(self, path: str, tensor: torch.Tensor) -> str:
        """The node of a parameter a leaf module's op reads (one per path)."""
        found = self._parameters.get(path)
        if found is None:
            found = self._parameters[path] = f"n{len(self.nodes)}"
            self.nodes.append(Node(id=found, kind="param", scope="s0", path=path, outputs=_metas(tensor)))
        return found

    def _add(self, fx_node: torch.fx.Node, node: Node) -> None:
        node.id = f"n{len(self.nodes)}"
        self.nodes.append(node)
        self.value[fx_node] = (node.id, 0)

    def _encode(self, value: Any, index: dict[torch.fx.Node, int]) -> Any:
        if isinstance(value, torch.fx.Node):
            return {"tensor": index[value]} if value in index else {"repr": value.name}
        if isinstance(value, (list, tuple)):
            return [self._encode(v, index) for v in value]
        if isinstance(value, dict):
            return {"dict": {str(k): self._encode(v, index) for k, v in value.items()}}
        return encode(value)

    def op(self, fx_node: torch.fx.Node) -> None:
        if fx_node.target is operator.getitem and self._pick_slot(fx_node):
            return
        if fx_node.op == "call_module":
            # Each call_module node is one call of that module, whatever its stack key says.
            own = _target_chain(self.gm, str(fx_node.target), fx_node.name)
            chain = _stack_chain(fx_node) or own[:-1]
            if chain and chain[-1][1] == own[-1][1]:
                chain = chain[:-1]
            chain = chain + own[-1:]
        else:
            chain = _stack_chain(fx_node) or []
        scope = self.tracker.enter(chain)
        readers = [a for a in pytree.tree_leaves((fx_node.args, fx_node.kwargs)) if isinstance(a, torch.fx.Node)]
        index: dict[torch.fx.Node, int] = {}
        inputs: list[Ref] = []
        for a in readers:
            if a in self.value:
                index.setdefault(a, len(inputs))
                inputs.append(Ref(*self.value[a]))
        target, args = _target(fx_node, self.gm), self._encode(list(fx_node.args), index)
        name = _variable_name(fx_node.name, target)
        module_op = _module_op(fx_node, self.gm)
        if module_op is not None:
            target, module = module_op
            for name in _MODULE_OP_PARAMETERS:
                weight = module._parameters.get(name)
                if weight is None:
                    args.append(None)
                    continue
                args.append({"tensor": len(inputs)})
                inputs.append(Ref(self.parameter(f"{fx_node.target}.{name}", weight), 0))
        schema = getattr(fx_node.target, "_schema", None)
        self._add(
            fx_node,
            Node(
                id="", kind="op", scope=scope, inputs=inputs, target=target,
                outputs=_node_metas(fx_node),
                args=args, kwargs=self._encode(dict(fx_node.kwargs), index)["dict"],
                inplace=bool(schema is not None and any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)),
                source=_user_source(fx_node.meta.get("stack_trace")), name=name,
            ),
        )

    def _pick_slot(self, fx_node: torch.fx.Node) -> bool:
        """``getitem(node, i)`` on a node with several outputs reads its tensor output number ``i``."""
        producer, position = fx_node.args[0], fx_node.args[1]
        values = producer.meta.get("val") if isinstance(producer, torch.fx.Node) else None
        if not isinstance(values, (list, tuple)) or not isinstance(position, int) or producer not in self.value:
            return False
        slot = sum(isinstance(v, torch.Tensor) for v in values[:position])
        self.value[fx_node] = (self.value[producer][0], slot)
        return True

    def outputs(self, fx_node: torch.fx.Node, paths: list[str] | None) -> None:
        returned = pytree.tree_leaves(fx_node.args[0])
        for i, a in enumerate(returned):
            if not isinstance(a, torch.fx.Node) or a not in self.value:
                continue
            node_id, slot = self.value[a]
            outs = self.nodes[int(node_id[1:])].outputs
            path = paths[i] if paths is not None and i < len(paths) else (f"output[{i}]" if len(returned) > 1 else "output")
            self.nodes.append(
                Node(
                    id=f"n{len(self.nodes)}", kind="output", scope="s0", inputs=[Ref(node_id, slot)],
                    path=path, outputs=outs[slot:slot + 1],
                )
            )

    def graph(self, meta: dict[str, Any]) -> GraphIR:
        _fill_scope_outputs(self.tracker.scopes, self.nodes)
        return GraphIR(scopes=self.tracker.scopes, nodes=self.nodes, meta=meta)


def _fill_scope_outputs(scopes: list[Scope], nodes: list[Node]) -> None:
    """A scope's outputs: values made inside it and read outside it (or returned)."""
    parent = {s.id: s.parent for s in scopes}

    def enclosing(scope_id: str) -> list[str]:
        chain = []
        cur: str | None = scope_id
        while cur is not None:
            chain.append(cur)
            cur = parent[cur]
        return chain

    made_in = {n.id: n.scope for n in nodes}
    outputs: dict[str, dict[Ref, None]] = {s.id: {} for s in scopes}
    for n in nodes:
        returned = n.kind == "output"
        reader = set() if returned else set(enclosing(n.scope))
        for ref in n.inputs:
            for s in enclosing(made_in[ref.node]):
                if s not in reader and (returned or s != "s0"):
                    outputs[s][ref] = None
    for s in scopes:
        s.outputs = list(outputs[s.id])


def _level(gm: torch.fx.GraphModule) -> str:
    functions = [n.target for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module")]
    aten = all(isinstance(t, torch._ops.OpOverload) or t is operator.getitem for t in functions)
    return "aten" if functions and aten else "python"


def from_fx(gm: torch.fx.GraphModule) -> GraphIR:
    """A ``GraphIR`` of any ``torch.fx.GraphModule`` (symbolic_trace, make_fx, dynamo...), with the
    module's parameters and buffers listed as a trace lists them."""
    cls = _class_name(type(gm))
    if "<locals>" in cls:  # fx's GraphModuleImpl, named after the traced module's class
        cls = type(gm).__name__ if type(gm).__name__ != "GraphModuleImpl" else "torch.fx.GraphModule"
    reader = _GraphReader(gm, cls)
    params = dict(gm.named_parameters(remove_duplicate=False))
    buffers = dict(gm.named_buffers(remove_duplicate=False))
    for fx_node in gm.graph.nodes:
        if fx_node.op == "placeholder":
            reader.leaf(fx_node, "input", str(fx_node.target).lstrip("*"))
        elif fx_node.op == "get_attr":
            target = str(fx_node.target)
            kind = "param" if target in params else "buffer" if target in buffers else "constant"
            reader.leaf(fx_node, kind, target)
            if "val" not in fx_node.meta and kind != "constant":
                tensor = params.get(target, buffers.get(target))
                reader.nodes[-1].outputs = _metas(tensor)
        elif fx_node.op == "output":
            reader.outputs(fx_node, None)
        else:
            reader.op(fx_node)
    meta = {"level": _level(gm), "torch": torch.__version__, "imported": "torch.fx"}
    meta["parameters"], meta["buffers"] = tensor_table(list(params.items())), tensor_table(list(buffers.items()))
    return reader.graph(meta)


def _variable_name(name: str, target: str) -> str | None:
    """The node's name when it says more than its op (``target``, as ``_target`` names it): fx names
    most nodes after their target and overload (``view``, ``add_3``, ``add_``, ``sym_size_int_3``),
    which would read ``view = view`` beside the op."""
    op = op_name(target) or ""
    generated = re.fullmatch(rf"_?{re.escape(op)}_?(_[a-z]+)*(_\d+)*", name) if op else None
    return None if generated else name
