import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.autotune(
    configs=[triton.Config({"BLOCK": 256}, num_warps=2), triton.Config({"BLOCK": 512}, num_warps=4)],
    key=["n_elements"],
)
@triton.jit
def scale_shift_kernel(x_ptr, scale_ptr, shift_ptr, out_ptr, n_elements, features, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    feature = offsets % features
    x = tl.load(x_ptr + offsets, mask=mask)
    scale = tl.load(scale_ptr + feature, mask=mask)
    shift = tl.load(shift_ptr + feature, mask=mask)
    tl.store(out_ptr + offsets, x * scale + shift, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(features))
        self.shift = nn.Parameter(torch.randn(features))

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        n_elements = x.numel()
        features = self.scale.numel()
        grid = lambda meta: (triton.cdiv(n_elements, meta["BLOCK"]),)
        scale_shift_kernel[grid](x, self.scale, self.shift, out, n_elements, features)
        return out
