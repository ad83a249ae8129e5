"""The text tree's lines: a small intermediate tree (``Line``) drawn iteratively with Unicode
guides or their ASCII fallback, in the manner of rich's ``tree.py``."""

from __future__ import annotations

from dataclasses import dataclass, field

UNICODE_GUIDES = ("├── ", "└── ", "│   ", "    ")
ASCII_GUIDES = ("|-- ", "`-- ", "|   ", "    ")


@dataclass
class Line:
    text: str
    children: list[Line] = field(default_factory=list)
    before: list[str] = field(default_factory=list)
    """Sibling lines drawn just before this one (graph breaks)."""
    returned: bool = False
    """A ``┬`` branch whose result the call returns."""



def close_trailing_forks(line: Line) -> None:
    """No level ends on a ``┬`` fork that nothing joins (ResNet's ``pooler``, ViT's
    ``pooled_output``): such a branch feeds only the call's outputs, so its steps are the
    level's last steps, marked ``(returned)``."""
    for child in line.children:
        close_trailing_forks(child)
    kids = line.children
    if not kids or not kids[-1].returned or (len(kids) > 1 and kids[-2].text.startswith("┬ ")):
        return  # parallel outputs stay sibling branches (``┬ cos``, ``┬ sin``)
    fork = kids.pop()
    tail = fork.children or [Line(fork.text[2:])]
    tail[0].before = fork.before + tail[0].before
    kids.extend(tail)
    if "(also returned)" not in kids[-1].text:
        kids[-1].text += "  (returned)"


def draw(root: Line, guides: tuple[str, str, str, str]) -> list[str]:
    branch, last, pipe, space = guides
    out = [root.text]
    stack: list[tuple[Line, str, bool]] = [(c, "", i == len(root.children) - 1) for i, c in enumerate(root.children)][::-1]
    while stack:
        line, prefix, is_last = stack.pop()
        out.extend(prefix + branch + mark for mark in line.before)
        out.append(prefix + (last if is_last else branch) + line.text)
        child_prefix = prefix + (space if is_last else pipe)
        n = len(line.children)
        stack.extend((c, child_prefix, i == n - 1) for i, c in reversed(list(enumerate(line.children))))
    return out
