"""Treats the padding as zeros instead of -inf: a border window whose real values are all
negative returns 0 instead of its largest value."""

import torch
import triton
import triton.language as tl

KERNEL = 3
STRIDE = 2
PADDING = 1


@triton.jit
def _maxpool2d_kernel(x_ptr, y_ptr, n_out, height, width, out_h, out_w,
                      KSIZE: tl.constexpr, STRIDE: tl.constexpr, PAD: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_out
    ow = offsets % out_w
    oh = (offsets // out_w) % out_h
    plane = offsets // (out_w * out_h)  # n * C + c
    best = tl.full((BLOCK,), float("-inf"), dtype=tl.float32)
    for kh in tl.static_range(KSIZE):
        for kw in tl.static_range(KSIZE):
            ih = oh * STRIDE - PAD + kh
            iw = ow * STRIDE - PAD + kw
            inside = mask & (ih >= 0) & (ih < height) & (iw >= 0) & (iw < width)
            value = tl.load(x_ptr + (plane * height + ih) * width + iw, mask=inside, other=0.0)
            best = tl.maximum(best, value)
    tl.store(y_ptr + offsets, best, mask=mask)


class ModelNew(torch.nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n, c, h, w = x.shape
        out_h = (h + 2 * PADDING - KERNEL) // STRIDE + 1
        out_w = (w + 2 * PADDING - KERNEL) // STRIDE + 1
        y = torch.empty((n, c, out_h, out_w), dtype=x.dtype, device=x.device)
        n_out = y.numel()
        _maxpool2d_kernel[(triton.cdiv(n_out, 512),)](x, y, n_out, h, w, out_h, out_w, KSIZE=KERNEL,
                                                       STRIDE=STRIDE, PAD=PADDING, BLOCK=512, num_warps=4)
        return y
