import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_kernel(a_ptr, b_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    a = tl.load(a_ptr + offsets, mask=mask)
    b = tl.load(b_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, a + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        a = a.contiguous()
        b = b.contiguous()
        out = torch.empty_like(a)
        n_elements = out.numel()
        half = n_elements // 2
        current = torch.cuda.current_stream()
        side = torch.cuda.Stream()
        side.wait_stream(current)
        with torch.cuda.stream(side):
            add_kernel[(triton.cdiv(half, 1024),)](a, b, out, half, BLOCK_SIZE=1024)
        rest = n_elements - half
        add_kernel[(triton.cdiv(rest, 1024),)](a[half:], b[half:], out[half:], rest, BLOCK_SIZE=1024)
        current.wait_stream(side)
        out.record_stream(side)
        return out
