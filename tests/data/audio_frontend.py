"""An audio front end in PyTorch (as Wav2Vec2's feature extractor, in miniature): two strided 1-D
convolutions on the raw signal with a GELU between them, then a linear projection."""

import torch
import torch.nn as nn


class FrontEnd(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Conv1d(1, 64, 10, stride=5)
        self.second = nn.Conv1d(64, 64, 3, stride=2)
        self.projection = nn.Linear(64, 32)

    def forward(self, signal: torch.Tensor) -> torch.Tensor:
        features = torch.nn.functional.gelu(self.first(signal))
        features = self.second(features)
        return self.projection(features.transpose(1, 2))


def make():
    torch.manual_seed(0)
    return FrontEnd().eval(), (torch.randn(1, 1, 8000),)
