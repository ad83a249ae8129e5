"""How long a ``backward=True`` picture takes, and how big it is (issue 40).

    python bench/bench_backward.py [--depth 2] [--image /tmp/resnet18-backward.png]

Traces torchvision's ResNet-18 (random weights, a 1×3×64×64 input) with ``backward=True``,
then times ``to_dot`` and Graphviz ``dot`` of the depth-2 diagram and reports its size
(nodes + edges) and, with ``--image``, the PNG's pixel size. The backward part is drawn apart,
its reads of the tensors autograd saved drawn as ``↪`` stand-ins beside their readers.
"""

from __future__ import annotations

import argparse
import struct
import time

import torch
import torchvision

import torchatlas
from torchatlas._render._dot import DotOptions, diagram_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--image", default=None, help="also write the PNG here and report its size")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    t0 = time.perf_counter()
    graph = torchatlas.trace(model, torch.randn(1, 3, 64, 64), backward=True)
    traced = time.perf_counter() - t0
    analysed = graph.ir  # analyse once, outside the timings below
    t0 = time.perf_counter()
    graph.to_dot(depth=args.depth)
    to_dot_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    png = graph.render(format="png", depth=args.depth)
    dot_s = time.perf_counter() - t0
    width, height = struct.unpack(">II", png[16:24])
    if args.image:
        with open(args.image, "wb") as f:
            f.write(png)
    size = diagram_size(analysed, DotOptions(depth=args.depth))
    print(f"resnet18 backward=True depth={args.depth}: trace {traced:.2f} s, to_dot {to_dot_s:.2f} s, "
          f"to_dot + dot -Tpng {dot_s:.2f} s, {size} nodes+edges, {width}×{height} px")


if __name__ == "__main__":
    main()
