"""A build's extension folder as one message: a manifest and the files' bytes.

The build sandbox writes only into size-capped tmpfs folders; what the run needs (sources, objects,
the library, ninja's state) comes back as its reply's payload and the supervisor writes it into the build
cache itself. Modification times travel to the nanosecond: ninja decides from them (and from its
own log) that the run's load_inline has nothing to rebuild. The sandbox side is
sandbox_side/runtime/file_tree.py (`pack`, also used by a candidate runner to return its Triton cache);
`unpack` here, in the supervisor, trusts nothing in the manifest.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath


class BadTree(ValueError):
    """The manifest or its bytes do not describe a plain folder of regular files."""


def _checked(path: object) -> PurePosixPath:
    if not isinstance(path, str) or not path or "\0" in path:
        raise BadTree(f"bad path {path!r}")
    pure = PurePosixPath(path)
    if pure.is_absolute() or any(part in ("..", ".", "") for part in path.split("/")):
        raise BadTree(f"path {path!r} leaves the folder")
    return pure


def unpack(manifest: object, data: bytes | bytearray | memoryview, destination: Path) -> int:
    """Write the tree under `destination` (an existing, empty folder); returns the number of files."""
    if not isinstance(manifest, list):
        raise BadTree("the manifest is not a list")
    view = memoryview(data)
    offset = files = 0
    for entry in manifest:
        if not isinstance(entry, dict):
            raise BadTree("a manifest entry is not an object")
        target = destination.joinpath(*_checked(entry.get("path")).parts)
        if entry.get("dir") is True:
            target.mkdir(mode=0o755, exist_ok=True)
            continue
        size, mtime = entry.get("size"), entry.get("mtime_ns")
        if type(size) is not int or type(mtime) is not int or size < 0 or offset + size > len(view):
            raise BadTree(f"bad size or time for {entry.get('path')!r}")
        if not target.parent.is_dir() or target.parent.is_symlink():
            raise BadTree(f"{entry.get('path')!r} has no folder before it in the manifest")
        mode = 0o755 if entry.get("executable") is True else 0o644
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(view[offset:offset + size])
        os.utime(target, ns=(mtime, mtime))
        offset += size
        files += 1
    if offset != len(view):
        raise BadTree(f"{len(view) - offset} bytes after the last file")
    return files
