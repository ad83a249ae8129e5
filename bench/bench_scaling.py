"""How the costs that once grew with the square of the input grow now: a size ladder for each.

    python bench/bench_scaling.py [--scale 1.0]

Each case doubles its size three times and prints the seconds of each rung and the growth of
the last doubling (2.0 is linear, 4.0 quadratic):

* ``tree, long source line``: the tree of a saved graph whose module calls' source lines hold a
  run of n spaces (names are read from lines of at most 1,000 characters);
* ``tree, op reading n values``: ``torch.stack`` of n sums;
* ``tree, n unused ops``: n results nothing reads;
* ``diff, n-op chains``: the same chain of n ``relu`` traced at two input sizes (no op pairs
  along the data flow; difflib aligns runs of one op);
* ``.pt2, stack trace``: reading a ``.pt2`` whose first node's ``stack_trace`` is n repeats of
  a frame line with no newline (parsed line by line, 64 KiB per node).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import tempfile
import time
import zipfile
from collections.abc import Callable

import torch
from torch import nn

import torchatlas


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        y = self.fc(x)
        return torch.relu(y) + x


class _Gather(nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    def forward(self, x):
        return torch.stack([x + i for i in range(self.n)])


class _Unused(nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    def forward(self, x):
        for i in range(self.n):
            x * i
        return x + 1


class _Chain(nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    def forward(self, x):
        for _ in range(self.n):
            x = torch.relu(x)
        return x


def _timed(prepare: Callable[[int], Callable[[], object]]) -> Callable[[int], float]:
    def run(n: int) -> float:
        work = prepare(n)
        start = time.perf_counter()
        work()
        return time.perf_counter() - start

    return run


def _long_line(folder: str) -> Callable[[int], Callable[[], object]]:
    base = torchatlas.trace(nn.Sequential(_Block(), _Block()), torch.randn(2, 8)).to_dict()

    def prepare(n: int) -> Callable[[], object]:
        doc = copy.deepcopy(base)
        for scope in doc["scopes"]:
            if scope.get("source"):
                scope["source"]["code"] = "x" + " " * n + "!"
        path = os.path.join(folder, f"line{n}.json")
        with open(path, "w") as f:
            json.dump(doc, f)
        graph = torchatlas.load(path)
        return lambda: graph.tree(ascii=True)

    return prepare


def _traced_tree(make: Callable[[int], nn.Module]) -> Callable[[int], Callable[[], object]]:
    def prepare(n: int) -> Callable[[], object]:
        graph = torchatlas.trace(make(n), torch.randn(2, 3))
        assert graph.ir.ops()  # analysed before the clock starts
        return lambda: graph.tree(ascii=True)

    return prepare


def _diff(n: int) -> Callable[[], object]:
    a, b = torchatlas.trace(_Chain(n), torch.randn(2, 3)), torchatlas.trace(_Chain(n), torch.randn(2, 4))
    assert a.ir.ops() and b.ir.ops()  # analysed before the clock starts
    return lambda: torchatlas.diff(a, b)


def _stack_trace(folder: str) -> Callable[[int], Callable[[], object]]:
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
    clean = os.path.join(folder, "clean.pt2")
    torch.export.save(torch.export.export(model, (torch.randn(2, 8),)), clean)
    with zipfile.ZipFile(clean) as z:
        members = [(i.filename, z.read(i)) for i in z.infolist()]
    program_name = next(name for name, _ in members if name.endswith("models/model.json"))
    program = json.loads(dict(members)[program_name])

    def prepare(n: int) -> Callable[[], object]:
        edited = copy.deepcopy(program)
        edited["graph_module"]["graph"]["nodes"][0]["metadata"]["stack_trace"] = 'File "a", line 1, in ' * n
        path = os.path.join(folder, f"trace{n}.pt2")
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
            for name, data in members:
                z.writestr(name, json.dumps(edited).encode() if name == program_name else data)
        return lambda: torchatlas.from_export(path)

    return prepare


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every size (0.05 for a smoke run)")
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="torchatlas-scaling-")
    cases = [
        ("tree, long source line (spaces)", 12_000, _long_line(folder)),
        ("tree, op reading n values", 2_000, _traced_tree(_Gather)),
        ("tree, n unused ops", 6_000, _traced_tree(_Unused)),
        ("diff, n-op chains at two input sizes", 1_500, _diff),
        (".pt2, stack trace of n frame lines", 4_000, _stack_trace(folder)),
    ]
    print("| case | n | seconds | growth of the last doubling (2 = linear) |")
    print("|---|---:|---:|---:|")
    for label, first, prepare in cases:
        run = _timed(prepare)
        run(max(1, int(10 * args.scale)))  # warm up imports and caches
        sizes = [max(2, int(first * args.scale)) * 2**k for k in range(4)]
        seconds = [run(n) for n in sizes]
        for n, s in zip(sizes, seconds):
            growth = f"{seconds[-1] / max(seconds[-2], 1e-6):.1f}" if n == sizes[-1] else ""
            print(f"| {label} | {n:,} | {s:.3f} | {growth} |")


if __name__ == "__main__":
    main()
