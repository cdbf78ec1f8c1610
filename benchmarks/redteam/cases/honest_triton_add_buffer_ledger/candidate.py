"""Honest counterpart of c3_cache_keyed_on_sampled_values: the same ledger, keyed the same way on the inputs'
data pointers and two sampled values, but it keeps output *buffers*, not results: every call runs the kernel
and writes its answer into the buffer it finds (a workspace reused across calls). Whatever the key says, the
output is computed from the inputs of this call, so the timing pool's variants change nothing for it."""
import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(a_ptr + offsets, mask=mask) + tl.load(b_ptr + offsets, mask=mask),
             mask=mask)


def _where(t):
    return t.data_ptr()


class _Ledger:
    """A few output buffers, found again by a fingerprint of the inputs."""

    def __init__(self):
        self.rows = []

    def find(self, key):
        for known, value in self.rows:
            if known == key:
                return value
        return None

    def note(self, key, value):
        self.rows.append((key, value))
        del self.rows[:-16]


LEDGER = _Ledger()


def _fingerprint(a, b):
    n = a.numel()
    return (_where(a), _where(b), float(a.reshape(-1)[n // 3]), float(b.reshape(-1)[(2 * n) // 3]))


class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        key = _fingerprint(a, b)
        out = LEDGER.find(key)
        if out is None:
            out = torch.empty_like(a)
            LEDGER.note(key, out)
        n = a.numel()
        add_kernel[(triton.cdiv(n, 1024),)](a, b, out, n, BLOCK=1024)
        return out
