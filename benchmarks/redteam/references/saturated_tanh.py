"""A degenerate problem: tanh(x + 50) is 1.0 to float32 precision for any randn input."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.tanh(x + 50.0)


def get_inputs():
    return [torch.randn(4096)]


def get_init_inputs():
    return []
