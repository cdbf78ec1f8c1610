"""y = x * scale + shift with per-feature parameters, on a (16, 8, 32) tensor."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(features))
        self.shift = nn.Parameter(torch.randn(features))

    def forward(self, x):
        return x * self.scale + self.shift


def get_inputs():
    return [torch.randn(16, 8, 32)]


def get_init_inputs():
    return [32]
