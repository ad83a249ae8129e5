"""The page draws the diagram's stand-ins (issue 29): which reads become ``↪`` notes instead of edges
is decided once, in Python (``_view.stand_in_reads``, each node's ``fr``), and the page and the
diagram show the same ones for the same open calls. ``web/src`` has no far rule of its own."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from _viewer import ARTIFACTS, Viewer, chromium_browser
from test_view_far import Dense

import torchatlas
from torchatlas._render import HtmlOptions
from torchatlas._view import DotOptions, backward_apart, build_layout

transformers = pytest.importorskip("transformers")
WEB = Path(__file__).resolve().parent.parent / "web" / "src"


@pytest.fixture(scope="module")
def browser():
    yield from chromium_browser()


def _llama(layers: int = 5) -> torchatlas.GraphIR:
    torch.manual_seed(0)
    cfg = transformers.AutoConfig.for_model(
        "llama", num_hidden_layers=layers, hidden_size=32, intermediate_size=64, num_attention_heads=2,
        num_key_value_heads=2, vocab_size=100,
    )
    ids = torch.randint(0, 100, (1, 8))
    return torchatlas.trace(transformers.AutoModel.from_config(cfg).eval(), kwargs={"input_ids": ids}).ir


def _t5(layers: int = 4) -> torchatlas.GraphIR:
    torch.manual_seed(0)
    cfg = transformers.AutoConfig.for_model(
        "t5", num_layers=layers, num_decoder_layers=layers, d_model=32, d_ff=64, num_heads=2, d_kv=16, vocab_size=100,
    )
    ids = torch.randint(0, 100, (1, 8))
    return torchatlas.trace(transformers.T5Model(cfg).eval(), kwargs={"input_ids": ids, "decoder_input_ids": ids[:, :4]}).ir


def _dense() -> torchatlas.GraphIR:
    return torchatlas.trace(Dense(8), torch.randn(1, 3, 8, 8)).ir


# The page's stand-ins for the calls open to `depth` (runs folded, a fold's first member open as
# the diagram draws it): (value's node index, slot, the box it is noted beside).
PAGE_REFS = """([depth, fold]) => {
  const m = window.__atlas.app.model;
  m.expandToDepth(depth);
  if (fold) for (const [g, members] of m.groups) if (m.scopes[members[0]].depth < depth) m.expanded.add(members[0]);
  const refs = [];
  for (const leaf of m.visibleGraph().leaves.values()) for (const e of leaf.refs) for (const [i, s] of e.values) refs.push([i, s, leaf.id]);
  return refs;
}"""


def _diagram_refs(ir: torchatlas.GraphIR, depth: int | None, fold: bool) -> set[tuple[str, int, str]]:
    layout = build_layout(ir, DotOptions(depth=depth, fold_repeats=fold, expand_leaf_modules=True))
    return {
        (layout.units[src].node.id, layout.units[src].slot, dst)
        for src, dst in layout.edges
        if layout.units[src].kind == "ref"
    }


def _page_refs(v: Viewer, ir: torchatlas.GraphIR, depth: int, fold: bool) -> set[tuple[str, int, str]]:
    drawn = backward_apart(ir)
    nodes, scopes = [n.id for n in drawn.nodes], [s.id for s in drawn.scopes]
    unit = {"n": lambda i: nodes[i], "s": lambda i: scopes[i], "g": lambda i: f"fold_{scopes[i]}"}
    return {(nodes[i], s, unit[leaf[0]](int(leaf[1:]))) for i, s, leaf in v.page.evaluate(PAGE_REFS, [depth, fold])}


@pytest.mark.parametrize("name", ["dense", "llama", "t5"])
@pytest.mark.parametrize("fold", [True, False])
def test_the_page_draws_the_diagrams_stand_ins(browser, tmp_path: Path, name: str, fold: bool) -> None:
    ir = {"dense": _dense, "llama": _llama, "t5": _t5}[name]()
    v = Viewer(browser, ir, tmp_path, name, options=HtmlOptions(fold_repeats=fold))
    deepest = max(len(ir.ancestry(s.id)) for s in ir.scopes)
    seen = 0
    for depth in range(1, deepest + 1):
        diagram = _diagram_refs(ir, depth, fold)
        assert _page_refs(v, ir, depth, fold) == diagram, depth
        seen += len(diagram)
    # the fixtures have far reads; Llama's layers folded are drawn once, by the first, reading near
    assert seen if name != "llama" or not fold else not seen
    assert not v.errors


def test_dense_and_llama_pages_show_stand_ins(browser, tmp_path: Path) -> None:
    """Screenshots to look at: a DenseNet block's dense reads and the layers' mask and rotary reads
    as ``↪`` notes, the near reads as edges."""
    ARTIFACTS.mkdir(exist_ok=True)
    for name, ir in (("dense", _dense()), ("llama", _llama())):
        v = Viewer(browser, ir, tmp_path, name, options=HtmlOptions(fold_repeats=False, depth=3 if name == "dense" else 2))
        notes = v.page.evaluate("() => [...document.querySelectorAll('svg.graph text.refs')].map((t) => t.textContent)")
        assert notes and all(note.startswith("↪") for note in notes)
        v.page.screenshot(path=str(ARTIFACTS / f"far-{name}.png"))
        assert not v.errors


def test_the_viewer_has_no_far_rule_of_its_own() -> None:
    model = (WEB / "model.js").read_text(encoding="utf-8")
    assert not re.search(r"HUB_|readers\.get|READERS", model)
