"""Mean and max over the middle axis of a (BATCH, REDUCE, COLS) fp32 tensor: returns
(x.mean(dim=1), x.amax(dim=1)), each (BATCH, COLS)."""

import torch

BATCH = 64
REDUCE = 512
COLS = 1024


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor):
        return x.mean(dim=1), x.amax(dim=1)


def get_inputs():
    return [torch.randn(BATCH, REDUCE, COLS)]


def get_init_inputs():
    return []
