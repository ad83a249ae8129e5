"""The CoolCNN example: two parallel paths that join at an add.

    python examples/coolcnn.py                  # print its tree
    torchatlas examples/coolcnn.py:CoolCNN      # the same from the command line

The package ships the same model as ``torchatlas._example`` so that ``torchatlas`` with
no arguments works from any install (a test keeps the two identical).
"""

import torch
import torch.nn as nn

import torchatlas


class CoolCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.initial_conv = nn.Conv2d(in_channels=3, out_channels=16, kernel_size=3, padding=1)
        self.parallel_conv = nn.Conv2d(in_channels=3, out_channels=16, kernel_size=3, padding=1)
        self.secondary_conv = nn.Conv2d(in_channels=16, out_channels=32, kernel_size=3, padding=1)
        self.max_pool = nn.MaxPool2d(kernel_size=2, stride=2, padding=0)
        self.fully_connected1 = nn.Linear(32 * 8 * 8, 128)
        self.output_layer = nn.Linear(128, 10)

    def forward(self, x):
        main_path = self.max_pool(torch.relu(self.initial_conv(x)))
        parallel_path = self.max_pool(torch.relu(self.parallel_conv(x)))
        x = (main_path + parallel_path) / 2
        x = self.max_pool(torch.relu(self.secondary_conv(x)))
        x = x.view(-1, 32 * 8 * 8)
        x = torch.relu(self.fully_connected1(x))
        x = self.output_layer(x)
        return x


def example_input() -> torch.Tensor:
    """A batch of one 32x32 RGB image."""
    return torch.randn(1, 3, 32, 32)


if __name__ == "__main__":
    graph = torchatlas.trace(CoolCNN(), example_input())
    print(graph.tree())
