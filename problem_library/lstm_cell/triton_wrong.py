"""Swaps the input and forget gates: reads PyTorch's gate chunks as (forget, input, cell, output)
instead of (input, forget, cell, output)."""

import torch
import triton
import triton.language as tl


@triton.jit
def _sigmoid(x):
    return 1.0 / (1.0 + tl.exp(-x))


@triton.jit
def _tanh(x):
    return 2.0 * _sigmoid(2.0 * x) - 1.0


@triton.jit
def _gate_preactivation(gx_ptr, gh_ptr, b_ih_ptr, b_hh_ptr, gate_base, col, hidden, mask, k: tl.constexpr):
    return (tl.load(gx_ptr + gate_base + k * hidden, mask=mask, other=0.0)
            + tl.load(gh_ptr + gate_base + k * hidden, mask=mask, other=0.0)
            + tl.load(b_ih_ptr + col + k * hidden, mask=mask, other=0.0)
            + tl.load(b_hh_ptr + col + k * hidden, mask=mask, other=0.0))


@triton.jit
def _lstm_gates_kernel(gx_ptr, gh_ptr, b_ih_ptr, b_hh_ptr, c_ptr, h_out_ptr, c_out_ptr, n, hidden,
                       BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    row = offsets // hidden
    col = offsets % hidden
    gate_base = row * 4 * hidden + col
    i = _sigmoid(_gate_preactivation(gx_ptr, gh_ptr, b_ih_ptr, b_hh_ptr, gate_base, col, hidden, mask, 1))
    f = _sigmoid(_gate_preactivation(gx_ptr, gh_ptr, b_ih_ptr, b_hh_ptr, gate_base, col, hidden, mask, 0))
    g = _tanh(_gate_preactivation(gx_ptr, gh_ptr, b_ih_ptr, b_hh_ptr, gate_base, col, hidden, mask, 2))
    o = _sigmoid(_gate_preactivation(gx_ptr, gh_ptr, b_ih_ptr, b_hh_ptr, gate_base, col, hidden, mask, 3))
    c_next = f * tl.load(c_ptr + offsets, mask=mask, other=0.0) + i * g
    tl.store(c_out_ptr + offsets, c_next, mask=mask)
    tl.store(h_out_ptr + offsets, o * _tanh(c_next), mask=mask)


class ModelNew(torch.nn.Module):
    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        # Same construction as the reference, so the parameters are drawn identically.
        self.cell = torch.nn.LSTMCell(input_size, hidden_size)

    def forward(self, x: torch.Tensor, h: torch.Tensor, c: torch.Tensor):
        hidden = self.cell.hidden_size
        gx = torch.matmul(x, self.cell.weight_ih.t()).contiguous()
        gh = torch.matmul(h, self.cell.weight_hh.t()).contiguous()
        c = c.contiguous()
        h_next = torch.empty_like(c)
        c_next = torch.empty_like(c)
        n = c.numel()
        _lstm_gates_kernel[(triton.cdiv(n, 512),)](gx, gh, self.cell.bias_ih, self.cell.bias_hh, c, h_next, c_next,
                                                   n, hidden, BLOCK=512, num_warps=4)
        return h_next, c_next
