"""The graph IR: what one recorded forward pass computed.

Modelled on torch.fx's ``Node``: few fields, a fixed set of kinds, edges as
references (:class:`Ref`: a node id and which of its outputs), and an open
``meta`` dict for analyses. Every dataclass field is the JSON key it is saved
under (``_document.py``), except that a list of refs is saved as a list of ids
plus a list of slots, as the graph document has always had it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any, Literal, NamedTuple

NodeKind = Literal["input", "param", "buffer", "constant", "op", "output"]
NODE_KINDS: tuple[str, ...] = ("input", "param", "buffer", "constant", "op", "output")


class GraphFormatError(ValueError):
    """A graph document is malformed, truncated or from an unknown version."""


class Ref(NamedTuple):
    """One end of an edge: output number ``slot`` of node ``node``."""

    node: str
    """The producing node's id."""
    slot: int = 0
    """Which of its ``outputs`` (0 for single-output ops)."""


@dataclass(frozen=True, slots=True)
class TensorMeta:
    """Shape, dtype and device of one tensor value."""

    shape: tuple[int | str, ...]
    """Sizes; symbolic sizes are saved as strings."""
    dtype: str
    """``torch.float32`` is saved as ``"float32"``."""
    device: str
    """``"cpu"``, ``"cuda:0"``, ``"meta"``..."""
    placements: tuple[str, ...] = ()
    """A DTensor's placement on each mesh dimension (``"Shard(1)"``, ``"Replicate"``,
    ``"Partial(sum)"``); empty for a plain tensor. ``shape`` is then the global shape."""
    mesh: tuple[tuple[str, int], ...] = ()
    """A DTensor's mesh: (dimension name, size) per dimension."""
    local_shape: tuple[int | str, ...] | None = None
    """A DTensor's shape on this rank."""

    def numel(self) -> int:
        """Elements, counting each symbolic size as 1."""
        n = 1
        for s in self.shape:
            n *= s if isinstance(s, int) else 1
        return n

    def local_numel(self) -> int:
        """Elements this rank holds: the local shape's for a DTensor, else :meth:`numel`."""
        if self.local_shape is None:
            return self.numel()
        n = 1
        for s in self.local_shape:
            n *= s if isinstance(s, int) else 1
        return n

    def as_local(self) -> TensorMeta:
        """This rank's part of a DTensor as a plain tensor (what ``to_local`` hands on); itself
        for a plain tensor."""
        if not self.placements or self.local_shape is None:
            return self
        return TensorMeta(self.local_shape, self.dtype, self.device)


def read_locally(inputs: list[TensorMeta | None], outputs: list[TensorMeta | None]) -> list[TensorMeta | None]:
    """What a call or op was given, as it read it. A DTensor and the plain tensor ``to_local``
    makes of it are one value in the graph, so a call given DTensor values that returns only
    plain tensors (ReLU after ColwiseParallel) was given their local parts."""
    if any(m is not None and m.placements for m in outputs) or not any(m is not None and m.placements for m in inputs):
        return inputs
    return [m.as_local() if m is not None else None for m in inputs]


@dataclass(frozen=True, slots=True)
class Source:
    """The user source line that made a call (torch's own frames skipped)."""

    file: str
    line: int
    code: str = ""
    """The stripped text of that line, so a saved graph still shows it."""

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True, slots=True)
class GraphBreak:
    """Where ``torch.compile`` ended a graph, or compiled one again for a later input set
    (``compile_report``; saved in graph meta ``graph_breaks``)."""

    kind: str
    """A short class of the reason: ``data-dependent``, ``unsupported call``, ``print/logging``,
    ``.item()/.tolist()``, ``dynamic shape guard`` or ``recompile``."""
    reason: str
    """Dynamo's own text."""
    source: Source | None
    """The user line dynamo stopped at (for a recompile: the first line of the recompiled code)."""
    scope: str | None
    """The module call it happened in."""
    node: str | None
    """The op execution went on with after the break (for a recompile: the first op of that code)."""
    graph: int | None
    """The compiled graph the break ends; None for a recompile."""
    call: int
    """The input set: 0 for the first, 1 for the next...; recompiles happen on later ones."""

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GraphBreak:
        src = d.get("source")
        source = Source(src["file"], src["line"], src.get("code", "")) if src else None
        return cls(d["kind"], d["reason"], source, d.get("scope"), d.get("node"), d.get("graph"), d.get("call", 0))


READ_KINDS: tuple[str, ...] = (
    "bool", "item", "tolist", "int", "float", "complex", "index", "print", "numpy", "count", "size",
)
"""How a value may be read into Python: ``bool()`` (an ``if``, ``while``, ``assert``, ``and``,
``v in t``), ``.item()``, ``.tolist()``, ``int()``, ``float()``, ``complex()``, as an index, printed,
as an array (``.numpy()``, ``np.asarray``, DLPack), a size its values decided (``count``:
``len(torch.nonzero(m))``), or only its size (fixed by the shapes of the inputs)."""
READ_STATEMENTS: tuple[str, ...] = ("if", "while", "assert", "break", "continue", "and", "or")
"""The statement a read decided, where its syntax says (``break``: an ``if`` whose body ends in one);
``and``/``or`` for an operand after which Python went on to the next one."""


@dataclass(frozen=True, slots=True)
class PythonRead:
    """One place a node's value left the graph into Python (saved in node meta ``reads``)."""

    how: str
    """One of :data:`READ_KINDS`; saved under the key ``as``."""
    slot: int
    """Which of the node's outputs was read."""
    value: bool | int | float | None
    """What Python got, where it is one plain value: a branch's direction, a scalar."""
    statement: str | None
    """One of :data:`READ_STATEMENTS`, or None where its syntax does not say (a variable, a call).
    A ``bool`` read that settled its statement has that statement's outcome as ``value`` (whether
    the body ran: ``if not t:`` not taken when ``t`` was true)."""
    source: Source | None
    """The user line that read it."""

    @property
    def decision(self) -> bool:
        """The value itself went into Python (not only its size)."""
        return self.how != "size"

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PythonRead:
        src = d.get("source")
        source = Source(src["file"], src["line"], src.get("code", "")) if src else None
        return cls(d["as"], d.get("slot", 0), d.get("value"), d.get("statement"), source)


@dataclass(slots=True)
class Scope:
    """One ``nn.Module`` call."""

    id: str
    """Unique; a trace numbers them ``"s0"``, ``"s1"``... in call order."""
    parent: str | None
    """The scope that was active when this call began; ``None`` for the root."""
    path: str
    """Qualified module name from the root, as in ``named_modules()``; ``""`` is the root."""
    cls: str
    """``type(m).__module__ + "." + type(m).__qualname__``; saved under the key ``class``."""
    call: int
    """How many earlier calls of the same module this pass made."""
    source: Source | None = None
    """Where the module was called from."""
    outputs: list[Ref] = field(default_factory=list)
    """The values the call returned, in the order it returned them."""
    meta: dict[str, Any] = field(default_factory=dict)
    """Open slot for analyses (parameter counts, FLOPs, fold groups...)."""
    inputs: list[Ref] = field(default_factory=list)
    """The tensors the call was given that a recorded node made, in argument order (positional,
    then keyword): the first is the value the call works on. Empty for imported graphs."""

    @property
    def class_name(self) -> str:
        return self.cls.rsplit(".", 1)[-1]

    def given_first(self, read: list[Ref]) -> list[Ref]:
        """``read`` (values the call read from outside it) with those it was given first, in
        argument order: its first argument is the value it works on."""
        if not self.inputs:
            return read
        seen = set(read)
        given = [r for r in self.inputs if r in seen]
        chosen = set(given)
        return given + [r for r in read if r not in chosen]

    @property
    def label(self) -> str:
        """``layer1.0.conv1 (Conv2d)``, with ``#k`` for repeated calls."""
        name = self.path or "<root>"
        if self.call:
            name += f"#{self.call}"
        return f"{name} ({self.class_name})"


@dataclass(slots=True)
class Node:
    """One value-producing event: an input, a parameter, an op or an output."""

    id: str
    """Unique; a trace numbers them ``"n0"``, ``"n1"``... in execution order."""
    kind: str
    """One of :data:`NODE_KINDS`."""
    scope: str
    """Innermost module call active when the node was recorded."""
    inputs: list[Ref] = field(default_factory=list)
    """The values this node read, in argument order: its data flow."""
    shape_inputs: list[Ref] = field(default_factory=list)
    """Values whose shape, dtype or device (not contents) the op read: ``x.view_as(y)`` reads
    ``y`` here. Kept for the record, never counted as data flow."""
    target: str | None = None
    """On ``op`` nodes, a stable name of the callable, e.g. ``torch.conv2d``."""
    path: str | None = None
    """Where the value lives: ``initial_conv.weight``, ``args[0]``, ``output['logits']``."""
    outputs: list[TensorMeta] = field(default_factory=list)
    """The tensor values this node produced (for writes: the tensor written)."""
    args: list[Any] = field(default_factory=list)
    """Positional arguments as JSON: ``{"tensor": i}`` is ``inputs[i]``, ``{"shape_of": i}`` is
    ``shape_inputs[i]``; other values are JSON constants (see docs/format.md)."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments, encoded as ``args``."""
    inplace: bool = False
    """True when the op wrote into one of its inputs (``add_``, ``x[i] = v``, ``out=``)."""
    source: Source | None = None
    """User source line that ran the op."""
    name: str | None = None
    """Python variable the result was assigned to in that line, where recoverable."""
    meta: dict[str, Any] = field(default_factory=dict)
    """Open slot for facts recorded with the node and for analyses (FLOPs, bytes, dead code...)."""

    @property
    def python_reads(self) -> list[PythonRead]:
        """Where its values were read into Python, in order (empty when nowhere)."""
        reads = self.meta.get("reads")
        return [PythonRead.from_dict(d) for d in reads] if reads else []


@dataclass
class GraphIR:
    """A whole capture: scopes in call order, nodes in execution order."""

    scopes: list[Scope]
    nodes: list[Node]
    meta: dict[str, Any] = field(default_factory=dict)
    """Graph-level facts: capture level, torch version, model class, analyses."""

    def __post_init__(self) -> None:
        self._node_index = {n.id: n for n in self.nodes}
        self._scope_index = {s.id: s for s in self.scopes}

    @property
    def graph_breaks(self) -> list[GraphBreak]:
        """``compile_report``: each graph break and recompile, in order (empty otherwise)."""
        return [GraphBreak.from_dict(d) for d in self.meta.get("graph_breaks", [])]

    def node(self, node_id: str | Ref) -> Node:
        return self._node_index[node_id.node if isinstance(node_id, Ref) else node_id]

    def scope(self, scope_id: str) -> Scope:
        return self._scope_index[scope_id]

    def has_node(self, node_id: str) -> bool:
        return node_id in self._node_index

    def has_scope(self, scope_id: str) -> bool:
        return scope_id in self._scope_index

    def ops(self) -> Iterator[Node]:
        return (n for n in self.nodes if n.kind == "op")

    def model_inputs(self) -> list[Ref]:
        """The model's inputs in argument order, read or not: what its own call was given."""
        return [Ref(n.id, 0) for n in self.nodes if n.kind == "input"]

    def call_inputs(self, scope: Scope, read: list[Ref]) -> list[Ref]:
        """What a call shows as its inputs, given the values it read from outside it: for the
        model's own call its inputs in argument order, read or not; for any other, those it read
        with the ones it was given first (``Scope.given_first``)."""
        given = self.model_inputs() if scope.parent is None else []
        return given or scope.given_first(read)

    def users(self) -> dict[str, list[str]]:
        """Node id -> ids of the nodes that read it, in execution order."""
        out: dict[str, list[str]] = {n.id: [] for n in self.nodes}
        for n in self.nodes:
            for producer in dict.fromkeys(r.node for r in n.inputs):
                out[producer].append(n.id)
        return out

    def children(self) -> dict[str | None, list[str]]:
        """Scope id -> ids of its child scopes, in call order (``None`` -> roots)."""
        out: dict[str | None, list[str]] = {s.id: [] for s in self.scopes}
        out.setdefault(None, [])
        for s in self.scopes:
            out[s.parent].append(s.id)
        return out

    def ancestry(self, scope_id: str) -> list[str]:
        """Scope ids from the root down to ``scope_id``."""
        chain: list[str] = []
        cur: str | None = scope_id
        while cur is not None:
            chain.append(cur)
            cur = self._scope_index[cur].parent
        return chain[::-1]

    def depth(self, scope_id: str) -> int:
        return len(self.ancestry(scope_id)) - 1

    def value_meta(self, ref: Ref) -> TensorMeta | None:
        """Shape, dtype and device of the value ``ref`` names (None if the node has no such output)."""
        outs = self._node_index[ref.node].outputs
        return outs[ref.slot] if ref.slot < len(outs) else None

    def with_meta(
        self,
        nodes: dict[str, dict[str, Any]] | None = None,
        scopes: dict[str, dict[str, Any]] | None = None,
        graph: dict[str, Any] | None = None,
    ) -> GraphIR:
        """A new graph whose meta dicts are this one's merged with the given ones.

        Passes use this to return their results instead of mutating their input.
        """
        nodes, scopes = nodes or {}, scopes or {}
        new_nodes = [replace(n, meta={**n.meta, **nodes[n.id]}) if n.id in nodes else n for n in self.nodes]
        new_scopes = [replace(s, meta={**s.meta, **scopes[s.id]}) if s.id in scopes else s for s in self.scopes]
        return GraphIR(scopes=new_scopes, nodes=new_nodes, meta={**self.meta, **(graph or {})})

    # -- JSON: see _document.py ------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The graph document (``docs/format.md``): JSON-ready data, every field documented."""
        from ._document import graph_to_dict

        return graph_to_dict(self)

    def to_json(self, indent: int | None = None) -> str:
        from ._document import graph_to_json

        return graph_to_json(self, indent)

    @classmethod
    def from_dict(cls, doc: Any) -> GraphIR:
        """A graph from its document; anything a renderer could trip on raises ``GraphFormatError``."""
        from ._document import graph_from_dict

        return graph_from_dict(doc)
