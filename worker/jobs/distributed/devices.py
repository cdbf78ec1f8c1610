"""Find the visible GPUs without initialising CUDA in this process.

Order: CUDA_VISIBLE_DEVICES (when set), else `nvidia-smi -L`, else /proc/driver/nvidia/gpus.
Initialising CUDA in a server or Celery parent would pin memory on every GPU and break fork.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

_SMI_LINE = re.compile(r"^GPU (\d+):", re.MULTILINE)


def visible_gpus() -> list[str]:
    """GPU indices (as strings) this process may use; [] when there is none."""
    pinned = os.environ.get("CUDA_VISIBLE_DEVICES")
    if pinned is not None:
        entries = [e.strip() for e in pinned.split(",") if e.strip()]
        # "-1" or an empty value hides every GPU (CUDA's own convention).
        return [] if not entries or entries[0] == "-1" else entries
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            listing = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20, check=False)
            if listing.returncode == 0:
                return _SMI_LINE.findall(listing.stdout)
        except (OSError, subprocess.TimeoutExpired):
            pass
    proc_dir = Path("/proc/driver/nvidia/gpus")
    if proc_dir.is_dir():
        return [str(i) for i, _ in enumerate(sorted(proc_dir.iterdir()))]
    return []
