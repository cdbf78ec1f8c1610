"""(256, 131072) @ (131072, 256) in float32: with K this large the reference's own rounding error is
within a factor ~20 of half-precision operands' on randn inputs, so the error ratio alone cannot tell
an honest fp32 kernel from an fp16 one there."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return a @ b


def get_inputs():
    return [torch.randn(256, 131072), torch.randn(131072, 256)]


def get_init_inputs():
    return []
