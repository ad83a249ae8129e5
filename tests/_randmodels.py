"""Random models whose true op graph is known, as a hypothesis strategy.

A program is a short list of steps over a pool of 4×4 tensor values: elementwise
and matmul ops, shared ``Linear`` calls, a module taking a dict and returning a
tuple, views, in-place ops, writes into slices and through views. ``build`` turns
it into Python source for a ``forward`` (so a failing example reads as code), an
``nn.Module`` running it, inputs, and the graph a correct capture must record,
worked out by a small model of tensor storage: a reader of a value whose storage
was written after the value was made reads the last writer if the write went
through the same view of the storage, else a ``torchatlas.updated`` node made at
that read from its old value and the write.

A pass-through call (``v5 = self.drop(v2)``) returns the very tensor it was given: ``v5``
and ``v2`` are one tensor object, and only reads through ``v5`` read through the call
(one op that reads both variables reads both through it: capture decides per op, by the
variables its line loads, not per operand). The result may be passed on first: into a tuple
that accumulates values (``acc = acc + (v5,)``, read back as ``v6 = acc[-1]``: it reads as
the latest pass-through of that tensor any variable appended got), or returned by a module
whose last call is the Dropout (``self.tail``: ``h = tanh(x); h = self.drop(h); return h``).
ModernBERT's two shapes: the call inline in the first argument of a call that also unpacks a
dict (``self.gate(self.ident(v2), **kw)``: the dict is no container the result escapes in,
so later readers of ``v2`` read its producer), and a result stored in a variable that is
rebound before the next read (``h = self.ident(v2); h = torch.tanh(h); v6 = v2 + h``). And
transformers' first hidden state: a forward hook keeps what a layer was given, which an
Identity first in the layer passed on (``h = tanh(v2); v5 = self.hooked(h); del h;
v6 = self.hooked.kept[-1] * 0.5`` reads the tanh, not the Identity).

Labels follow ``_capture_helpers``: ``op3``, ``op3.1`` (second output),
``input:args[0]``, ``param:lins.0.weight``.
"""

from __future__ import annotations

import itertools
import linecache
from dataclasses import dataclass, field

import torch
import torch.nn as nn
from hypothesis import strategies as st

T = "torch.Tensor."
N_LINEARS = 2
INPUT_PATHS = ("args[0]", "args[1]['y']", "args[1]['zs'][0]")
INPUT_EXPRS = ("x", 'pack["y"]', 'pack["zs"][0]')

# kind -> (number of pool operands, number of new pool values)
KINDS: dict[str, tuple[int, int]] = {
    "relu": (1, 1), "tanh": (1, 1), "sigmoid": (1, 1), "neg": (1, 1), "scale": (1, 1),
    "add": (2, 1), "mul": (2, 1), "matmul": (2, 1), "maximum": (2, 1),
    "linear": (1, 1), "mixer": (2, 2), "act_inplace": (1, 1),
    "t": (1, 1), "transpose": (1, 1), "view": (1, 1), "flat": (1, 1), "unsqueeze_squeeze": (1, 1),
    "add_": (2, 1), "mul_": (1, 1), "relu_": (1, 1), "iadd": (2, 1),
    "setitem": (2, 0), "slice_mul_": (1, 0), "chunk_cat": (1, 1), "stack_sum": (2, 1),
    "dropout_eval": (1, 1), "identity": (1, 1), "second_chunk": (1, 1),
    "accumulate": (1, 1), "dropout_last": (1, 1), "ident_into_call": (2, 1), "ident_rebound": (1, 1),
    "hook_kept": (1, 2),
}


@dataclass(frozen=True)
class Step:
    kind: str
    operands: tuple[int, ...]
    """Pool indices read by the step."""
    choice: int = 0
    """Which Linear (for ``linear``) or where a slice starts (for writes into slices)."""


@dataclass(frozen=True)
class Program:
    steps: tuple[Step, ...]
    returned: tuple[int, ...]
    """Pool indices returned: the first as ``output['main']``, the rest in ``output['extra']``."""


@dataclass
class TrueGraph:
    ops: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    """(target, labels of the values read) per op, in execution order."""
    inplace: list[bool] = field(default_factory=list)
    op_scopes: list[str] = field(default_factory=list)
    """Module path of the call each op ran in (``""``: the root)."""
    scopes: list[tuple[str, int]] = field(default_factory=list)
    """(path, call) of each module call, in call order."""
    outputs: dict[str, str] = field(default_factory=dict)


@dataclass
class RandomModel:
    module: nn.Module
    args: tuple
    source: str
    truth: TrueGraph


class Mixer(nn.Module):
    """A module whose input is a dict and whose output is a tuple."""

    def forward(self, pair):
        total = pair["a"] + pair["b"]
        product = pair["a"] * pair["b"]
        return total, product


class SecondChunk(nn.Module):
    """Returns the second output of a multi-output op: the call's output has slot 1."""

    def forward(self, x):
        return torch.cat([x, x]).chunk(2)[1]


class Tail(nn.Module):
    """A module whose last call is a pass-through, on a value it made, and that returns it."""

    def __init__(self) -> None:
        super().__init__()
        self.drop = nn.Dropout(0.5).eval()

    def forward(self, x):
        h = torch.tanh(x)
        h = self.drop(h)
        return h


class Gate(nn.Module):
    """Takes its second operand by keyword, as a layer takes ``position_embeddings=…``."""

    def forward(self, x, other):
        return x * other


class Hooked(nn.Module):
    """A layer whose first call passes its input through, with a forward hook that keeps what
    the layer was given (transformers' first hidden state)."""

    def __init__(self) -> None:
        super().__init__()
        self.norm, self.proj = nn.Identity(), nn.Linear(4, 4)
        self.kept: list[torch.Tensor] = []
        self.register_forward_hook(_keep_argument)

    def forward(self, x):
        return self.proj(self.norm(x))


def _keep_argument(module: Hooked, args: tuple, output: torch.Tensor) -> None:
    module.kept[:] = [args[0]]


class RandomNet(nn.Module):
    def __init__(self, source: str, filename: str) -> None:
        super().__init__()
        self.lins = nn.ModuleList([nn.Linear(4, 4) for _ in range(N_LINEARS)])
        self.mixer = Mixer()
        self.act = nn.ReLU(inplace=True)
        # Module calls that return their input unchanged: they stay on the data path.
        self.drop = nn.Dropout(0.5).eval()
        self.ident = nn.Identity()
        self.second = SecondChunk()
        self.tail = Tail()
        self.gate = Gate()
        self.hooked = Hooked()
        # frozen, so that writes into inputs and their views never meet autograd's leaf rules
        self.requires_grad_(False)
        namespace: dict = {"torch": torch}
        exec(compile(source, filename, "exec"), namespace)
        self._program = namespace["forward"]

    def forward(self, x, pack):
        return self._program(self, x, pack)


@st.composite
def programs(draw: st.DrawFn, max_steps: int = 10) -> Program:
    pool = len(INPUT_PATHS)
    steps = []
    for _ in range(draw(st.integers(1, max_steps))):
        kind = draw(st.sampled_from(sorted(KINDS)))
        n_operands, n_new = KINDS[kind]
        operands = tuple(draw(st.integers(0, pool - 1)) for _ in range(n_operands))
        choice = draw(st.integers(0, N_LINEARS - 1 if kind == "linear" else 2))
        steps.append(Step(kind, operands, choice))
        pool += n_new
    extra = draw(st.lists(st.integers(0, pool - 1), max_size=2))
    return Program(tuple(steps), (pool - 1, *extra))


@dataclass
class _Value:
    storage: int
    producer: str
    order: int
    """Index of the producing op; -1 for inputs."""
    contiguous: bool = True
    tensor: int = -1
    """Which tensor object holds it: a pass-through call's result is the tensor it was given."""


class _Simulator:
    """Emits forward source and the true graph side by side."""

    def __init__(self) -> None:
        self.truth = TrueGraph()
        self.lines = ["def forward(self, x, pack):"]
        self.pool: list[_Value] = []
        self.last_write: dict[int, tuple[int, str, bool | None]] = {}
        """storage -> (op index, label, contiguity of the view written; None: a slice)"""
        self.storages = itertools.count()
        self.tensors = itertools.count()
        self.calls: dict[str, int] = {}
        self.accumulated: list[_Value] = []
        """The values appended to the tuple ``acc``, in order (the same objects as the pool's)."""
        self.emit("acc = ()")
        for path, expr in zip(INPUT_PATHS, INPUT_EXPRS):
            self.emit(f"v{len(self.pool)} = {expr}")
            self.pool.append(_Value(next(self.storages), f"input:{path}", -1, tensor=next(self.tensors)))

    def emit(self, line: str) -> None:
        self.lines.append("    " + line)

    def read(self, value: _Value, scope: str = "") -> str:
        write = self.last_write.get(value.storage)
        if write is None or write[0] <= value.order:
            return value.producer
        _, writer, contiguous = write
        if contiguous == value.contiguous:  # every value is 4×4: the same strides are the same view
            return writer
        updated = self.op("torchatlas.updated", [value.producer, writer], scope=scope)
        for alias in self.pool:  # made for the tensor object: every variable holding it reads it
            if alias.tensor == value.tensor:
                alias.producer, alias.order = f"op{updated}", updated
        value.producer, value.order = f"op{updated}", updated
        return value.producer

    def read_all(self, values: list[_Value], scope: str = "") -> list[str]:
        """One op's reads: a tensor it reads through several variables is read, for all of them,
        as the latest pass-through any of them got (capture decides per op, not per operand). So
        a write still pending on it updates that value: the variable holding it is read first."""
        latest_held: dict[int, _Value] = {}
        for v in values:
            if v.tensor not in latest_held or v.order > latest_held[v.tensor].order:
                latest_held[v.tensor] = v
        for v in latest_held.values():
            self.read(v, scope)
        labels = [self.read(v, scope) for v in values]
        latest: dict[int, str] = {}
        for v, label in zip(values, labels):
            if v.tensor not in latest or _order(label) > _order(latest[v.tensor]):
                latest[v.tensor] = label
        return [latest[v.tensor] for v in values]

    def op(self, target: str, reads: list[str], scope: str = "", inplace: bool = False) -> int:
        self.truth.ops.append((target, tuple(reads)))
        self.truth.inplace.append(inplace)
        self.truth.op_scopes.append(scope)
        return len(self.truth.ops) - 1

    def new(self, k: int, slot: int = 0, storage: int | None = None, contiguous: bool = True) -> _Value:
        label = f"op{k}" if slot == 0 else f"op{k}.{slot}"
        return _Value(next(self.storages) if storage is None else storage, label, k, contiguous, next(self.tensors))

    def write(self, value: _Value, k: int) -> _Value:
        self.last_write[value.storage] = (k, f"op{k}", value.contiguous)
        for alias in self.pool:  # the tensor object was written: every variable holding it reads the write
            if alias.tensor == value.tensor:
                alias.producer, alias.order = f"op{k}", k
        value.producer, value.order = f"op{k}", k
        return value

    def call(self, path: str) -> None:
        self.truth.scopes.append((path, self.calls.get(path, 0)))
        self.calls[path] = self.calls.get(path, 0) + 1

    def step(self, s: Step) -> None:
        names = [f"v{i}" for i in s.operands]
        vals = [self.pool[i] for i in s.operands]
        out = f"v{len(self.pool)}"
        kind = s.kind
        if kind in ("relu", "tanh", "sigmoid"):
            self.emit(f"{out} = torch.{kind}({names[0]})")
            self.pool.append(self.new(self.op(f"torch.{kind}", [self.read(vals[0])])))
        elif kind in ("neg", "scale"):
            self.emit(f"{out} = -{names[0]}" if kind == "neg" else f"{out} = {names[0]} * 0.5")
            target = T + ("__neg__" if kind == "neg" else "__mul__")
            self.pool.append(self.new(self.op(target, [self.read(vals[0])])))
        elif kind in ("add", "mul", "matmul"):
            symbol = {"add": "+", "mul": "*", "matmul": "@"}[kind]
            self.emit(f"{out} = {names[0]} {symbol} {names[1]}")
            self.pool.append(self.new(self.op(f"{T}__{kind}__", self.read_all(vals))))
        elif kind == "maximum":
            self.emit(f"{out} = torch.maximum({names[0]}, {names[1]})")
            self.pool.append(self.new(self.op("torch.maximum", self.read_all(vals))))
        elif kind == "linear":
            path = f"lins.{s.choice}"
            self.emit(f"{out} = self.lins[{s.choice}]({names[0]})")
            self.call(path)
            reads = [self.read(vals[0], path), f"param:{path}.weight", f"param:{path}.bias"]
            self.pool.append(self.new(self.op("torch.nn.functional.linear", reads, scope=path)))
        elif kind == "mixer":
            self.emit(f"{out}, v{len(self.pool) + 1} = self.mixer({{'a': {names[0]}, 'b': {names[1]}}})")
            self.call("mixer")
            reads = self.read_all(vals, "mixer")
            total = self.op(T + "__add__", reads, scope="mixer")
            product = self.op(T + "__mul__", reads, scope="mixer")
            self.pool += [self.new(total), self.new(product)]
        elif kind == "act_inplace":
            self.emit(f"{out} = self.act({names[0]})")
            self.call("act")
            k = self.op("torch.nn.functional.relu", [self.read(vals[0], "act")], scope="act", inplace=True)
            self.pool.append(self.write(vals[0], k))
        elif kind in ("t", "transpose", "view", "unsqueeze_squeeze"):
            self.view(s, out, names[0], vals[0])
        elif kind == "flat":
            # reshape is a view of a contiguous tensor and a copy of any other
            self.emit(f"{out} = {names[0]}.reshape(-1).view(4, 4)")
            v = vals[0]
            k = self.op(T + "reshape", [self.read(v)])
            flat = self.new(k, storage=v.storage if v.contiguous else None)
            self.pool.append(self.new(self.op(T + "view", [self.read(flat)]), storage=flat.storage))
        elif kind in ("add_", "iadd"):
            rhs, rhs_read = self.operand_copy(names[1], vals[1], vals[0])
            reads = [self.read(vals[0]), rhs_read or self.read(vals[1])]  # the op reads in argument order
            if kind == "add_":
                self.emit(f"{out} = {names[0]}.add_({rhs})")
            else:
                self.emit(f"{names[0]} += {rhs}")
                self.emit(f"{out} = {names[0]}")
            target = T + ("add_" if kind == "add_" else "__iadd__")
            k = self.op(target, reads, inplace=True)
            self.pool.append(self.write(vals[0], k))
        elif kind in ("mul_", "relu_"):
            self.emit(f"{out} = {names[0]}.mul_(0.5)" if kind == "mul_" else f"{out} = torch.relu_({names[0]})")
            target = T + "mul_" if kind == "mul_" else "torch.relu_"
            self.pool.append(self.write(vals[0], self.op(target, [self.read(vals[0])], inplace=True)))
        elif kind == "setitem":
            lo, hi = s.choice, s.choice + 2
            g = self.op(T + "__getitem__", [self.read(vals[1])])
            rhs = f"{names[1]}[:, {lo}:{hi}]"
            rhs_read = f"op{g}"
            if vals[1].storage == vals[0].storage:
                rhs += ".clone()"
                rhs_read = f"op{self.op(T + 'clone', [rhs_read])}"
            self.emit(f"{names[0]}[:, {lo}:{hi}] = {rhs}")
            self.write(vals[0], self.op(T + "__setitem__", [self.read(vals[0]), rhs_read], inplace=True))
        elif kind == "slice_mul_":
            self.emit(f"{names[0]}[{s.choice}:{s.choice + 2}].mul_(2.0)")
            g = self.op(T + "__getitem__", [self.read(vals[0])])
            k = self.op(T + "mul_", [f"op{g}"], inplace=True)
            self.last_write[vals[0].storage] = (k, f"op{k}", None)  # through a slice: v reads it updated
        elif kind == "chunk_cat":
            self.emit(f"{out} = torch.cat({names[0]}.chunk(2, dim=1)[::-1], dim=1)")
            k = self.op(T + "chunk", [self.read(vals[0])])
            self.pool.append(self.new(self.op("torch.cat", [f"op{k}.1", f"op{k}"])))
        elif kind in ("dropout_eval", "identity"):
            path, target = ("drop", "torch.nn.functional.dropout") if kind == "dropout_eval" else ("ident", "torchatlas.identity")
            self.emit(f"{out} = self.{path}({names[0]})")
            self.call(path)
            v = vals[0]
            k = self.op(target, [self.read(v, path)], scope=path)
            # The call returns the same tensor object: readers of the new variable read through
            # the call, readers of the old one read what it was given.
            self.pool.append(_Value(v.storage, f"op{k}", k, v.contiguous, v.tensor))
        elif kind == "accumulate":
            self.emit(f"acc = acc + ({names[0]},)")
            self.emit(f"{out} = acc[-1]")
            self.accumulated.append(vals[0])
            # acc holds the tensor through every variable appended: read back, it is the latest
            # pass-through of it any of them got (capture follows the tuple, not its items).
            # Appending reads no data, so this must not call read(): a write through a slice
            # still pending on the tensor is made into an update by the op that next reads it,
            # in that op's module call.
            held = [v for v in self.accumulated if v.tensor == vals[0].tensor]
            latest = max(held, key=lambda v: v.order)
            self.pool.append(_Value(latest.storage, latest.producer, latest.order, latest.contiguous, latest.tensor))
        elif kind == "dropout_last":
            self.emit(f"{out} = self.tail({names[0]})")
            self.call("tail")
            made = self.op("torch.tanh", [self.read(vals[0], "tail")], scope="tail")
            self.call("tail.drop")
            k = self.op("torch.nn.functional.dropout", [f"op{made}"], scope="tail.drop")
            self.pool.append(self.new(k))
        elif kind == "ident_into_call":
            self.ident_into_call(out, names, vals)
        elif kind == "ident_rebound":
            self.emit(f"h = self.ident({names[0]})")
            self.emit("h = torch.tanh(h)")
            self.emit(f"{out} = {names[0]} + h")
            self.call("ident")
            passed = self.op("torchatlas.identity", [self.read(vals[0], "ident")], scope="ident")
            made = self.op("torch.tanh", [f"op{passed}"])
            self.pool.append(self.new(self.op(T + "__add__", [self.read(vals[0]), f"op{made}"])))
        elif kind == "hook_kept":
            # once the layer returns no variable holds the tensor it was given, only the hook's
            # list (as in a layer loop, ``h = layer(h)``)
            self.emit(f"h = torch.tanh({names[0]})")
            self.emit(f"{out} = self.hooked(h)")
            self.emit("del h")
            self.emit(f"v{len(self.pool) + 1} = self.hooked.kept[-1] * 0.5")
            given = self.op("torch.tanh", [self.read(vals[0])])
            self.call("hooked")
            self.call("hooked.norm")
            passed = self.op("torchatlas.identity", [f"op{given}"], scope="hooked.norm")
            self.call("hooked.proj")
            reads = [f"op{passed}", "param:hooked.proj.weight", "param:hooked.proj.bias"]
            made = self.op("torch.nn.functional.linear", reads, scope="hooked.proj")
            # the hook kept the tensor the layer was given: read from the hook's list (no variable
            # of this frame holds it there), it is its producer's value, not the Identity's
            kept = self.op(T + "__mul__", [f"op{given}"])
            self.pool += [self.new(made), self.new(kept)]
        elif kind == "second_chunk":
            self.emit(f"{out} = self.second({names[0]})")
            self.call("second")
            cat = self.op("torch.cat", [self.read(vals[0], "second")] * 2, scope="second")
            chunk = self.op(T + "chunk", [f"op{cat}"], scope="second")
            self.pool.append(self.new(chunk, slot=1, storage=next(self.storages)))
        elif kind == "stack_sum":
            self.emit(f"{out} = torch.stack([{names[0]}, {names[1]}]).sum(0)")
            k = self.op("torch.stack", self.read_all(vals))
            self.pool.append(self.new(self.op(T + "sum", [f"op{k}"])))
        else:
            raise ValueError(f"unknown step kind {kind!r}")

    def ident_into_call(self, out: str, names: list[str], vals: list[_Value]) -> None:
        self.emit(f"kw = {{'other': {names[1]}}}")
        if vals[0].tensor == vals[1].tensor:
            # one tensor as both operands: the gate's op reads it through both variables
            self.emit(f"{out} = self.gate({names[0]}, **kw)")
            self.call("gate")
            self.pool.append(self.new(self.op(T + "__mul__", self.read_all(vals, "gate"), scope="gate")))
            return
        self.emit(f"{out} = self.gate(self.ident({names[0]}), **kw)")
        self.call("ident")
        passed = self.op("torchatlas.identity", [self.read(vals[0], "ident")], scope="ident")
        self.call("gate")
        reads = [f"op{passed}", self.read(vals[1], "gate")]
        self.pool.append(self.new(self.op(T + "__mul__", reads, scope="gate")))

    def view(self, s: Step, out: str, name: str, v: _Value) -> None:
        code, target, flips = {
            "t": (".t()", ["t"], True),
            "transpose": (".transpose(0, 1)", ["transpose"], True),
            "view": (".view(4, 4)", ["view"], False),
            "unsqueeze_squeeze": (".unsqueeze(0).squeeze(0)", ["unsqueeze", "squeeze"], False),
        }[s.kind]
        self.emit(f"{out} = {name}{code}")
        read = self.read(v)
        for t in target:
            read = f"op{self.op(T + t, [read])}"
        k = int(read[2:])
        self.pool.append(self.new(k, storage=v.storage, contiguous=v.contiguous != flips))

    def operand_copy(self, name: str, value: _Value, written: _Value) -> tuple[str, str | None]:
        """An in-place op may not read memory it writes: such an operand is cloned first (its
        clone's label); any other is read by the op itself (None)."""
        if value.storage != written.storage:
            return name, None
        return f"{name}.clone()", f"op{self.op(T + 'clone', [self.read(value)])}"

    def finish(self, returned: tuple[int, ...]) -> None:
        main, *extra = returned
        self.emit(f"return {{'main': v{main}, 'extra': [{', '.join(f'v{i}' for i in extra)}]}}")
        # The return reads them all at once, as one op does.
        labels = self.read_all([self.pool[i] for i in returned])
        self.truth.outputs["output['main']"] = labels[0]
        for k, label in enumerate(labels[1:]):
            self.truth.outputs[f"output['extra'][{k}]"] = label


def _order(label: str) -> int:
    """The op index a label names (-1 for a leaf)."""
    return int(label[2:].partition(".")[0]) if label.startswith("op") else -1


_filenames = itertools.count()


def build(program: Program, seed: int = 0) -> RandomModel:
    """The model, fresh inputs and the true graph of ``program``."""
    sim = _Simulator()
    for s in program.steps:
        sim.step(s)
    sim.finish(program.returned)
    source = "\n".join(sim.lines) + "\n"
    filename = f"<torchatlas-randmodel-{next(_filenames)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    torch.manual_seed(seed)
    module = RandomNet(source, filename)
    args = (torch.randn(4, 4), {"y": torch.randn(4, 4), "zs": [torch.randn(4, 4)]})
    sim.truth.scopes.insert(0, ("", 0))
    return RandomModel(module, args, source, sim.truth)
