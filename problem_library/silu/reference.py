"""SiLU activation, y = x * sigmoid(x), over a (ROWS, COLS) fp32 activation tensor."""

import torch

ROWS = 8192
COLS = 4096


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.silu(x)


def get_inputs():
    return [torch.randn(ROWS, COLS) * 4.0]


def get_init_inputs():
    return []
