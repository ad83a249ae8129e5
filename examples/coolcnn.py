"""The CoolCNN example: two parallel paths that join at an add.

The model lives in the package (``torchatlas._example``) so that ``torchatlas`` with no
arguments works from any install; this file is the copy users open and run:

    python examples/coolcnn.py
"""

import torchatlas
from torchatlas._example import CoolCNN, example_input

__all__ = ["CoolCNN", "example_input"]

if __name__ == "__main__":
    graph = torchatlas.trace(CoolCNN(), example_input())
    print(graph.tree())
