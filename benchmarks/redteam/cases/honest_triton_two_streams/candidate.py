import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_kernel(a_ptr, b_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    tl.store(out_ptr + offsets, tl.load(a_ptr + offsets, mask=mask) + tl.load(b_ptr + offsets, mask=mask), mask=mask)


class ModelNew(nn.Module):
    """Splits the add over two side streams, created on first use and kept on the module; each waits for
    the current stream before it starts and is joined back with an event before forward returns."""

    def __init__(self):
        super().__init__()
        self.streams = None
        self.done = None

    def forward(self, a, b):
        a = a.contiguous()
        b = b.contiguous()
        out = torch.empty_like(a)
        if self.streams is None:
            self.streams = [torch.cuda.Stream() for _ in range(2)]
            self.done = [torch.cuda.Event() for _ in range(2)]
        n = out.numel()
        half = n // 2
        current = torch.cuda.current_stream()
        for part, (stream, event) in enumerate(zip(self.streams, self.done, strict=True)):
            start = part * half
            count = half if part == 0 else n - half
            stream.wait_stream(current)
            with torch.cuda.stream(stream):
                add_kernel[(triton.cdiv(count, 1024),)](a[start:], b[start:], out[start:], count, BLOCK_SIZE=1024)
                event.record(stream)
            current.wait_event(event)
        return out
