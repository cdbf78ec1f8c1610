"""Slows the reference's timing: an honest Triton add that, when imported, starts three busy-loop
processes. They share one byte with the runner (an anonymous shared mapping): forward sets it while it
runs, and they pause while it is set, so they compete for the CPU (and on a GPU host for the lane's
reserved cores) with everything but the candidate's own timed calls, the reference's included. Measured
without a defence: the reference's median went from 0.64-0.90 ms to 27-36 ms and the speedup from
0.03-0.05 to 0.72-1.39, verdict `ok`, clock check passed. Static rules catch the fork (KJ404); with them
off, the supervisor pauses the candidate's whole sandbox while the reference is timed, so the processes
cannot run then (tests/engine/test_timing_isolation.py)."""
import mmap
import os
import time

import torch
import triton
import triton.language as tl

BUSY = 3
_IN_FORWARD = mmap.mmap(-1, 1)


def _spin():
    count = 0
    while True:
        if _IN_FORWARD[0]:
            time.sleep(0.0002)  # quiet while the candidate itself is timed
        else:
            for _ in range(20000):
                count += 1


def _start_helpers():
    for _ in range(BUSY):
        if os.fork() == 0:
            try:
                _spin()
            finally:
                os._exit(0)


_start_helpers()


@triton.jit
def add_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(a_ptr + offsets, mask=mask) + tl.load(b_ptr + offsets, mask=mask),
             mask=mask)


class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        _IN_FORWARD[0] = 1
        try:
            out = torch.empty_like(a)
            n = a.numel()
            add_kernel[(triton.cdiv(n, 1024),)](a, b, out, n, BLOCK=1024)
            return out
        finally:
            _IN_FORWARD[0] = 0
