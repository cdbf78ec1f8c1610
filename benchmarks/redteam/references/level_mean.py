"""Mean of a (4096, 256) float32 matrix whose values stay within 2% of a level drawn per call (0.5 to 1.5),
as a one-element tensor. The level moves the output by far more than the tolerance between calls; a mean
over a quarter of the rows is off by ~1e-5 of it, far inside the tolerance, and so is a spike's weight."""
import torch
import torch.nn as nn

ROWS, COLS = 4096, 256


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x.mean().reshape(1)


def get_inputs():
    level = 0.5 + torch.rand(())
    return [level * (1.0 + 0.02 * torch.rand(ROWS, COLS))]


def get_init_inputs():
    return []
