"""The reference a graph is checked against: torch.export's functional ATen graph.

Both graphs are reduced to their *leaf-module data flow*: for every call of a leaf module
(one with no children: Linear, Embedding, a user's ``Scale``), the set of leaf-module
calls whose values reach it, directly or through any number of ops outside leaf modules.
The ops differ (ATen against the Python API), the flow between leaf modules must not.
Writes count as data flow: export's functional form turns ``x.add_(y)`` into a new value
its later readers read, and torchatlas records the reader reading the write.

Module calls that return their input unchanged (eval ``Dropout``, ``Identity``) have a
pass-through node in torchatlas and nothing in export. Export is run on the model with each
leaf module whose every call passed its input through swapped for one that clones it
(:func:`cloning_passthroughs`): export then has a node in that call exactly where its
result flows, and who reads the pass-through is checked like any leaf call. A call of a
module that passed through only sometimes is looked through on both sides.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

import torchatlas
from torchatlas._capture import capture
from torchatlas._ops import is_view

LeafCall = tuple[str, int]  # (module path, call number)
Graph = tuple[list[Any], Callable[[Any], LeafCall | None], Callable[[Any], list[Any]]]
"""Nodes in topological order, the leaf call each ran in, and the nodes each read."""
COMPILE_WRAPPER = "._orig_mod"  # torch.compile's OptimizedModule: transparent, its module is the call


def leaf_paths(model: nn.Module) -> set[str]:
    return {
        name.replace(COMPILE_WRAPPER, "")
        for name, m in model.named_modules() if name and not any(True for _ in m.children())
    }


def leaf_flow(graph: Graph, transparent: frozenset[LeafCall] = frozenset()) -> dict[LeafCall, set[LeafCall]]:
    """Leaf call -> the leaf calls whose values reach it through ops outside leaf modules.

    Calls in ``transparent`` count as ops outside leaf modules.
    """
    nodes, leaf_call, inputs_of = graph

    def leaf_of(node: Any) -> LeafCall | None:
        call = leaf_call(node)
        return None if call in transparent else call

    reach: dict[Any, frozenset[LeafCall]] = {}
    flow: dict[LeafCall, set[LeafCall]] = {}
    for node in nodes:
        mine = leaf_of(node)
        upstream: set[LeafCall] = set()
        for src in inputs_of(node):
            if mine is not None and leaf_of(src) == mine:
                continue  # inside the same call
            upstream |= reach.get(src, frozenset())
        if mine is None:
            reach[node] = frozenset(upstream)
        else:
            reach[node] = frozenset({mine})
            flow.setdefault(mine, set()).update(upstream)
    return flow


SIZED_LIKE_VIEWS = frozenset({"torch.Tensor.reshape_as", "torch.Tensor.view_as", "torch.Tensor.expand_as"})
"""Views sized like another tensor, which export writes as a view with those sizes."""


def captured_graph(ir: torchatlas.GraphIR, leaves: set[str]) -> Graph:
    """Ops with no path to an output are left out, as export removes them; shape-only reads
    count as paths here, as they are inputs in export's graph."""

    def leaf_of(node_id: str) -> LeafCall | None:
        node = ir.node(node_id)
        if node.kind != "op":
            return None
        scope = ir.scope(node.scope)
        return (scope.path, scope.call) if scope.path in leaves else None

    # Shape-only reads (``like`` in ``zeros_like(like)``) are edges in export's graph: compare them
    # too. Not a ``*_as`` view's: export decomposes ``y.reshape_as(x)`` to a view of ``y`` with x's
    # sizes written in (LeViT's ``bn(x.flatten(0, 1)).reshape_as(x)``).
    def reads(node_id: str) -> list[str]:
        node = ir.node(node_id)
        shaped = () if node.target in SIZED_LIKE_VIEWS else node.shape_inputs
        return [r.node for r in (*node.inputs, *shaped)]

    def writes_state(node: Any) -> bool:
        """An in-place op on an input, parameter or buffer (through views): export keeps it as
        a mutation the program returns. One on a tensor the forward made is dead there unless read
        (DAB-DETR's position embedding scales ``arange`` in place in every call, and its model reads
        only the last call's result)."""
        while node.kind == "op" and node.inputs and (node.inplace or is_view(node.target)):
            node = ir.node(node.inputs[0].node)
        return node.kind != "op"

    live = {n.id for n in ir.nodes if n.kind == "output" or (n.inplace and writes_state(n))}
    for node in reversed(ir.nodes):
        if node.id in live:
            live.update(reads(node.id))
    return [n.id for n in ir.nodes if n.id in live], leaf_of, reads


def shared_paths(model: nn.Module) -> dict[str, str]:
    """Path -> the first path of its module, for a module registered under several (OpenAI GPT's
    one ``gelu_new`` in every layer): torchatlas names its calls by the first, numbered in turn."""
    first: dict[int, str] = {}
    aliases = {}
    for name, module in model.named_modules(remove_duplicate=False):
        name = name.replace(COMPILE_WRAPPER, "")
        if first.setdefault(id(module), name) != name:
            aliases[name] = first[id(module)]
    return aliases


def exported_graph(
    program: torch.export.ExportedProgram, leaves: set[str], aliases: dict[str, str] | None = None
) -> Graph:
    aliases = aliases or {}
    shared = set(aliases.values())
    turns: dict[str, list[str]] = {}  # a shared module -> its calls' stack keys, in the order they ran

    def leaf_of(node: torch.fx.Node) -> LeafCall | None:
        stack = node.meta.get("nn_module_stack") if node.op == "call_function" else None
        if not stack:
            return None
        key, (path, _cls) = list(stack.items())[-1]
        path = path.replace(COMPILE_WRAPPER, "")
        path = aliases.get(path, path)
        if path not in leaves:
            return None
        if path in shared:
            keys = turns.setdefault(path, [])
            if key not in keys:
                keys.append(key)
            return path, keys.index(key)
        return path, int(key.rpartition("@")[2]) if "@" in key else 0

    # As on torchatlas's side, only what reaches an output: export keeps the checks it adds
    # (``_assert_tensor_metadata`` after a ``.to``) though nothing reads them.
    live = {n for n in program.graph.nodes if n.op == "output"}
    for node in reversed(program.graph.nodes):
        if node in live:
            live.update(_read_by(node))
    return [n for n in program.graph.nodes if n in live], leaf_of, _read_by


# Conversions to another tensor's dtype: when that is already the dtype, eager returns the
# very tensor it was given and torchatlas records no op, while export keeps a node that
# reads the other tensor and takes every later read of the tensor, even one through a name
# bound before the conversion (Funnel's decoder reads the mask its encoder ``type_as``-ed).
LIKE_CONVERSIONS = frozenset({"aten.type_as.default", "aten.to.other"})


def _read_by(node: torch.fx.Node) -> list[torch.fx.Node]:
    """The nodes ``node`` reads; a conversion that changed nothing reads only its input."""
    if str(node.target) in LIKE_CONVERSIONS and isinstance(node.args[0], torch.fx.Node):
        given, made = node.args[0].meta.get("val"), node.meta.get("val")
        if isinstance(given, torch.Tensor) and isinstance(made, torch.Tensor) and given.dtype == made.dtype:
            return [node.args[0]]
    return node.all_input_nodes


VALUE_READS = frozenset({"aten.item.default", "aten._local_scalar_dense.default"})


def value_read_calls(graph: Graph, transparent: frozenset[LeafCall] = frozenset()) -> set[LeafCall]:
    """The leaf calls whose values reach an op that hands a tensor's value to Python (``item``):
    export makes a size set by that value a graph edge (JetMoE's ``expert_size.tolist()`` splits
    the experts' inputs), where the trace records the read, not an edge."""
    nodes, leaf_call, inputs_of = graph
    reach: dict[Any, set[LeafCall]] = {}
    found: set[LeafCall] = set()
    for node in nodes:
        mine = leaf_call(node)
        reach[node] = {mine} if mine is not None and mine not in transparent else set()
        for src in inputs_of(node):
            reach[node] |= reach.get(src, set())
        if str(getattr(node, "target", "")) in VALUE_READS:
            found |= reach[node]
    return found


def export_reasons(*programs: torch.export.ExportedProgram) -> list[str]:
    """Ways export's graph departs from the module calls as they ran, for reasons of its own.
    Read before decompositions too: they inline a higher-order op's ops, stacks lost (HRM's
    ``torch.no_grad()`` cycles)."""
    reasons = []
    hops = sorted({
        str(n.target) for p in programs for n in p.graph.nodes
        if isinstance(n.target, torch._ops.HigherOrderOperator) or "higher_order" in str(n.target)
    })
    if hops:
        reasons.append(f"export wraps regions in higher-order ops ({', '.join(hops)}) whose ops lose their module stack")
    return reasons


class Clone(nn.Module):
    """A pass-through call as export should see it: a node where its result goes."""

    def forward(self, x: Any, *args: Any, **kwargs: Any) -> Any:
        return x.clone()


def passing_leaves(ir: torchatlas.GraphIR, leaves: set[str]) -> set[str]:
    """Leaf modules each of whose calls returned its input unchanged. A call that returned a
    value made before it but not given to it (a parameter, a cached tensor) is no clone of its
    input: its pass-through node stays, read through on both sides."""
    given = {}
    for node in ir.ops():
        if node.meta.get("passthrough") and node.inputs:
            given.setdefault(node.scope, []).append(node.inputs[0] in ir.scope(node.scope).inputs)
    calls: dict[str, list[bool]] = {}
    for scope in ir.scopes:
        calls.setdefault(scope.path, []).append(bool(scope.meta.get("passthrough")) and all(given.get(scope.id, [False])))
    return {path for path, passed in calls.items() if path in leaves and all(passed)}


@contextlib.contextmanager
def cloning_passthroughs(model: nn.Module, paths: set[str]) -> Iterator[None]:
    """``model`` with its modules at ``paths`` swapped for :class:`Clone` (same paths), put back after."""
    swapped: list[tuple[nn.Module, str, nn.Module]] = []
    try:
        for name, module in list(model.named_modules()):
            for key, child in list(module._modules.items()):
                path = f"{name}.{key}" if name else key
                if path.replace(COMPILE_WRAPPER, "") in paths and child is not None:
                    swapped.append((module, key, child))
                    module._modules[key] = Clone()
        yield
    finally:
        for module, key, child in reversed(swapped):
            module._modules[key] = child


@dataclasses.dataclass
class Verdict:
    """One model's result. ``status``: ``agrees``, ``disagrees``, ``named`` (disagrees for a
    reason of export's own, given in ``detail``), ``no-oracle`` (export failed; traced with
    identical outputs), ``fails`` (torchatlas itself is wrong or failed) or ``skipped`` (the
    corpus cannot run the model here: a missing package, inputs it cannot make)."""

    name: str
    status: str
    detail: str = ""


def _flatten(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = [getattr(value, f.name) for f in dataclasses.fields(value)]
    elif isinstance(value, dict):
        value = list(value.values())
    elif hasattr(value, "to_tuple"):  # transformers' ModelOutput
        value = value.to_tuple()
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _flatten(item)]
    return []


# Eager, and so the trace, runs these fused inference kernels of nn.TransformerEncoderLayer and
# nn.MultiheadAttention in eval under no_grad; export, tracing under a mode, runs their unfused
# path, module call by module call (linear1, dropout...), which the fused kernel never makes.
FUSED_KERNELS = frozenset({"torch._transformer_encoder_layer_fwd", "torch._native_multi_head_attention"})


def _same_outputs(model: nn.Module, args: tuple, kwargs: dict) -> tuple[torchatlas.GraphIR, str]:
    """Trace once; the outputs must be bit-identical to an eager forward from the same seed."""
    torch.manual_seed(0)
    with torch.no_grad():
        eager = _flatten(model(*args, **kwargs))
    torch.manual_seed(0)
    with torch.no_grad():
        result = capture(model, args, kwargs)
    traced = _flatten(result.output)
    if len(eager) != len(traced):
        return result.ir, "outputs differ from an eager forward"
    if not all(torch.equal(a, b) for a, b in zip(eager, traced)):
        return result.ir, "outputs differ from an eager forward"
    return result.ir, ""


def _unseen_module_calls(ir: torchatlas.GraphIR) -> list[str]:
    """Module calls with no node in them or below: every call must be on the data path.
    A call that ran no op but returned a tensor is on it through that tensor, which was made
    before the call began (an ``lru_cache``d method's second call, as MaskFormer's position
    embedder, returns the first call's result)."""
    holding = {n.scope for n in ir.nodes if n.kind == "op"}
    for scope in reversed(ir.scopes):
        if scope.id in holding and scope.parent is not None:
            holding.add(scope.parent)
    return [s.path for s in ir.scopes if s.parent is not None and s.id not in holding and not s.outputs]


def _views_filed_under_their_reader(ir: torchatlas.GraphIR, only_ours: set[LeafCall]) -> frozenset[LeafCall]:
    """The leaf calls only torchatlas saw, if each ran nothing but view ops: export's
    decompositions re-trace such a view where it is used (timm's ``flatten`` before
    ``classifier`` is filed under ``classifier``)."""
    ops: dict[LeafCall, list[str | None]] = {}
    for node in ir.ops():
        scope = ir.scope(node.scope)
        ops.setdefault((scope.path, scope.call), []).append(node.target)
    viewing = frozenset(k for k in only_ours if ops.get(k) and all(is_view(t) for t in ops[k]))
    return viewing if viewing == only_ours else frozenset()


def _stacks_cut_short(program: torch.export.ExportedProgram, only_ours: set[LeafCall]) -> set[str]:
    """The modules export's stacks stop at, if every leaf call only torchatlas saw lies below
    one that export files ops under: a module running its submodules inside a
    ``torch.autograd.Function`` (Reformer's ``_ReversibleFunction``) keeps their ops, and export
    files the module calls after it, up to its caller's end, under that caller."""
    if not only_ours:
        return set()
    innermost = set()
    for node in program.graph.nodes:
        stack = node.meta.get("nn_module_stack") if node.op == "call_function" else None
        if stack:
            innermost.add(list(stack.values())[-1][0].replace(COMPILE_WRAPPER, ""))
    cut = set()
    for path, _ in only_ours:
        above = [p for p in innermost if p and path.startswith(p + ".")]
        if not above:
            return set()
        cut.add(max(above, key=len))
    return cut


def _agree_seeing_through(captured: Graph, exported: Graph, transparent: frozenset[LeafCall], calls: set[LeafCall]) -> bool:
    """Whether the flows agree once ``calls`` count as ops outside leaf modules on both sides."""
    through = transparent | frozenset(calls)
    return leaf_flow(captured, through) == leaf_flow(exported, through)


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:160] if lines else ""


def check(name: str, model: nn.Module, args: tuple, kwargs: dict) -> Verdict:
    try:
        ir, mismatch = _same_outputs(model, args, kwargs)
    except Exception as exc:  # torchatlas failed where eager ran
        return Verdict(name, "fails", f"trace failed: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
    if mismatch:
        return Verdict(name, "fails", mismatch)
    unseen = _unseen_module_calls(ir)
    if unseen:
        return Verdict(name, "fails", f"module calls with no node: {', '.join(unseen[:5])}")
    leaves = leaf_paths(model)
    cloned = passing_leaves(ir, leaves)
    try:
        with cloning_passthroughs(model, cloned):
            traced = torch.export.export(model, args, kwargs)
            program = traced.run_decompositions({})
    except Exception as exc:
        return Verdict(name, "no-oracle", f"export fails: {type(exc).__name__}: {_first_line(exc)}")
    captured, exported = captured_graph(ir, leaves), exported_graph(program, leaves, shared_paths(model))
    passthrough = frozenset(
        (ir.scope(n.scope).path, ir.scope(n.scope).call)
        for n in ir.ops() if n.meta.get("passthrough") and ir.scope(n.scope).path not in cloned
    )
    got, want = leaf_flow(captured, passthrough), leaf_flow(exported, passthrough)
    problems = []
    for side, calls in (("torchatlas", set(got) - set(want)), ("export", set(want) - set(got))):
        if calls:
            problems.append(f"leaf calls only {side} saw: {sorted(calls)[:4]}")
    wrong = sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))
    if wrong:
        k = wrong[0]
        problems.append(
            f"{len(wrong)} leaf calls read differently, first {k}: torchatlas {sorted(got.get(k, ()))} "
            f"export {sorted(want.get(k, ()))}"
        )
    if not problems:
        return Verdict(name, "agrees")
    only_ours = set(got) - set(want)
    # A region's ops losing their stacks leaves calls only torchatlas saw: that, or no reason.
    reasons = export_reasons(traced, program) if only_ours else []
    moved = _views_filed_under_their_reader(ir, only_ours)
    if moved and _agree_seeing_through(captured, exported, passthrough, moved):
        reasons.append(
            "export files the view op of a call that ran only views (nn.Flatten) under the call that reads it"
            f" ({', '.join(p for p, _ in sorted(moved)[:3])})"
        )
    cut = _stacks_cut_short(program, only_ours)
    if cut and _agree_seeing_through(captured, exported, passthrough, only_ours):
        reasons.append(
            "export's module stack stops short of leaf calls that ran, filing their ops under a module above"
            " (inside a torch.autograd.Function, as Reformer's reversible layers; in a no_grad region, as"
            f" PE Audio's DAC encoder): {', '.join(sorted(cut)[:3])}"
        )
    read = value_read_calls(exported, passthrough)
    only_reads_lacking = all(got.get(k, set()) <= want.get(k, set()) <= got.get(k, set()) | read for k in wrong)
    if wrong and len(problems) == 1 and only_reads_lacking:
        lacking = sorted(set().union(*(want.get(k, set()) - got.get(k, set()) for k in wrong)))
        reasons.append(
            "export carries the values Python read (item, tolist) into the ops they size as edges, where"
            f" torchatlas records a read: the only reads it lacks are of {lacking[:3]}"
        )
    fused = sorted({n.target for n in ir.ops() if n.target in FUSED_KERNELS})
    if fused:
        reasons.append(f"export runs the unfused path of what eager ran as {', '.join(fused)}")
    if reasons:
        return Verdict(name, "named", "; ".join(reasons) + " (" + "; ".join(problems) + ")")
    return Verdict(name, "disagrees", "; ".join(problems))
