"""A pass-through call (eval Dropout, Identity) is read through only by the readers that got
its result; every other reader of the same tensor object reads its real producer.

The oracle is torch.export with each pass-through module (every leaf module whose calls all
returned their input) swapped for one that clones: export then has a node in that module
call exactly where the result flows (see ``passthrough_flow``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.nn as nn

import torchatlas

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from corpus._oracle import (  # noqa: E402
    captured_graph,
    cloning_passthroughs,
    exported_graph,
    leaf_flow,
    leaf_paths,
    passing_leaves,
)

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")  # raised inside torch.export


def passthrough_flow(model: nn.Module, *args: torch.Tensor) -> tuple[dict, dict]:
    """(torchatlas's, export's) leaf-module data flow, pass-through calls as leaves on both
    sides: every leaf module whose calls all returned their input (eval Dropout, Identity,
    DropPath) clones while export runs (the corpus's oracle, ``bench/corpus/_oracle.py``)."""
    model = model.eval()
    graph = torchatlas.trace(model, args)
    leaves = leaf_paths(model)
    got = leaf_flow(captured_graph(graph.ir, leaves))
    with cloning_passthroughs(model, passing_leaves(graph.ir, leaves)):
        program = torch.export.export(model, args).run_decompositions({})
    want = leaf_flow(exported_graph(program, leaves))
    return got, want


def reads(flow: dict, path: str) -> set[str]:
    return {p for p, _ in flow[(path, 0)]}


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.drop, self.lin = nn.Dropout(0.0), nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(self.drop(x))  # drop returns x itself in eval mode


class OtherBranch(nn.Module):
    """The issue's S1: the pass-through sits inside the other branch of a residual."""

    def __init__(self) -> None:
        super().__init__()
        self.pre, self.block, self.short = nn.Linear(4, 4), Block(), nn.Linear(4, 4)

    def forward(self, x):
        x = self.pre(x)
        return self.block(x) + self.short(x)  # short reads x: pre's output


class OuterScope(nn.Module):
    """The pass-through runs in the outer scope; a nested call gets it, a sibling does not."""

    def __init__(self) -> None:
        super().__init__()
        self.pre, self.drop, self.inner, self.short = nn.Linear(4, 4), nn.Dropout(0.1), Inner(), nn.Linear(4, 4)

    def forward(self, x):
        x = self.pre(x)
        y = self.drop(x)
        return self.inner(y) + self.short(x)


class Inner(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x) * 2


class Returns(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        return self.drop(x)


class ReturnedByEnclosing(nn.Module):
    """The enclosing call returns the pass-through: its caller's reader of that result reads
    through it; the caller's other reader of the same tensor does not."""

    def __init__(self) -> None:
        super().__init__()
        self.pre, self.block, self.lin, self.short = nn.Linear(4, 4), Returns(), nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x):
        x = self.pre(x)
        return self.lin(self.block(x)) + self.short(x)


class SameScope(nn.Module):
    """MetaFormer's ``x = res_scale(x) + mlp(norm(x))`` with an Identity res_scale: the norm reads x."""

    def __init__(self) -> None:
        super().__init__()
        self.pre, self.res_scale, self.norm, self.mlp = nn.Linear(4, 4), nn.Identity(), nn.LayerNorm(4), nn.Linear(4, 4)
        self.post = nn.Linear(4, 4)

    def forward(self, x):
        x = self.pre(x)
        x = self.res_scale(x) + self.mlp(self.norm(x))
        return self.post(x)


class Reassigned(nn.Module):
    """``x = drop(x)``: every later reader of x got the result."""

    def __init__(self) -> None:
        super().__init__()
        self.pre, self.drop, self.a, self.b = nn.Linear(4, 4), nn.Dropout(0.1), nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x):
        x = self.drop(self.pre(x))
        return self.a(x) + self.b(x)


class InSequential(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.seq = nn.Sequential(nn.Linear(4, 4), nn.Identity(), nn.Dropout(0.1), nn.Linear(4, 4))
        self.side = nn.Linear(4, 4)

    def forward(self, x):
        h = self.seq[0](x)
        return self.seq[3](self.seq[2](self.seq[1](h))) + self.side(h)


class Basic(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Linear(4, 4)

    def forward(self, x, shortcut=None):
        if shortcut is None:
            shortcut = x
        out = self.conv1(x)
        return out + shortcut


class Tree(nn.Module):
    """timm's DlaTree: two pass-through calls' results and the input go to one call, whose
    body reads its parameters apart (``conv1(x)``, ``+ shortcut``)."""

    def __init__(self) -> None:
        super().__init__()
        self.pre, self.downsample, self.project, self.tree1 = nn.Linear(4, 4), nn.Identity(), nn.Identity(), Basic()

    def forward(self, x):
        x = self.pre(x)
        bottom = self.downsample(x)
        shortcut = self.project(bottom)
        return self.tree1(x, shortcut)


class HelperReturns(nn.Module):
    """timm's ``x = self.forward_features(x)``: a helper method, no module call, returns the
    pass-through's result (Xception's Identity ``act``); a helper that does not return it
    hands the caller nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.pre, self.act, self.pool = nn.Linear(4, 4), nn.Identity(), nn.Linear(4, 4)
        self.drop, self.lin, self.side = nn.Dropout(0.1), nn.Linear(4, 4), nn.Linear(4, 4)

    def features(self, x):
        x = self.pre(x)
        x = self.act(x)
        return x

    def branch(self, x):
        y = self.drop(x)
        return self.lin(y)

    def forward(self, x):
        x = self.features(x)
        return self.pool(x) + self.branch(x) + self.side(x)


MODELS = [OtherBranch, OuterScope, ReturnedByEnclosing, SameScope, Reassigned, InSequential, Tree, HelperReturns]


@pytest.mark.parametrize("make", MODELS, ids=lambda m: m.__name__)
def test_passthrough_flow_equals_export_with_clones(make) -> None:
    torch.manual_seed(0)
    got, want = passthrough_flow(make(), torch.randn(2, 4))
    assert got == want


def test_other_branch_reads_the_real_producer() -> None:
    got, _ = passthrough_flow(OtherBranch(), torch.randn(2, 4))
    assert reads(got, "short") == {"pre"}
    assert reads(got, "block.lin") == {"block.drop"}
    tree = torchatlas.trace(OtherBranch().eval(), (torch.randn(2, 4),)).tree()
    assert "also returned" not in tree


def test_same_scope_reader_of_the_old_variable_reads_the_producer() -> None:
    got, _ = passthrough_flow(SameScope(), torch.randn(2, 4))
    assert reads(got, "norm") == {"pre"}
    assert reads(got, "post") == {"res_scale", "mlp"}


def test_a_sequential_reads_through_its_pass_through_steps() -> None:
    got, _ = passthrough_flow(InSequential(), torch.randn(2, 4))
    assert reads(got, "seq.3") == {"seq.2"} and reads(got, "seq.2") == {"seq.1"}
    assert reads(got, "side") == {"seq.0"}


def test_a_call_given_the_result_and_the_input_reads_each_as_its_parameter() -> None:
    got, _ = passthrough_flow(Tree(), torch.randn(2, 4))
    assert reads(got, "tree1.conv1") == {"pre"}


def test_aten_level_agrees() -> None:
    graph = torchatlas.trace(OtherBranch().eval(), (torch.randn(2, 4),), level="aten")
    ir = graph.ir
    by_path = {}
    for node in ir.ops():
        by_path.setdefault(ir.scope(node.scope).path, []).append(node)
    first_short = by_path["short"][0]
    producers = {ir.scope(ir.node(r.node).scope).path for n in by_path["short"] for r in n.inputs}
    assert "block.drop" not in producers and "pre" in producers, first_short


def test_a_readers_frames_are_walked_only_as_far_as_the_frame_asked_for() -> None:
    from torchatlas._capture._passthrough import _Frames

    top = sys._getframe(0)
    frames = _Frames(top)
    assert frames.get(id(top)) is top and frames.chain == [top]  # the newest frame: nothing more walked
    parent = top.f_back
    assert frames.get(id(parent)) is parent and frames.chain == [top, parent]
    assert frames.get(id(object())) is None  # not a running frame: the whole stack was walked for it
    assert frames.chain[-1].f_back is None and len(frames.chain) > 2


# -- issue 38: results passed on after the call ---------------------------------------------


class Embeddings(nn.Module):
    """DeBERTa's embeddings: the Dropout's result is stored under the old name and returned."""

    def __init__(self) -> None:
        super().__init__()
        self.norm, self.dropout = nn.LayerNorm(4), nn.Dropout(0.1)

    def forward(self, x):
        embeddings = self.norm(x)
        embeddings = embeddings * 2
        embeddings = self.dropout(embeddings)
        return embeddings


class Encoder(nn.Module):
    """Renames its parameter before the layers read it (``next_kv = hidden_states``), is given a
    mask it reads as another parameter, and accumulates every hidden state in a tuple."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])

    def forward(self, hidden_states, mask):
        all_hidden_states = (hidden_states,)
        next_kv = hidden_states
        for layer in self.layers:
            next_kv = layer(next_kv) * mask
            all_hidden_states = all_hidden_states + (next_kv,)
        return next_kv, all_hidden_states


class PassedOn(nn.Module):
    """The result passed on through a variable, a call's argument, a tuple and a return."""

    def __init__(self) -> None:
        super().__init__()
        self.embeddings, self.encoder, self.mask = Embeddings(), Encoder(), nn.Linear(4, 4)
        self.head = nn.Linear(4, 4)

    def forward(self, x):
        embedding_output = self.embeddings(x)
        last, hidden = self.encoder(embedding_output, self.mask(x))
        return self.head(last) + self.head(hidden[0])


_COLLECTING: list | None = None
"""transformers keeps its collector in a context variable the hooks read."""


def _keep_first_argument(module, args, output) -> None:
    if _COLLECTING is not None:
        _COLLECTING.append(args[0])


class Collected(nn.Module):
    """transformers' output capturing: a forward hook keeps the first layer's argument (the
    embeddings' Dropout result) in a list the model returns; nothing in the code returns it."""

    def __init__(self) -> None:
        super().__init__()
        self.embeddings, self.layer, self.head = Embeddings(), nn.Linear(4, 4), nn.Linear(4, 4)
        self.layer.register_forward_hook(_keep_first_argument)

    def forward(self, x):
        global _COLLECTING
        _COLLECTING = []
        try:
            h = self.embeddings(x)
            out = self.head(self.layer(h))
            return out, _COLLECTING[0]
        finally:
            _COLLECTING = None


class TupleAssigned(nn.Module):
    """timm's attention: ``q, k = self.q_norm(q), self.k_norm(k)`` with Identity norms."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv, self.q_norm, self.k_norm, self.out = nn.Linear(4, 8), nn.Identity(), nn.Identity(), nn.Linear(4, 4)

    def forward(self, x):
        q, k = self.qkv(x).chunk(2, dim=-1)
        q, k = self.q_norm(q), self.k_norm(k)
        return self.out(q * k)


class Fuse(nn.Module):
    """HRNet's fuse layers: in a loop, an Identity's result is consumed inline, and the next
    turn's call at the same line reads the branch it was given."""

    def __init__(self) -> None:
        super().__init__()
        self.branches = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])
        self.fuse = nn.ModuleList([
            nn.ModuleList([nn.Identity(), nn.Linear(4, 4)]), nn.ModuleList([nn.Linear(4, 4), nn.Identity()]),
        ])

    def forward(self, x):
        x = [x, x * 2]
        for i, branch in enumerate(self.branches):
            x[i] = branch(x[i])
        fused = []
        for outer in self.fuse:
            y = None
            for j, f in enumerate(outer):
                if y is None:
                    y = f(x[j])
                else:
                    y = y + f(x[j])
            fused.append(y)
        return fused[0] + fused[1]


class Rebound(nn.Module):
    """Two pass-throughs of one tensor; the block returns the first's result under another
    variable (``c = a``) or out of a tuple it was appended to (found by hypothesis)."""

    def __init__(self, through_tuple: bool = False) -> None:
        super().__init__()
        self.through_tuple = through_tuple
        self.first, self.second = nn.Dropout(0.5), nn.Identity()

    def forward(self, x):
        acc = ()
        a = self.first(x)
        b = self.second(x)  # noqa: F841 (the second pass-through is the latest; it is not returned)
        if self.through_tuple:
            acc = acc + (a,)
            return acc[-1]
        c = a
        return c


class ReturnsRebound(nn.Module):
    def __init__(self, through_tuple: bool = False) -> None:
        super().__init__()
        self.block, self.head = Rebound(through_tuple), nn.Linear(4, 4)

    def forward(self, x):
        return self.head(self.block(x * 2))


class ReturnsReboundThroughATuple(ReturnsRebound):
    def __init__(self) -> None:
        super().__init__(through_tuple=True)


class KeepsTheOriginal(nn.Module):
    """Runs an Identity on a tensor but returns the tensor it gave it, out of a tuple."""

    def __init__(self) -> None:
        super().__init__()
        self.first, self.ident = nn.Linear(4, 4), nn.Identity()

    def forward(self, x):
        h = self.first(x)
        b = self.ident(h)  # noqa: F841
        acc = ()
        acc = acc + (h,)
        return acc[-1]


class ReturnsTheOriginal(nn.Module):
    """Its caller (and the head it feeds) got the Linear's value, not the Identity's (found by
    hypothesis with the random model nested in a wrapper)."""

    def __init__(self) -> None:
        super().__init__()
        self.inner, self.head = KeepsTheOriginal(), nn.Linear(4, 4)

    def forward(self, x):
        out = self.inner(x)
        return self.head(out), out


PASSED_ON = [
    PassedOn, Collected, TupleAssigned, Fuse, ReturnsRebound, ReturnsReboundThroughATuple, ReturnsTheOriginal,
]


@pytest.mark.parametrize("make", PASSED_ON, ids=lambda m: m.__name__)
def test_a_result_passed_on_is_read_through_the_call(make) -> None:
    torch.manual_seed(0)
    got, want = passthrough_flow(make(), torch.randn(2, 4))
    assert got == want


def test_an_encoder_given_the_result_reads_it_under_its_own_names() -> None:
    got, _ = passthrough_flow(PassedOn(), torch.randn(2, 4))
    assert reads(got, "encoder.layers.0") == {"embeddings.dropout"}
    assert {p for p, _ in got[("head", 1)]} == {"embeddings.dropout"}  # hidden[0], through the tuple
    tree = torchatlas.trace(PassedOn().eval(), (torch.randn(2, 4),)).tree()
    assert "also returned" not in tree


@pytest.mark.parametrize("through_tuple", [False, True], ids=["variable", "tuple"])
def test_the_models_result_is_the_pass_through_it_returns_under_another_name(through_tuple: bool) -> None:
    ir = torchatlas.trace(Rebound(through_tuple).eval(), (torch.randn(2, 4),)).ir
    (returned,) = [ir.node(r.node) for n in ir.nodes if n.kind == "output" for r in n.inputs]
    assert ir.scope(returned.scope).path == "first"


def test_a_caller_given_what_a_pass_through_was_given_reads_that() -> None:
    got, _ = passthrough_flow(ReturnsTheOriginal(), torch.randn(2, 4))
    assert reads(got, "head") == {"inner.first"}
    ir = torchatlas.trace(ReturnsTheOriginal().eval(), (torch.randn(2, 4),)).ir
    returned = [ir.node(r.node) for n in ir.nodes if n.kind == "output" for r in n.inputs]
    assert [ir.scope(n.scope).path for n in returned] == ["head", "inner.first"]


def test_a_hooks_list_returns_the_result() -> None:
    graph = torchatlas.trace(Collected().eval(), (torch.randn(2, 4),))
    ir = graph.ir
    outputs = [ir.node(r.node) for n in ir.nodes if n.kind == "output" for r in n.inputs]
    assert any(n.meta.get("passthrough") for n in outputs)


def test_a_loop_turn_reads_what_the_call_at_the_same_line_was_given() -> None:
    got, _ = passthrough_flow(Fuse(), torch.randn(2, 4))
    assert reads(got, "fuse.1.0") == {"branches.0"}
    assert reads(got, "fuse.0.1") == {"branches.1"}


@pytest.mark.slow
def test_a_frame_at_the_address_a_returned_call_left_is_not_the_frame_that_held_the_tensor() -> None:
    """CvT's layers end ``layer_output = self.drop_path(layer_output); return layer_output`` and
    the next layer's frame often gets the address of the last one's: it must not count as the
    frame that held the tensor when the DropPath ran, so the next layer reads the DropPath."""
    transformers = pytest.importorskip("transformers")
    config = transformers.CvtConfig(
        depth=[1, 2], embed_dim=[16, 32], num_heads=[1, 2], patch_sizes=[7, 3], patch_stride=[4, 2],
        patch_padding=[2, 1], mlp_ratio=[2.0, 2.0], attention_drop_rate=[0.0, 0.0], drop_rate=[0.0, 0.0],
        drop_path_rate=[0.0, 0.1], qkv_bias=[True, True], cls_token=[False, True],
        qkv_projection_method=["dw_bn", "dw_bn"], kernel_qkv=[3, 3], padding_kv=[1, 1], stride_kv=[2, 2],
        padding_q=[1, 1], stride_q=[1, 1],
    )
    torch.manual_seed(0)
    got, want = passthrough_flow(transformers.CvtModel(config), torch.randn(1, 3, 32, 32))
    assert reads(got, "encoder.stages.1.layers.1.layernorm_before") == {"encoder.stages.1.layers.0.drop_path"}
    assert got == want


@pytest.mark.parametrize("name", ["passthrough_inline_into_unpacked_call", "passthrough_stored_then_rebound"])
def test_a_layer_whose_first_norm_is_an_identity_adds_what_the_norm_was_given(name: str) -> None:
    """ModernBERT's shapes: the norm's result goes into ``attn(norm(h), k=v, **kwargs)`` (the
    call's packed arguments are no container), or into ``h``, which is rebound before the
    residual add loads it: the add reads the embeddings' Dropout, not the Identity."""
    from corpus.edge import EDGE_CASES

    torch.manual_seed(0)
    model, args, _ = EDGE_CASES[name]()
    got, want = passthrough_flow(model, *args)
    assert reads(got, "out") == {"embeddings.drop", "layer.attn.proj"}
    assert got == want


def test_a_hook_that_keeps_what_its_call_was_given_reads_that_not_the_pass_through_inside() -> None:
    """transformers' first hidden state is the first layer's ``args[0]``, kept by a forward hook;
    an Identity first in the layer passed it on inside the call. The kept tensor is what the layer
    was given (the embedding); each later one, a layer's result, also what the next was given."""
    from corpus.edge import EDGE_CASES

    torch.manual_seed(0)
    model, args, _ = EDGE_CASES["hook_keeps_what_a_call_was_given"]()
    got, want = passthrough_flow(model, *args)
    assert reads(got, "head") == {"embed", "layers.0.proj", "layers.1.proj"}
    assert got == want
    model, args, _ = EDGE_CASES["hook_keeps_what_a_call_returned"]()
    got, want = passthrough_flow(model, *args)
    assert reads(got, "head") == {"embed", "layers.0.drop", "layers.1.drop"}
    assert got == want


class DropoutThenNoOpCast(nn.Module):
    """GPT-NeoX-Japanese's attention: ``w = self.drop(w); w = w.to(v.dtype)``. The cast returns
    the very tensor, so ``w`` still holds the Dropout's result, in the frame and after it returns."""

    def __init__(self) -> None:
        super().__init__()
        self.proj, self.drop = nn.Linear(4, 4), nn.Dropout(0.1)

    def forward(self, x):
        weights = torch.softmax(self.proj(x), dim=-1)
        weights = self.drop(weights)
        weights = weights.to(x.dtype)
        return weights @ x, weights


class CastsAndReturns(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn, self.out = DropoutThenNoOpCast(), nn.Linear(4, 4)

    def forward(self, x):
        mixed, weights = self.attn(x)
        return self.out(mixed + weights)


def test_a_variable_rebound_to_the_same_tensor_still_holds_the_pass_through() -> None:
    """A rebinding is no proof a variable lost the tensor: a no-op cast rebinds it to itself."""
    got, want = passthrough_flow(CastsAndReturns(), torch.randn(4, 4))
    assert reads(got, "out") == {"attn.drop"}
    assert got == want


def _reader_of(ir: torchatlas.GraphIR, path: str) -> list[str]:
    """The scope paths of the ops that read the pass-through node of the call at ``path``."""
    node = next(n for n in ir.ops() if n.meta.get("passthrough") and ir.scope(n.scope).path == path)
    return [ir.scope(n.scope).path for n in ir.ops() if any(r.node == node.id for r in n.inputs)]


def test_a_module_that_returns_its_parameter_is_a_node_between_the_parameter_and_its_reader() -> None:
    from corpus.edge import EDGE_CASES

    model, args, _ = EDGE_CASES["module_returns_its_parameter"]()
    graph = torchatlas.trace(model, args)
    (node,) = [n for n in graph.ir.ops() if n.meta.get("passthrough")]
    assert graph.ir.scope(node.scope).path == "position"
    assert graph.ir.node(node.inputs[0].node).kind == "param"
    assert _reader_of(graph.ir, "position") == [""]  # the add, in the model's own call
    assert "position (LearnedPosition)" in graph.tree()


def test_a_cached_call_that_returns_an_earlier_forwards_tensor_is_drawn_every_time() -> None:
    """MaskFormer's ``lru_cache``d position embedder: after an untraced forward, both traced
    calls return the cached tensor and run no op; each is a node, the second reading the first."""
    from corpus.edge import EDGE_CASES

    model, args, _ = EDGE_CASES["cached_call_returns_an_earlier_result"]()
    model(*args)  # fills the cache
    graph = torchatlas.trace(model, args)
    ir = graph.ir
    first, second = [n for n in ir.ops() if n.meta.get("passthrough")]
    assert [ir.scope(n.scope).label for n in (first, second)] == ["code (CachedCode)", "code#1 (CachedCode)"]
    assert ir.node(first.inputs[0].node).kind == "constant" and second.inputs[0].node == first.id
    tree = graph.tree()
    assert "code (CachedCode)" in tree and "code#1 (CachedCode)" in tree
