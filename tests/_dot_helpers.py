"""Hand-built graphs and a DOT reader for the diagram tests."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field

import pydot

from torchatlas._ir import GraphIR, Node, Ref, Scope, TensorMeta


class IRBuilder:
    """Builds a GraphIR the way capture would record it: scopes in call order, nodes in execution order."""

    def __init__(self, model_cls: str = "tests.Model") -> None:
        self.scopes: list[Scope] = [Scope("s0", None, "", model_cls, 0)]
        self.nodes: list[Node] = []
        self.params: list[dict] = []

    def scope(self, path: str, cls: str, parent: str = "s0", call: int = 0, **meta) -> str:
        sid = f"s{len(self.scopes)}"
        self.scopes.append(Scope(sid, parent, path, cls, call, meta=dict(meta)))
        return sid

    def _add(self, kind: str, scope: str, inputs=(), shape=(1,), dtype="float32", **fields) -> str:
        nid = f"n{len(self.nodes)}"
        meta = [TensorMeta(tuple(shape), dtype, "cpu")]
        self.nodes.append(Node(nid, kind, scope, [Ref(i) for i in inputs], outputs=meta, **fields))
        return nid

    def input(self, path: str, shape, dtype: str = "float32") -> str:
        return self._add("input", "s0", shape=shape, dtype=dtype, path=path)

    def param(self, path: str, shape, scope: str) -> str:
        self.params.append({"path": path, "shape": list(shape), "dtype": "float32", "shared_with": []})
        return self._add("param", scope, shape=shape, path=path)

    def op(self, target: str, inputs, shape, scope: str = "s0", dtype: str = "float32", **fields) -> str:
        return self._add("op", scope, inputs, shape=shape, dtype=dtype, target=target, **fields)

    def output(self, value: str, path: str = "output") -> str:
        shape = self.nodes[int(value[1:])].outputs[0].shape
        return self._add("output", "s0", [value], shape=shape, path=path)

    def returns(self, scope: str, *values: str) -> None:
        self.scopes[int(scope[1:])].outputs = [Ref(v) for v in values]

    def build(self) -> GraphIR:
        model = self.scopes[0].cls
        return GraphIR(list(self.scopes), list(self.nodes), {"model": model, "parameters": list(self.params)})


def linear(b: IRBuilder, path: str, x: str, n_in: int, n_out: int, parent: str = "s0", call: int = 0) -> str:
    sid = b.scope(path, "torch.nn.modules.linear.Linear", parent, call)
    w = b.param(f"{path}.weight", (n_out, n_in), sid) if call == 0 else None
    inputs = [x] + ([w] if w else [])
    y = b.op("torch.nn.functional.linear", inputs, (1, n_out), sid)
    b.returns(sid, y)
    return y


def coolcnn_ir() -> GraphIR:
    """What capture records for examples/coolcnn.py on a 1×3×32×32 input."""
    b = IRBuilder("coolcnn.CoolCNN")
    x = b.input("args[0]", (1, 3, 32, 32))

    def conv(path: str, src: str, c_in: int, c_out: int, hw: int) -> str:
        sid = b.scope(path, "torch.nn.modules.conv.Conv2d")
        w = b.param(f"{path}.weight", (c_out, c_in, 3, 3), sid)
        bias = b.param(f"{path}.bias", (c_out,), sid)
        y = b.op("torch.conv2d", [src, w, bias], (1, c_out, hw, hw), sid)
        b.returns(sid, y)
        return y

    def pool(src: str, call: int, c: int, hw: int) -> str:
        sid = b.scope("max_pool", "torch.nn.modules.pooling.MaxPool2d", call=call)
        y = b.op("torch.nn.functional.max_pool2d", [src], (1, c, hw, hw), sid)
        b.returns(sid, y)
        return y

    main = pool(b.op("torch.relu", [conv("initial_conv", x, 3, 16, 32)], (1, 16, 32, 32)), 0, 16, 16)
    side = pool(b.op("torch.relu", [conv("parallel_conv", x, 3, 16, 32)], (1, 16, 32, 32)), 1, 16, 16)
    h = b.op("torch.Tensor.__add__", [main, side], (1, 16, 16, 16))
    h = b.op("torch.Tensor.__truediv__", [h], (1, 16, 16, 16))
    h = pool(b.op("torch.relu", [conv("secondary_conv", h, 16, 32, 16)], (1, 32, 16, 16)), 2, 32, 8)
    h = b.op("torch.Tensor.view", [h], (1, 2048))
    h = b.op("torch.relu", [linear(b, "fully_connected1", h, 2048, 128)], (1, 128))
    b.output(linear(b, "output_layer", h, 128, 10))
    return b.build()


def residual_ir() -> GraphIR:
    """One ResNet basic block: conv-bn-relu-conv-bn, plus the skip connection, then relu."""
    b = IRBuilder("tests.ResidualNet")
    x = b.input("args[0]", (1, 8, 4, 4))
    block = b.scope("block", "tests.BasicBlock")
    h = x
    for name, cls, target in (
        ("conv1", "torch.nn.modules.conv.Conv2d", "torch.conv2d"),
        ("bn1", "torch.nn.modules.batchnorm.BatchNorm2d", "torch.nn.functional.batch_norm"),
        ("relu", "torch.nn.modules.activation.ReLU", "torch.nn.functional.relu"),
        ("conv2", "torch.nn.modules.conv.Conv2d", "torch.conv2d"),
        ("bn2", "torch.nn.modules.batchnorm.BatchNorm2d", "torch.nn.functional.batch_norm"),
    ):
        sid = b.scope(f"block.{name}", cls, block)
        h = b.op(target, [h], (1, 8, 4, 4), sid)
        b.returns(sid, h)
    out = b.op("torch.Tensor.__iadd__", [h, x], (1, 8, 4, 4), block, inplace=True)
    out = b.op("torch.relu", [out], (1, 8, 4, 4), block)
    b.returns(block, out)
    b.output(out)
    return b.build()


def shared_ir() -> GraphIR:
    """The same Linear called twice in a row."""
    b = IRBuilder("tests.Twice")
    x = b.input("args[0]", (1, 4))
    h = linear(b, "fc", x, 4, 4)
    h = linear(b, "fc", h, 4, 4, call=1)
    b.output(h)
    return b.build()


def loop_ir(count: int = 4, mark_repeats: bool = True) -> GraphIR:
    """A stack of ``count`` identical blocks, each Linear + GELU, all reading a shared mask."""
    b = IRBuilder("tests.Stack")
    x = b.input("args[0]", (2, 8))
    mask = b.input("kwargs['mask']", (2, 8), dtype="bool")
    for i in range(count):
        meta = {"repeat": {"group": "layers:Block", "index": i, "count": count}} if mark_repeats else {}
        block = b.scope(f"layers.{i}", "tests.Block", **meta)
        h = linear(b, f"layers.{i}.fc", x, 8, 8, parent=block)
        h = b.op("torch.nn.functional.gelu", [h], (2, 8), block)
        x = b.op("torch.Tensor.masked_fill", [h, mask], (2, 8), block)
        b.returns(block, x)
    b.output(x)
    return b.build()


def encoder_decoder_ir(layers: int = 4) -> GraphIR:
    """An encoder's output read by a cross-attention-like Linear in each of ``layers``
    repeated decoder layers, beside the decoder's own chain (T5, BART, Whisper)."""
    b = IRBuilder("tests.EncoderDecoder")
    src = b.input("args[0]", (2, 8))
    tgt = b.input("args[1]", (2, 8))
    encoder = b.scope("encoder", "tests.Encoder")
    memory = linear(b, "encoder.fc", src, 8, 8, parent=encoder)
    b.returns(encoder, memory)
    decoder = b.scope("decoder", "tests.Decoder")
    h = tgt
    for i in range(layers):
        layer = b.scope(f"decoder.layers.{i}", "tests.Layer", parent=decoder,
                        repeat={"group": "layers:Layer", "index": i, "count": layers})
        h = linear(b, f"decoder.layers.{i}.q", h, 8, 8, parent=layer)
        k = linear(b, f"decoder.layers.{i}.k", memory, 8, 8, parent=layer)
        h = b.op("torch.Tensor.__add__", [h, k], (2, 8), layer)
        b.returns(layer, h)
    b.returns(decoder, h)
    b.output(h)
    return b.build()


# -- reading DOT back ----------------------------------------------------------


def label_text(raw: str | None) -> str:
    """The text a DOT label shows: HTML-like tags dropped, entities decoded, quotes removed."""
    if raw is None:
        return ""
    if raw.startswith("<") and raw.endswith(">"):
        body = re.sub(r"<BR\s*/>", "\n", raw[1:-1])
        return html.unescape(re.sub(r"<[^>]*>", "", body))
    return raw.strip('"').replace('\\"', '"').replace("\\\\", "\\")


@dataclass
class Diagram:
    nodes: dict[str, dict] = field(default_factory=dict)
    """Node name -> attributes, plus ``cluster``: the innermost cluster holding it (None at top level)."""
    clusters: dict[str, dict] = field(default_factory=dict)
    """Cluster name -> its ``graph [...]`` attributes, plus ``parent`` cluster."""
    edges: list[tuple[str, str, dict]] = field(default_factory=list)
    pins: list[tuple[str, str]] = field(default_factory=list)
    """Invisible edges: they only keep a unit below another (``rank_pins``)."""
    graph: dict = field(default_factory=dict)

    def label(self, node: str) -> str:
        return label_text(self.nodes[node].get("label"))

    def find(self, text: str) -> str:
        """The one node whose label's first line is ``text``."""
        hits = [n for n in self.nodes if self.label(n).split("\n")[0] == text]
        assert len(hits) == 1, f"{text!r} labels {hits}"
        return hits[0]

    def preds(self, node: str) -> list[str]:
        return [s for s, d, _ in self.edges if d == node]

    def succs(self, node: str) -> list[str]:
        return [d for s, d, _ in self.edges if s == node]

    def cluster_label(self, cluster: str) -> str:
        return label_text(self.clusters[cluster].get("label"))


def _unquote(name: str) -> str:
    return name[1:-1] if name.startswith('"') and name.endswith('"') else name


def parse_dot(source: str) -> Diagram:
    (graph,) = pydot.graph_from_dot_data(source)
    out = Diagram()

    def walk(g, cluster: str | None) -> None:
        for n in g.get_nodes():
            name = _unquote(n.get_name())
            if name in ("graph", "node", "edge"):
                if name == "graph" and cluster is not None:
                    out.clusters[cluster].update(n.get_attributes())
                elif name == "graph":
                    out.graph.update(n.get_attributes())
                continue
            assert name not in out.nodes, f"node {name} declared twice"
            out.nodes[name] = {**n.get_attributes(), "cluster": cluster}
        for e in g.get_edges():
            ends = (_unquote(e.get_source()), _unquote(e.get_destination()))
            if e.get_attributes().get("style") == "invis":
                out.pins.append(ends)
            else:
                out.edges.append((*ends, e.get_attributes()))
        for sub in g.get_subgraphs():
            name = _unquote(sub.get_name())
            out.clusters[name] = {"parent": cluster}
            walk(sub, name)

    walk(graph, None)
    return out
