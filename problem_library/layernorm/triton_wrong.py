"""Leaves out eps: normalises by 1 / sqrt(var) instead of 1 / sqrt(var + eps). Invisible for rows
of unit variance, but these rows have variance 1e-4, where eps = 1e-5 changes the scale by ~5%."""

import torch
import triton
import triton.language as tl


@triton.jit
def _layernorm_row_kernel(x_ptr, w_ptr, b_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    mean = tl.sum(x, axis=0) / n_cols
    # Two passes: the variance of the centred values, which does not cancel for rows with a large mean.
    centred = tl.where(mask, x - mean, 0.0)
    var = tl.sum(centred * centred, axis=0) / n_cols
    rstd = 1.0 / tl.sqrt(var)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0)
    tl.store(y_ptr + row * n_cols + cols, centred * rstd * w + b, mask=mask)


class ModelNew(torch.nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        # Same construction and draws as the reference, so the parameters are identical.
        self.norm = torch.nn.LayerNorm(hidden, eps=1e-5)
        with torch.no_grad():
            self.norm.weight.normal_(1.0, 0.2)
            self.norm.bias.normal_(0.0, 0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        rows, cols = x.shape
        y = torch.empty_like(x)
        block = triton.next_power_of_2(cols)
        _layernorm_row_kernel[(rows,)](x, self.norm.weight, self.norm.bias, y, cols, self.norm.eps, BLOCK=block,
                                       num_warps=8 if block >= 2048 else 4)
        return y
