"""The HTML page as data: self-contained, escaped, and carrying the graph the viewer needs.

What the page does in a browser is tested in test_browser.py.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from dataclasses import replace
from html.parser import HTMLParser

import pytest
import torch
from _capture_helpers import load_coolcnn
from _viewer import HOSTILE, Hostile
from torch import nn

import torchatlas
from torchatlas._ir import GraphIR, Node, Ref, Scope, TensorMeta
from torchatlas._ops import CATEGORIES
from torchatlas._render import _html
from torchatlas._render._html import ViewerBundleMissing, notebook_html, script_json, to_html, viewer_document
from torchatlas._view import PALETTES

pytestmark = pytest.mark.skipif(
    not (_html.BUNDLE_DIR / "viewer.js").is_file(),
    reason="viewer bundle not built: run `cd web && npm ci && npm run build`",
)


class Elements(HTMLParser):
    """Start tags with their attributes, and the text of each <script>, as a browser would split them."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[tuple[dict[str, str | None], str]] = []
        self._script: dict[str, str | None] | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag == "script":
            self._script, self._text = dict(attrs), []

    def handle_data(self, data: str) -> None:
        if self._script is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "script" and self._script is not None:
            self.scripts.append((self._script, "".join(self._text)))
            self._script = None


def parse(page: str) -> Elements:
    p = Elements()
    p.feed(page)
    p.close()
    return p


def embedded(page: str) -> dict:
    blocks = [text for attrs, text in parse(page).scripts if attrs.get("type") == "application/json"]
    assert len(blocks) == 1
    return json.loads(blocks[0])


@pytest.fixture(scope="module")
def coolcnn_graph() -> torchatlas.Graph:
    coolcnn = load_coolcnn()
    torch.manual_seed(0)
    return torchatlas.trace(coolcnn.CoolCNN(), coolcnn.example_input())


def test_page_is_self_contained(coolcnn_graph: torchatlas.Graph) -> None:
    page = to_html(coolcnn_graph.ir)
    elements = parse(page)
    # Nothing is fetched: no external scripts, stylesheets, images or frames.
    for tag, attrs in elements.tags:
        assert "src" not in attrs, tag
        assert not (tag == "link" and attrs.get("rel") == "stylesheet")
    kinds = [attrs.get("type") for attrs, _ in elements.scripts]
    assert kinds == ["application/json", None]
    assert "new Worker" in elements.scripts[1][1]  # the layout worker is inlined, not loaded from a URL
    assert "<title>CoolCNN · torchatlas</title>" in page


def test_embedded_document_describes_the_graph(coolcnn_graph: torchatlas.Graph) -> None:
    ir = coolcnn_graph.ir
    doc = embedded(to_html(ir))
    assert doc["title"] == "CoolCNN"
    assert len(doc["nodes"]) == len(ir.nodes) and len(doc["scopes"]) == len(ir.scopes)
    by_target = {}
    for n in doc["nodes"]:
        if "t" in n:
            by_target.setdefault(n["t"], []).append(n)
    conv = by_target["torch.conv2d"][0]
    assert doc["categories"][conv["c"]] == "compute"
    assert doc["names"][conv["op"]] == "conv2d"
    assert doc["metas"][conv["o"][0]] == {
        "shape": [1, 16, 32, 32], "dtype": "float32", "device": "cpu", "x": "1×16×32×32", "full": "1×16×32×32  float32  cpu"
    }
    assert doc["files"][conv["src"][0]].endswith(("coolcnn.py", "_example.py")) and "initial_conv" in conv["src"][2]
    assert conv["f"] > 0  # FLOPs from the analyses pass
    # The two branches join at the add: its inputs come from the two max_pool calls.
    add = by_target["torch.Tensor.__add__"][0]
    pools = [doc["scopes"][doc["nodes"][i]["s"]] for i in add["i"]]
    assert [p["path"] for p in pools] == ["max_pool", "max_pool"] and [p["call"] for p in pools] == [0, 1]
    root = doc["scopes"][0]
    assert root["p"] == -1 and root["params"] == sum(p.numel() for p in load_coolcnn().CoolCNN().parameters())


def test_repeated_blocks_become_fold_groups() -> None:
    model = nn.Sequential(*[nn.Sequential(nn.Linear(8, 8), nn.ReLU()) for _ in range(3)])
    doc = viewer_document(torchatlas.trace(model, torch.randn(2, 8)).ir)
    reps = {s["path"]: s["rep"] for s in doc["scopes"] if "rep" in s}
    assert sorted(reps) == ["0", "1", "2"]
    assert [reps[p][1:] for p in ("0", "1", "2")] == [[0, 3], [1, 3], [2, 3]]
    assert len({r[0] for r in reps.values()}) == 1


def test_graph_without_graph_meta_still_renders() -> None:
    traced = torchatlas.trace(nn.Linear(3, 2), torch.randn(1, 3)).ir
    bare = GraphIR([replace(s, meta={}) for s in traced.scopes], [replace(n, meta={}) for n in traced.nodes], {})
    doc = embedded(to_html(bare))
    assert doc["title"] == "Linear"
    assert [s.get("rep") for s in doc["scopes"]] == [None]
    assert "params" not in doc["scopes"][0]


def test_hostile_module_name_stays_data() -> None:
    page = to_html(torchatlas.trace(Hostile(), torch.randn(1, 4)).ir)
    assert "</script><script>" not in page and "<script>alert" not in page
    elements = parse(page)
    assert len(elements.scripts) == 2  # nothing injected, nothing cut short
    doc = embedded(page)
    assert HOSTILE in [s["path"] for s in doc["scopes"]]


def test_script_json_escapes_markup_and_separators() -> None:
    text = script_json({"a": "</script><!-- & \u2028\ud800"})
    assert not re.search(r"[<>&\u2028]", text)
    assert json.loads(text) == {"a": "</script><!-- & \u2028\ud800"}
    text.encode("utf-8")


def test_notebook_iframe_carries_the_page_escaped(coolcnn_graph: torchatlas.Graph) -> None:
    frame = notebook_html(coolcnn_graph.ir, height=500)
    tags = parse(frame).tags
    assert [t for t, _ in tags] == ["iframe"]  # the page's own tags stay inside the attribute
    attrs = tags[0][1]
    assert attrs["srcdoc"] == to_html(coolcnn_graph.ir)
    assert "allow-scripts" in attrs["sandbox"] and "allow-same-origin" not in attrs["sandbox"]
    assert "height:500px" in attrs["style"]


def test_palette_css_covers_every_category_in_both_themes() -> None:
    css = _html.palette_css()
    for theme, palette in PALETTES.items():
        block = re.search(rf':root\[data-theme="{theme}"\]\{{([^}}]*)\}}', css).group(1)
        for c in CATEGORIES:
            assert f"--fill-{c}:{palette.fill[c]};" in block
    for c in CATEGORIES:
        assert f'.unit[data-category="{c}"] :is(.box,.stack)' in css


def test_content_security_policy_hashes_the_page_own_script_and_style(coolcnn_graph: torchatlas.Graph) -> None:
    page = to_html(coolcnn_graph.ir)
    policy = next(a["content"] for t, a in parse(page).tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy")
    script = next(text for attrs, text in parse(page).scripts if "type" not in attrs)
    style = re.search(r"<style>(.*?)</style>", page, re.S).group(1)
    digest = lambda text: base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()  # noqa: E731
    directives = dict(d.strip().split(" ", 1) for d in policy.split(";"))
    assert directives["script-src"] == f"'sha256-{digest(script)}'" and directives["style-src"] == f"'sha256-{digest(style)}'"
    assert directives["default-src"] == "'none'" and "unsafe" not in policy


def test_leaf_modules_carry_their_ops_category_and_names_are_escaped(coolcnn_graph: torchatlas.Graph) -> None:
    doc = viewer_document(coolcnn_graph.ir)
    by_path = {s["path"]: s for s in doc["scopes"]}
    assert doc["categories"][by_path["initial_conv"]["c"]] == "compute"
    assert doc["categories"][by_path["max_pool"]["c"]] == "reduction"
    assert "c" not in by_path[""]  # a module holding modules keeps the module colour

    class Bidi(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.add_module("a\u202eb", nn.Linear(2, 2))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return getattr(self, "a\u202eb")(x)

    doc = viewer_document(torchatlas.trace(Bidi(), torch.randn(1, 2)).ir)
    assert [s["path"] for s in doc["scopes"]] == ["", "a\\u202eb"]
    assert "\u202e" not in json.dumps(doc, ensure_ascii=False)


def test_missing_bundle_says_how_to_build_it(tmp_path, monkeypatch, coolcnn_graph: torchatlas.Graph) -> None:
    monkeypatch.setattr(_html, "BUNDLE_DIR", tmp_path)
    with pytest.raises(ViewerBundleMissing, match="npm ci && npm run build"):
        to_html(coolcnn_graph.ir)


def test_graph_with_two_roots_gets_one_synthetic_root() -> None:
    meta = [TensorMeta((2,), "float32", "cpu")]
    ir = GraphIR(
        [Scope("s0", None, "", "m.A", 0), Scope("s1", None, "", "m.B", 0), Scope("s2", "s1", "inner", "m.C", 0)],
        [
            Node("n0", "input", "s0", path="args[0]", outputs=meta),
            Node("n1", "op", "s2", [Ref("n0")], target="torch.relu", outputs=meta),
        ],
        {},
    )
    doc = viewer_document(ir)
    assert [s["p"] for s in doc["scopes"]] == [-1, 0, 0, 2]
    assert [doc["scopes"][n["s"]]["cls"] for n in doc["nodes"]] == ["m.A", "m.C"]


def test_non_finite_counts_are_left_out_of_the_page(coolcnn_graph: torchatlas.Graph) -> None:
    ir = coolcnn_graph.ir
    bad = replace(ir, nodes=[replace(n, meta={**n.meta, "flops": float("nan")}) for n in ir.nodes])
    bad = replace(bad, scopes=[replace(s, meta={**s.meta, "params": float("inf")}) for s in bad.scopes])
    doc = embedded(to_html(bad))
    assert all("f" not in n for n in doc["nodes"]) and all("params" not in s for s in doc["scopes"])


class _DividesByZero(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b((self.a(x).view(-1, 2, 2) / 0).view(-1, 4))


def test_run_time_numbers_and_op_arguments_reach_the_page(coolcnn_graph: torchatlas.Graph) -> None:
    ir = torchatlas.trace(_DividesByZero(), torch.randn(2, 4), stats=True, profile=True).ir
    doc = viewer_document(ir)
    assert [m[0] for m in doc["metrics"]] == ["f", "params", "ab", "tu", "nf"]
    ops = {n["t"]: n for n in doc["nodes"] if "t" in n and n["t"] != "torch.Tensor.view"}
    div, view = ops["torch.Tensor.__truediv__"], next(n for n in doc["nodes"] if n.get("a") == "(%0, -1, 2, 2)")
    assert div["a"] == "(%0, 0)" and div["nf"] == [0, 8] and div["ab"] == 32 and div["tu"] > 0
    assert div["st"] == [{"nan": 0, "inf": 8, "zeros": 0.0}]  # min, max and mean are not numbers: left out
    assert "nf" not in view and set(view["st"][0]) >= {"min", "max", "mean", "std"}
    scopes = {s["path"]: s for s in doc["scopes"]}
    assert scopes["a"]["nf"] == 0 and scopes["b"]["nf"] == 1 and scopes[""]["nf"] == 3
    assert scopes["a"]["ab"] == 32 and scopes[""]["tu"] >= scopes["a"]["tu"]
    json.loads(script_json(doc))  # JSON without NaN

    odd = {"stats": [{"min": float("nan"), "max": "x", "nan": True, "evil</script>": 1}, "x"], "nonfinite": {"nan": "x", "inf": 2.0},
           "time_us": float("inf")}  # a hand-edited document: only finite numbers of known keys reach the page
    bad = replace(ir, nodes=[replace(n, meta={**n.meta, **odd}) if n.kind == "op" else n for n in ir.nodes])
    div = next(n for n in viewer_document(bad)["nodes"] if n.get("t") == "torch.Tensor.__truediv__")
    assert div["st"] == [{}, None] and div["nf"] == [0, 2] and "tu" not in div

    plain = viewer_document(coolcnn_graph.ir)  # neither profiled nor with stats
    assert [m[0] for m in plain["metrics"]] == ["f", "params", "ab"]
    assert not any(k in n for n in plain["nodes"] for k in ("tu", "nf", "st"))
