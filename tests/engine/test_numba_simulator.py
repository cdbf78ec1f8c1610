"""CPU mode for Numba candidates (sandbox_side/runtime/numba_simulator.py), in a fresh interpreter
under NUMBA_ENABLE_CUDASIM=1 as the sandbox runs it: torch tensors work as device arrays without
copies, and each launch (not each device-function call) is recorded under the kernel's name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent('''
    import json, sys
    import torch
    from sandbox_side.runtime import kernel_trace
    kernel_trace.install_cpu_launch_hooks()
    import numba  # the package alone: the simulator is adapted only when numba.cuda is imported
    adapted_early = "numba.cuda" in sys.modules
    from numba import cuda
    from numba.cuda import as_cuda_array  # bound at import, as a candidate may write it

    @cuda.jit(device=True)
    def twice(v):
        return v * 2

    @cuda.jit
    def scale_kernel(x, out):
        i, j = cuda.grid(2)
        if i < x.shape[0] and j < x.shape[1]:
            out[i, j] = twice(x[i, j])

    class Model(torch.nn.Module):
        def forward(self, x):
            out = torch.empty(x.shape)
            scale_kernel[(2, 2), (4, 4)](x, as_cuda_array(out))
            return out

    x = torch.arange(48, dtype=torch.float32).reshape(6, 8).t()  # a transposed, non-contiguous view
    out = Model()(x)
    events = kernel_trace.trace_forward(Model(), [x], torch.device("cpu"))
    names = [e["name"] for e in events["cpu"]]
    try:
        as_cuda_array([1.0])
        refused = False
    except TypeError:
        refused = True
    print(json.dumps({
        "adapted_early": adapted_early, "exact": bool(torch.equal(out, x * 2)),
        "launches": [n[len(events["launch_prefix"]):] for n in names if n.startswith(events["launch_prefix"])],
        "aten": sorted({n for n in names if n.startswith("aten::")}), "refused": refused,
        "is_cuda_array": cuda.is_cuda_array(x),
    }))
''')


def test_simulator_takes_torch_tensors_and_records_each_launch():
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["adapted_early"] is False
    # The kernel wrote through zero-copy views, strides included.
    assert report["exact"] is True
    # One launch, named after the kernel; the device function it calls is no launch.
    assert report["launches"] == ["scale_kernel"]
    # Handing tensors to the simulator runs no ATen compute the attribution could count.
    assert report["aten"] == ["aten::empty"], report["aten"]
    assert report["refused"] is True and report["is_cuda_array"] is True
