"""Fused SiLU with an affine epilogue: y = x * sigmoid(x) * scale + shift, on a large fp32 vector."""

import torch

# A prime-ish length so that no power-of-two block size divides it: kernels must mask the tail.
NUMEL = 33_554_431
# Inputs span [-INPUT_RANGE, INPUT_RANGE]: wide enough that exp(x) overflows fp32 (x > 88.7).
INPUT_RANGE = 100


class Model(torch.nn.Module):
    def __init__(self, scale: float, shift: float):
        super().__init__()
        self.scale = scale
        self.shift = shift

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(x) * self.scale + self.shift


def get_inputs():
    x = (torch.rand(NUMEL) * 2.0 - 1.0) * INPUT_RANGE
    return [x]


def get_init_inputs():
    return [1.5, 0.5]
