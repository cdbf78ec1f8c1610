"""Dense fp32 matrix product C = A @ B with A (M, K) and B (K, N)."""

import torch

M = 2048
N = 2048
# K is deliberately not a multiple of the usual K-tile sizes (16, 32, 64): kernels must mask it.
K = 2050


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def get_inputs():
    # A is scaled by 1/sqrt(K) so entries of C stay O(1): then fp32 rounding differences from
    # another summation order stay near 1e-6, well inside a 1e-4 tolerance.
    a = torch.randn(M, K) * K**-0.5
    b = torch.randn(K, N)
    return [a, b]


def get_init_inputs():
    return []
