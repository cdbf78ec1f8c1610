"""(64, 1024) @ (1024, 64) in float32, entries of scale 1/32: an output is about 0.03, so half-precision
operands stay inside the default absolute tolerance; only the comparison with float64 sees them."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return a @ b


def get_inputs():
    return [torch.randn(64, 1024) / 32, torch.randn(1024, 64) / 32]


def get_init_inputs():
    return []
