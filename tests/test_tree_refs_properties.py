"""Property: a random data flow, series-parallel or not, draws as a tree with no numbered
listing, and every step keeps exactly one line (breaking the flow at values read in several
places names reads; it never hides or repeats a step)."""

from __future__ import annotations

import linecache
import re

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import torchatlas

UNARY = ("relu", "tanh", "sigmoid", "exp")
BINARY = ("+", "*", "-")


@st.composite
def programs(draw: st.DrawFn) -> list[str]:
    """``v1 = ...`` lines over ``v0`` (the input), each step reading one or two earlier values."""
    lines = []
    for k in range(1, draw(st.integers(2, 9)) + 1):
        a = draw(st.integers(0, k - 1))
        if draw(st.booleans()):
            lines.append(f"v{k} = torch.{draw(st.sampled_from(UNARY))}(v{a})")
        else:
            b = draw(st.integers(0, k - 1))
            lines.append(f"v{k} = v{a} {draw(st.sampled_from(BINARY))} v{b}")
    return lines


class Program(nn.Module):
    def __init__(self, lines: list[str]) -> None:
        super().__init__()
        read = {int(n) for line in lines for n in re.findall(r"v(\d+)", line.split("=", 1)[1])}
        unread = [f"v{k}" for k in range(1, len(lines) + 1) if k not in read]  # returned: nothing is unused
        source = "def forward(self, v0):\n" + "".join(f"    {line}\n" for line in lines)
        source += f"    return ({', '.join(unread)},)\n"
        filename = f"<tree-refs-{abs(hash(source))}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        namespace: dict = {"torch": torch}
        exec(compile(source, filename, "exec"), namespace)
        self._forward = namespace["forward"]
        self.source = source

    def forward(self, v0):
        return self._forward(self, v0)


@settings(max_examples=60, deadline=None)
@given(programs())
def test_any_flow_draws_without_a_listing_and_keeps_every_step_once(lines: list[str]) -> None:
    model = Program(lines)
    text = torchatlas.trace(model, (torch.randn(3),)).tree()
    assert not re.search(r"[├└]── \[\d+\] ", text), model.source + text
    for k in range(1, len(lines) + 1):
        assert len(re.findall(rf"(?<![\w]) ?v{k} = ", text)) == 1, model.source + text
