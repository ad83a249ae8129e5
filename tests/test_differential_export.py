"""Differential: leaf-module data flow equals torch.export's on transformers models.

torch.export (functional ATen graph, ``run_decompositions({})``) records which module
call each node ran in (``node.meta["nn_module_stack"]``). For every call of a leaf
module (Linear, Embedding, LayerNorm, activations...) both graphs must agree on which
leaf-module calls feed it, directly or through any number of ops outside leaf modules.
The ops themselves differ (ATen vs Python API), the flow between leaf modules must not.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn as nn

import torchatlas

transformers = pytest.importorskip("transformers")

LeafCall = tuple[str, int]  # (module path, call number)
# Leaf modules that return their input unchanged in eval mode: the capture records no op for them.
TRANSPARENT = {"Dropout", "Identity"}


def leaf_paths(model: nn.Module) -> set[str]:
    return {name for name, m in model.named_modules() if name and not any(True for _ in m.children())}


Graph = tuple[list[Any], Callable[[Any], LeafCall | None], Callable[[Any], list[Any]]]
"""Nodes in topological order, the leaf call each ran in, and the nodes each read."""


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


def captured_graph(model: nn.Module, args: tuple, kwargs: dict) -> Graph:
    ir = torchatlas.trace(model, args, kwargs).ir
    leaves = leaf_paths(model)

    def leaf_of(node_id: str) -> LeafCall | None:
        node = ir.node(node_id)
        if node.kind != "op":
            return None
        scope = ir.scope(node.scope)
        return (scope.path, scope.call) if scope.path in leaves else None

    return [n.id for n in ir.nodes], leaf_of, lambda i: [r.node for r in ir.node(i).inputs]


def exported_graph(model: nn.Module, args: tuple, kwargs: dict) -> Graph:
    program = torch.export.export(model, args, kwargs).run_decompositions({})
    leaves = leaf_paths(model)

    def leaf_of(node: torch.fx.Node) -> LeafCall | None:
        stack = node.meta.get("nn_module_stack") if node.op == "call_function" else None
        if not stack:
            return None
        key, (path, _cls) = list(stack.items())[-1]
        call = int(key.rpartition("@")[2]) if "@" in key else 0
        return (path, call) if path in leaves else None

    return list(program.graph.nodes), leaf_of, lambda n: n.all_input_nodes


def tiny(model_type: str, **overrides: Any) -> nn.Module:
    config = transformers.AutoConfig.for_model(model_type, **overrides)
    torch.manual_seed(0)
    return transformers.AutoModel.from_config(config).eval()


def llama() -> tuple[nn.Module, tuple, dict]:
    model = tiny(
        "llama", num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=1000,
    )
    return model, (torch.randint(0, 1000, (1, 8)),), {"use_cache": False}


def bert() -> tuple[nn.Module, tuple, dict]:
    model = tiny(
        "bert", num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4, vocab_size=1000,
    )
    ids = torch.randint(0, 1000, (1, 8))
    return model, (ids,), {"attention_mask": torch.ones_like(ids)}


def t5() -> tuple[nn.Module, tuple, dict]:
    model = tiny("t5", num_layers=2, num_decoder_layers=2, d_model=64, d_ff=128, d_kv=16, num_heads=4, vocab_size=1000)
    ids = torch.randint(0, 1000, (1, 8))
    return model, (ids,), {"decoder_input_ids": ids[:, :5], "use_cache": False}


def vit() -> tuple[nn.Module, tuple, dict]:
    model = tiny(
        "vit", num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4, image_size=32,
        patch_size=8,
    )
    return model, (torch.randn(1, 3, 32, 32),), {}


@pytest.mark.filterwarnings("ignore::FutureWarning")  # raised inside torch.export
@pytest.mark.parametrize(
    "make",
    [  # llama and t5 take 10-20 s each to export
        pytest.param(llama, marks=pytest.mark.slow),
        bert,
        pytest.param(t5, marks=pytest.mark.slow),
        vit,
    ],
    ids=lambda f: f.__name__,
)
def test_leaf_module_flow_equals_torch_export(make) -> None:
    model, args, kwargs = make()
    started = time.perf_counter()
    captured, exported = captured_graph(model, args, kwargs), exported_graph(model, args, kwargs)
    # a leaf call only one side saw ops in must be a module that passes its input through
    one_sided = frozenset(leaf_flow(captured)) ^ frozenset(leaf_flow(exported))
    assert {type(model.get_submodule(path)).__name__ for path, _ in one_sided} <= TRANSPARENT
    got = leaf_flow(captured, transparent=one_sided)
    assert got == leaf_flow(exported, transparent=one_sided)
    assert len(got) >= 10, "the model should have many leaf-module calls"
    assert time.perf_counter() - started < 120


def test_leaf_flow_passes_through_ops_outside_leaf_modules() -> None:
    """The comparison itself: a value that goes a -> (op) -> (op) -> b makes a feed b."""
    edges = {"a1": [], "a2": ["a1"], "x": ["a2"], "y": ["x", "in"], "b1": ["y"], "c1": ["a1", "b1"]}
    leaf = {"a1": ("a", 0), "a2": ("a", 0), "b1": ("b", 0), "c1": ("c", 0)}
    graph = (list(edges), leaf.get, edges.__getitem__)
    assert leaf_flow(graph) == {("a", 0): set(), ("b", 0): {("a", 0)}, ("c", 0): {("a", 0), ("b", 0)}}
    assert leaf_flow(graph, transparent=frozenset({("b", 0)})) == {("a", 0): set(), ("c", 0): {("a", 0)}}
