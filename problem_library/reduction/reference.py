"""Row-wise L2 norm of a (BATCH, DIM) fp32 tensor: y[b] = sqrt(sum_d x[b, d]^2)."""

import torch

BATCH = 8192
# Not a multiple of the usual block sizes (256, 1024): each row ends in a partial block.
DIM = 8000


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.linalg.vector_norm(x, ord=2, dim=1)


def get_inputs():
    return [torch.randn(BATCH, DIM)]


def get_init_inputs():
    return []
