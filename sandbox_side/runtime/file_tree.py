"""A folder as one message: a manifest and the files' bytes (the sandbox side; the supervisor's side,
which trusts nothing in it, is sandbox_side/build/ext_tree.py `unpack`).

Used by a CUDA build to send its extension folder back, and by a candidate runner to send the Triton
kernels it compiled: nothing either writes lands on the host disk except what the supervisor writes.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


class TooLarge(ValueError):
    """The folder holds more than the bound allows."""


def pack(root: Path, max_bytes: int | None = None) -> tuple[list[dict], bytes]:
    """Every folder and regular file under `root` (symlinks and other kinds are left out); TooLarge past
    `max_bytes` of file contents."""
    total = 0
    manifest: list[dict] = []
    chunks: list[bytes] = []
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        relative = Path(folder).relative_to(root)
        for name in dirs:
            if not os.path.islink(os.path.join(folder, name)):
                manifest.append({"path": str(relative / name), "dir": True})
        for name in sorted(files):
            path = os.path.join(folder, name)
            info = os.lstat(path)
            if not stat.S_ISREG(info.st_mode):
                continue
            total += info.st_size
            if max_bytes is not None and total > max_bytes:
                raise TooLarge(f"{root} holds more than {max_bytes} bytes")
            with open(path, "rb") as handle:
                data = handle.read()
            manifest.append({"path": str(relative / name), "size": len(data), "mtime_ns": info.st_mtime_ns,
                             "executable": bool(info.st_mode & stat.S_IXUSR)})
            chunks.append(data)
    return manifest, b"".join(chunks)
