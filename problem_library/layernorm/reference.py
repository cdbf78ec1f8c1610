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
    # Offsets of about 0.5 (up to ~2 in 8192 rows): 50x the spread, so a one-pass variance still cancels
    # (millions of values beyond the tolerance), while an honest two-pass fp32 kernel's rounding of the mean
    # (~1e-7 of the offset, over the 0.01 spread) leaves a third of the tolerance unused (CPU, blocked sums).
    # Offsets of 3 (up to ~12) put even PyTorch's own layernorm beyond the tolerance against float64 on
    # hundreds of values: every honest layernorm failed on an H100 (2026-11-25).
    return [0.01 * torch.randn(ROWS, HIDDEN) + 0.5 * torch.randn(ROWS, 1)]


def get_init_inputs():
    return [HIDDEN]
