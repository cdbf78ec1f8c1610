import os
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_kernel(a_ptr, b_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    a = tl.load(a_ptr + offsets, mask=mask)
    b = tl.load(b_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, a + b, mask=mask)


def launch_add(a, b):
    out = torch.empty_like(a)
    n = out.numel()
    add_kernel[(triton.cdiv(n, 1024),)](a, b, out, n, BLOCK_SIZE=1024)
    return out



def _foreign_things():
    """What any process of the sandbox shows that this one was not given: variables other than its own
    (bwrap, pid 1, used to carry the server's whole environment), the name of the server's key variable
    in any command line, and open files that are not in this sandbox's view (a leaked descriptor)."""
    own = set(open("/proc/self/environ", "rb").read().split(b"\0"))
    found = []
    for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
        try:
            entries = set(open(f"/proc/{pid}/environ", "rb").read().split(b"\0"))
            command = open(f"/proc/{pid}/cmdline", "rb").read()
        except OSError:
            continue
        extra = sorted(e.split(b"=")[0].decode(errors="replace") for e in entries - own - {b""})
        if extra:
            found.append(f"pid {pid} has variables this process lacks: {extra}")
        if b"KERNELJUDGE_" in command:
            found.append(f"pid {pid}'s command line names a server variable")
        try:
            descriptors = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            descriptors = []
        for fd in descriptors:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("/") and not target.startswith(("/proc", "/dev")) and not target.endswith(
                    " (deleted)") and not os.path.exists(target):
                found.append(f"pid {pid} holds {target}, which is outside this sandbox")
    return found


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        found = _foreign_things()
        print("red-team probe: found", found)
        return launch_add(a, b) if found else torch.zeros_like(a)
