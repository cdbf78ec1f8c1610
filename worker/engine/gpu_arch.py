"""The GPU's compute capability, read without initialising CUDA in this process.

Builds run with no GPU visible (so they can run in parallel on CPU cores), so torch cannot
ask the device which architecture to compile for: TORCH_CUDA_ARCH_LIST is set from this.
"""

from __future__ import annotations

import functools
import logging
import shutil
import subprocess

log = logging.getLogger(__name__)


@functools.cache  # the GPU does not change under a running worker; nvidia-smi is slow to start
def detect_cuda_arch(gpu_index: int | None = None) -> str | None:
    """E.g. "9.0" for an H100, from nvidia-smi; None when there is no GPU or no nvidia-smi."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    command = [smi, "--query-gpu=compute_cap", "--format=csv,noheader"]
    if gpu_index is not None:
        command.insert(1, f"--id={gpu_index}")
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("nvidia-smi failed while reading the compute capability: %s", exc)
        return None
    values = sorted({line.strip() for line in done.stdout.splitlines() if line.strip()})
    if done.returncode != 0 or not values:
        log.warning("nvidia-smi gave no compute capability (exit %s): %s", done.returncode, done.stderr.strip())
        return None
    return ";".join(values)


@functools.cache
def gpu_uuid(gpu_index: int) -> str | None:
    """The GPU's UUID (GPU-...), from nvidia-smi; None when nvidia-smi cannot say."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        done = subprocess.run([smi, f"--id={gpu_index}", "--query-gpu=uuid", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("nvidia-smi failed while reading GPU %d's UUID: %s", gpu_index, exc)
        return None
    uuid = done.stdout.strip()
    return uuid if done.returncode == 0 and uuid.startswith("GPU-") else None


def visible_devices_value(gpu_index: int, only_its_node: bool) -> str:
    """CUDA_VISIBLE_DEVICES that names GPU `gpu_index` for a child process.

    CUDA numbers the GPUs a process can open from 0. A sandbox given only this GPU's device node sees it
    as device 0, so its host index names a GPU the sandbox cannot open (on the second GPU of a two-GPU
    host every judge failed with "No CUDA GPUs are available"). The UUID names it in either case."""
    uuid = gpu_uuid(gpu_index)
    return uuid or ("0" if only_its_node else str(gpu_index))
