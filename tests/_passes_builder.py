"""Hand-built GraphIR fixtures for the analysis-pass tests (no torch needed)."""

from __future__ import annotations

from typing import Any

from torchatlas._ir import GraphIR, Node, Ref, Scope, TensorMeta

Shape = tuple[int, ...]


class IRBuilder:
    """Appends scopes and nodes with fresh ids, the way capture would record them."""

    def __init__(self, root_cls: str = "m.Model") -> None:
        self.scopes: list[Scope] = []
        self.nodes: list[Node] = []
        self.meta: dict[str, Any] = {}
        self.root = self.scope("", root_cls, parent=None)

    def scope(self, path: str, cls: str, parent: str | None = "", call: int = 0) -> str:
        """A module call; ``parent=""`` means the root."""
        sid = f"s{len(self.scopes)}"
        self.scopes.append(Scope(sid, self.root if parent == "" else parent, path, cls, call))
        return sid

    def _add(self, kind: str, scope: str | None, **fields: Any) -> str:
        nid = f"n{len(self.nodes)}"
        self.nodes.append(Node(nid, kind, scope or self.root, **fields))
        return nid

    def input(self, shape: Shape, dtype: str = "float32", path: str = "args[0]") -> str:
        return self._add("input", None, path=path, outputs=[TensorMeta(shape, dtype, "cpu")])

    def param(self, path: str, shape: Shape, scope: str | None = None, dtype: str = "float32", kind: str = "param") -> str:
        return self._add(kind, scope, path=path, outputs=[TensorMeta(shape, dtype, "cpu")])

    def constant(self, shape: Shape, scope: str | None = None, dtype: str = "float32") -> str:
        return self._add("constant", scope, outputs=[TensorMeta(shape, dtype, "cpu")])

    def op(
        self,
        target: str,
        inputs: list[str],
        out: Shape | list[Shape],
        scope: str | None = None,
        args: list[Any] | None = None,
        kwargs: dict[str, Any] | None = None,
        dtype: str = "float32",
        inplace: bool = False,
    ) -> str:
        """An op; ``args`` defaults to the inputs as positional tensors."""
        shapes = out if isinstance(out, list) else [out]
        return self._add(
            "op",
            scope,
            inputs=[Ref(i) for i in inputs],
            target=target,
            outputs=[TensorMeta(s, dtype, "cpu") for s in shapes],
            args=args if args is not None else [{"tensor": i} for i in range(len(inputs))],
            kwargs=kwargs or {},
            inplace=inplace,
        )

    def output(self, node: str, path: str = "output") -> str:
        shape = self.nodes[int(node[1:])].outputs[0]
        self.scopes[0].outputs.append(Ref(node))
        return self._add("output", None, inputs=[Ref(node)], path=path, outputs=[shape])

    def returns(self, scope: str, *nodes: str) -> None:
        self.scopes[int(scope[1:])].outputs.extend(Ref(n) for n in nodes)

    def build(self) -> GraphIR:
        return GraphIR(scopes=list(self.scopes), nodes=list(self.nodes), meta=dict(self.meta))


def linear_layer(b: IRBuilder, x: str, path: str, n_in: int, n_out: int, batch: int = 2, parent: str | None = "") -> str:
    """A ``Linear`` call reading ``x``; returns the output node id."""
    s = b.scope(path, "torch.nn.modules.linear.Linear", parent=parent)
    w = b.param(f"{path}.weight", (n_out, n_in), s)
    bias = b.param(f"{path}.bias", (n_out,), s)
    y = b.op("torch.nn.functional.linear", [x, w, bias], (batch, n_out), s)
    b.returns(s, y)
    return y


def param_entry(path: str, shape: Shape, requires_grad: bool = True, shared_with: list[str] | None = None, dtype: str = "float32") -> dict[str, Any]:
    return {"path": path, "shape": list(shape), "dtype": dtype, "requires_grad": requires_grad, "shared_with": shared_with or []}
