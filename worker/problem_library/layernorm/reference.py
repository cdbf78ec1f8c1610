"""LayerNorm over the last dimension (torch.nn.LayerNorm, eps 1e-5, affine) of (ROWS, HIDDEN) fp32.

The rows have a large offset and a small spread (variance 1e-4), so eps matters and a
one-pass E[x^2] - E[x]^2 variance cancels catastrophically. The affine weight and bias are
drawn at construction so that a kernel that ignores them fails.
"""

import torch

ROWS = 8192
HIDDEN = 4096


class Model(torch.nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.norm = torch.nn.LayerNorm(hidden, eps=1e-5)
        with torch.no_grad():
            self.norm.weight.normal_(1.0, 0.2)
            self.norm.bias.normal_(0.0, 0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


def get_inputs():
    return [0.01 * torch.randn(ROWS, HIDDEN) + 3.0 * torch.randn(ROWS, 1)]


def get_init_inputs():
    return [HIDDEN]
