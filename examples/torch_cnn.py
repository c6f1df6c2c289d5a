"""A small PyTorch CNN to profile from its Python source: `tracelink profile examples/torch_cnn.py:make -o out/torch_cnn`.

`make()` returns the module (in eval mode) and its example arguments (they become the run's inputs).
Module paths (`features/blocks.1/conv`) group the time by component; the shared `block` called twice
in `forward` shows up as two callers of its lines.
"""

import torch
import torch.nn as nn


class ConvBlock(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)
        self.norm = nn.BatchNorm2d(channels)

    def forward(self, x):
        return torch.relu(self.norm(self.conv(x)))


class Features(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 32, 3, stride=2, padding=1)
        self.blocks = nn.ModuleList([ConvBlock(32) for _ in range(2)])

    def forward(self, x):
        x = self.stem(x)
        for block in self.blocks:
            x = block(x)
        return x


class SmallCNN(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        self.features = Features()
        self.block = ConvBlock(32)
        self.head = nn.Linear(32, classes)

    def forward(self, x):
        x = self.features(x)
        x = self.block(x)
        x = self.block(x)
        return self.head(x.mean((2, 3)))


def make():
    torch.manual_seed(0)
    return SmallCNN().eval(), (torch.randn(1, 3, 64, 64),)
