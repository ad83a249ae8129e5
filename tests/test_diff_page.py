"""The visual diff page: the merged module-call tree of two graphs, coloured, in real Chromium."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
import torch
import transformers
from _viewer import CHROMIUM, launch_chromium

import torchatlas
from torchatlas._cli import main

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"


def _llama(layers: int, intermediate: int = 64) -> torchatlas.Graph:
    config = transformers.LlamaConfig(
        hidden_size=32, intermediate_size=intermediate, num_hidden_layers=layers, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=50,
    )
    torch.manual_seed(0)
    return torchatlas.trace(transformers.LlamaForCausalLM(config).eval(), torch.randint(0, 50, (1, 6)))


@pytest.fixture(scope="module")
def llama_diff() -> torchatlas.GraphDiff:
    return torchatlas.diff(_llama(2), _llama(3, intermediate=96))  # a layer more, wider MLPs


class _Rows(HTMLParser):
    """(status, text) of each call row."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[tuple[str, str]] = []
        self._inside = 0

    def handle_starttag(self, tag: str, attrs: list) -> None:
        classes = dict(attrs).get("class") or ""
        if tag == "div" and classes.startswith("row "):
            self.rows.append((classes.split()[1], ""))
            self._inside = 1
        elif self._inside:
            self._inside += 1

    def handle_endtag(self, tag: str) -> None:
        if self._inside:
            self._inside -= 1

    def handle_data(self, data: str) -> None:
        if self._inside:
            status, text = self.rows[-1]
            self.rows[-1] = (status, text + data)


def _rows(page: str) -> list[tuple[str, str]]:
    parser = _Rows()
    parser.feed(page)
    return parser.rows


def test_the_merged_tree_colours_what_was_added_and_changed(llama_diff) -> None:
    rows = _rows(str(llama_diff.to_html(view="list")))
    assert len(rows) == len(llama_diff.calls)
    added = [text.strip() for status, text in rows if status == "added"]
    assert added[0].startswith("+model.layers.2 (LlamaDecoderLayer)")  # the new layer, then its inside
    assert all("layers.2" in text for text in added)
    assert {status for status, _ in rows} <= {"same", "changed", "added"}
    assert not any(status == "removed" for status, _ in rows)
    # the other way round the layer is removed, hung under the model it was in
    back = torchatlas.diff(_llama(3), _llama(2))
    removed = [c for c in back.calls if c.status == "removed"]
    assert removed and removed[0].label == "model.layers.2 (LlamaDecoderLayer)" and removed[0].after is None
    at = back.calls.index(removed[0])
    parent = next(c for c in reversed(back.calls[:at]) if c.depth < removed[0].depth)
    assert parent.label == "model (LlamaModel)"
    assert back.calls[at - 1].path.startswith("model.layers.1")  # drawn where it was: after layer 1


def test_a_changed_call_carries_both_sides(llama_diff) -> None:
    changed = {c.label: c for c in llama_diff.calls if c.status == "changed"}
    assert any(".mlp.up_proj (Linear)" in label for label in changed)
    for call in changed.values():
        assert call.before is not None and call.after is not None
        for name in call.changed:
            if name in call.before:  # a call's own facts; op-level fields are in its notes
                assert call.before[name] != call.after[name]


def test_hostile_names_are_escaped_in_the_page() -> None:
    class Evil(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.add_module("</script><b>\u202e", torch.nn.Linear(2, 2))

        def forward(self, x):
            return getattr(self, "</script><b>\u202e")(x)

    d = torchatlas.diff(torchatlas.trace(torch.nn.Linear(2, 2), torch.randn(1, 2)), torchatlas.trace(Evil(), torch.randn(1, 2)))
    for view in ("list", "graph"):
        page = str(d.to_html(view=view))
        assert "</script><b>" not in page and "\u202e" not in page
        assert page.count("<script") == 2  # the data and the one script, nothing injected


def test_a_module_named_like_markup_cannot_reach_the_script() -> None:
    name = "<!--<script"

    class Sly(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.add_module(name, torch.nn.Linear(2, 2))

        def forward(self, x):
            return getattr(self, name)(x)

    d = torchatlas.diff(torchatlas.trace(torch.nn.Linear(2, 2), torch.randn(1, 2)), torchatlas.trace(Sly(), torch.randn(1, 2)))
    page = str(d.to_html(view="list"))
    assert "<!--" not in page and page.count("<script") == 2
    block = page.split('<script type="application/json" id="calls">', 1)[1].split("</script>", 1)[0]
    assert not set("<>&") & set(block)
    labels = [c["label"] for c in json.loads(block)]
    assert f"{name} (Linear)" in labels  # the name itself, intact once parsed


def test_cli_writes_the_diff_page(tmp_path: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    _llama(2).save(a)
    _llama(3).save(b)
    assert main(["diff", str(a), str(b), "-o", str(tmp_path / "diff.html")]) == 1  # they differ
    page = (tmp_path / "diff.html").read_text()
    assert "a.json → b.json" in page and re.search(r'class="call added"', page)  # the merged graph, the list beside it


@pytest.mark.browser
def test_clicking_a_call_shows_both_sides_in_chromium(llama_diff, tmp_path: Path) -> None:
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    if not Path(CHROMIUM).exists():
        pytest.skip("no Chromium at /usr/bin/chromium (apt-get install chromium)")
    path = llama_diff.to_html(tmp_path / "diff.html", view="list")
    with sync_api.sync_playwright() as p:
        browser = launch_chromium(p)
        page = browser.new_page(viewport={"width": 1200, "height": 800})
        problems: list[str] = []
        page.on("console", lambda m: m.type in ("error", "warning") and problems.append(m.text))
        page.on("pageerror", lambda e: problems.append(str(e)))
        page.goto(Path(path).as_uri())
        page.click(".row.changed >> nth=0")
        cells = page.eval_on_selector_all("#panel tr.diff td", "tds => tds.map(td => td.textContent)")
        assert cells and len(cells) % 3 == 0
        for k in range(0, len(cells), 3):
            assert cells[k + 1] != cells[k + 2]  # a changed field differs between A and B
        assert page.eval_on_selector_all("#panel ul.notes li", "lis => lis.length") > 0  # the changes inside
        # field names never break mid-word (they did: "input sh" / "apes")
        lines = page.eval_on_selector_all(
            "#panel td:first-child",
            "tds => tds.map(td => { const r = document.createRange(); r.selectNodeContents(td);"
            " return new Set([...r.getClientRects()].map(x => Math.round(x.top))).size; })",
        )
        assert lines and set(lines) == {1}
        page.click(".row.added >> nth=0")
        assert page.eval_on_selector_all("#panel td", "tds => tds.map(td => td.textContent)")[1] == "—"
        visible_rows = "() => [...document.querySelectorAll('.row')].filter(r => r.offsetParent !== null).length"
        everything = page.evaluate(visible_rows)
        page.check("#changed-only")
        shown = page.evaluate(visible_rows)
        assert 0 < shown < everything
        assert page.evaluate("() => [...document.querySelectorAll('.row.same')].every(r => r.offsetParent === null)")
        page.uncheck("#changed-only")
        page.fill("#search", "layers.2.mlp")
        assert page.evaluate("() => [...document.querySelectorAll('.row')].filter(r => r.offsetParent !== null)"
                             ".map(r => r.textContent).every(t => t.includes('layers.2.mlp'))")
        page.fill("#search", "")
        assert page.evaluate("() => document.querySelectorAll('.row.changed .badge').length") > 0
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "diff_page.png"))
        browser.close()
    assert problems == []  # no script error, no CSP violation


def test_the_merged_graph_puts_back_what_only_a_had() -> None:
    """Both graphs as one: b's nodes kept, a's removed layer put back where it was, all marked."""
    a, b = _llama(3), _llama(2)
    d = torchatlas.diff(a, b)
    g = d.graph
    assert g is not None
    removed = [s for s in g.scopes if s.meta["diff"] == "removed"]
    assert removed[0].path == "model.layers.2" and g.scope(removed[0].parent).path == "model"
    order = [s.path for s in g.scopes]
    assert order.index("model.layers.2") == order.index("model.layers.1.mlp.down_proj") + 1  # after layer 1's inside
    assert {n.meta["diff"] for n in g.nodes} == {"same", "removed"}
    kept = {n.id for n in g.nodes}
    assert {n.id for n in b.ir.nodes} <= kept
    assert len([n for n in g.nodes if n.meta["diff"] == "removed"]) == sum(1 for n in d.nodes if n.status == "removed")
    for n in g.nodes:  # every edge ends at a node of the merged graph
        assert all(r.node in kept for r in n.inputs)
    wider = torchatlas.diff(_llama(2), _llama(2, intermediate=96)).graph
    mlp = next(s for s in wider.scopes if s.path == "model.layers.0.mlp")
    assert mlp.meta["diff"] == "changed" and mlp.meta["diff_note"] == "params 6.1K → 9.2K"
    layers = [s for s in wider.scopes if s.path in ("model.layers.0", "model.layers.1")]
    assert {s.meta["repeat"]["group"] for s in layers} == {layers[0].meta["repeat"]["group"]}  # changed alike: one fold


def test_the_merged_graph_knows_a_renamed_module_by_both_names() -> None:
    def net(name: str) -> torch.nn.Module:
        m = torch.nn.Sequential()
        m.add_module(name, torch.nn.Linear(2, 2))
        return m

    torch.manual_seed(0)
    a = torchatlas.trace(net("head"), torch.randn(1, 2))
    b = torchatlas.trace(net("classifier"), torch.randn(1, 2))
    d = torchatlas.diff(a, b)
    assert d.equal
    scope = next(s for s in d.graph.scopes if s.path == "classifier")
    assert scope.meta["diff_a_path"] == "head"
    from torchatlas._render._html import viewer_document

    assert any(s.get("dfa") == "head" for s in viewer_document(d.graph)["scopes"])  # the page's search reads it


@pytest.mark.browser
def test_the_merged_graph_page_colours_boxes_in_chromium(llama_diff, tmp_path: Path) -> None:
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    if not Path(CHROMIUM).exists():
        pytest.skip("no Chromium at /usr/bin/chromium (apt-get install chromium)")
    from _viewer import open_viewer

    from torchatlas._render._html import viewer_bundle_built

    if not viewer_bundle_built():
        pytest.skip("viewer bundle not built: run `cd web && npm ci && npm run build`")
    path = Path(llama_diff.to_html(tmp_path / "diff.html", title="Llama: a layer more, wider MLPs", view="graph"))
    with sync_api.sync_playwright() as p:
        browser = launch_chromium(p)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        problems: list[str] = []
        page.on("console", lambda m: m.type in ("error", "warning") and problems.append(m.text))
        page.on("pageerror", lambda e: problems.append(str(e)))
        open_viewer(page, path, timeout_ms=60_000)
        boxes = dict(page.evaluate(
            "() => [...document.querySelectorAll('.unit')].map(u => [u.querySelector('title').textContent.split('\\n')[0],"
            " [...u.classList].find(c => c.startsWith('diff-'))])"
        ))
        fold = next(name for name in boxes if name.endswith("layers.0–1 ×2"))
        assert boxes[fold] == "diff-changed" and boxes["model.layers.2"] == "diff-added"
        assert boxes["lm_head"] == "diff-same"
        assert "changes (diff)" in page.eval_on_selector_all("select option", "os => os.map(o => o.textContent).join()")
        before = page.evaluate("window.__atlas.layoutCount")
        page.locator(".unit.diff-changed").first.click()
        page.wait_for_function(f"() => window.__atlas.layoutCount > {before}", timeout=60_000)
        page.wait_for_timeout(800)
        assert page.locator(".cluster.diff-changed").count() >= 1  # the opened fold's frame is amber
        rows = page.eval_on_selector_all("section.diff dd", "dds => dds.map(d => d.textContent)")
        assert rows[0] == "changed" and any(r.startswith("params ") and " → " in r for r in rows)
        mlp = page.locator(".unit.diff-changed", has_text="mlp")
        assert "params 6.1K → 9.2K" in mlp.first.text_content()
        assert page.locator(".diff-list details.call.added").count() > 0
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "diff_graph.png"))
        browser.close()
    assert problems == []
