"""The diagram as a Mermaid flowchart, for GitHub READMEs and issues (````mermaid`` blocks).

It draws the diagram's view (``_view.build_view``): the same boxes, folds (``layers.0–11
×12``), stand-ins and words as ``graph.render``, module calls drawn open as subgraphs. Box
ids are ``u0, u1…`` and subgraph ids ``c0, c1…`` (Mermaid's ids are plain words); every
label is quoted with Mermaid's entity codes for the characters its syntax uses. Overlays
(``graph.overlay``) add their values to the labels and fill the boxes, as in the diagram.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from torchatlas._ir import GraphIR
from torchatlas._view import PALETTES, DotOptions, Unit, View, ViewOptions, Words, build_view, overlay_marks

_ENTITIES = {"#": "#35;", '"': "#quot;", "<": "#lt;", ">": "#gt;", "|": "#124;", "`": "#96;"}


@dataclass(frozen=True)
class MermaidOptions(ViewOptions):
    """What the Mermaid flowchart shows: the diagram's view options (``depth`` above all: a
    README wants the top levels), and ``fill``, the overlay the boxes are filled by."""

    fill: str | None = None
    """As ``DotOptions.fill``: None fills by the graph's first number overlay, if any."""


def text(value: str) -> str:
    """A label's text in Mermaid's quoted form, its syntax characters as entity codes."""
    return "".join(_ENTITIES.get(c, c) for c in value)


def to_mermaid(ir: GraphIR, options: MermaidOptions | None = None) -> str:
    """A ``flowchart`` of the analysed ``ir`` (no ``` fence around it)."""
    options = options or MermaidOptions()
    dot = DotOptions(**{f.name: getattr(options, f.name) for f in fields(ViewOptions)}, fill=options.fill)
    return _Writer(build_view(ir, dot), dot).write()


def heading(words: Words) -> str:
    """A call's line, boxed or open: ``layers.0–2 (LlamaDecoderLayer) ×3``."""
    return f"{words.title} ({words.subtitle})" + (f" {words.badge}" if words.badge else "")


class _Writer:
    def __init__(self, view: View, options: DotOptions) -> None:
        self.view, self.layout, self.ir = view, view.layout, view.ir
        self.children = self.ir.children()
        self.ids = {unit_id: f"u{i}" for i, unit_id in enumerate(self.layout.units)}
        self.units_in: dict[str | None, list[Unit]] = {}
        for unit in self.layout.units.values():
            self.units_in.setdefault(unit.container, []).append(unit)
        self.first = self.layout.first_inside()
        self.overlays = overlay_marks(self.ir)
        self.fill = self.overlays.fill_name(options.fill)
        self.lines = [f"flowchart {'LR' if options.direction == 'LR' else 'TB'}"]
        self.subgraphs = 0

    def write(self) -> str:
        self._container(None, 1)
        for (src, dst), edge in self.layout.edges.items():
            label = "" if self.layout.units[src].kind == "ref" else ", ".join(self.view.labels[(src, dst)])
            arrow = "-.->" if edge.from_param else "-->"
            self.lines.append(f'  {self.ids[src]} {arrow}{f"|{chr(34)}{text(label)}{chr(34)}|" if label else ""} {self.ids[dst]}')
        for unit_id, unit in self.layout.units.items():
            colour = self._fill(unit)
            if colour:
                self.lines.append(f"  style {self.ids[unit_id]} fill:{colour}")
        return "\n".join(self.lines) + "\n"

    def _container(self, scope_id: str | None, indent: int) -> None:
        items = [(unit.first, "unit", unit.id) for unit in self.units_in.get(scope_id, [])]
        parent = self.layout.root if scope_id is None else scope_id
        items += [(self.first[c], "subgraph", c) for c in self.children.get(parent, []) if c in self.first]
        pad = "  " * indent
        for _, what, ident in sorted(items):
            if what == "unit":
                label = "<br/>".join(text(line) for line in self._label(self.layout.units[ident]))
                self.lines.append(f'{pad}{self.ids[ident]}["{label}"]')
                continue
            self.lines.append(f'{pad}subgraph c{self.subgraphs}["{text(heading(self.view.open[ident]))}"]')
            self.subgraphs += 1
            self._container(ident, indent + 1)
            self.lines.append(f"{pad}end")

    def _label(self, unit: Unit) -> list[str]:
        """The box's lines, the diagram's words: its title (a call's with its class and ``×N``),
        a value's shape, the mark that wins (failed, NaN), its overlays."""
        words = self.view.words[unit.id]
        if unit.kind in ("box", "fold"):
            lines = [heading(words)]
        else:
            lines = [words.title] + ([words.subtitle] if words.subtitle and unit.kind == "node" else [])
        lines += [m.text for m in words.marks[:1] if m.kind in ("failed", "nonfinite")]
        marks = self.overlays.text(self._item(unit) or "")
        return lines + [marks] if marks else lines

    def _item(self, unit: Unit) -> str | None:
        return unit.node.id if unit.kind == "node" and unit.node else (unit.scope.id if unit.scope else None)

    def _fill(self, unit: Unit) -> str | None:
        item = self._item(unit)
        if self.fill is None or item is None or unit.kind == "ref":
            return None
        return self.overlays.fill(self.fill, item, PALETTES["light"].overlay)
