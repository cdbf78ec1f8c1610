"""Triton kernels compiled once per candidate source, not once per sandbox.

Each candidate source (its sha256, with the Triton version) has a cache folder on the host. A
runner that serves that candidate gets it read-only as its built extension and copies it into its
own size-capped extension folder (`/kj/ext`, where TRITON_CACHE_DIR points; worker/engine/launch.py).
After the job, while the runner is still up, the supervisor asks it for what it compiled (op
`triton_cache`: a manifest and the files' bytes as its reply's payload, sandbox_side/runtime/file_tree.py) and
publishes that into the candidate's folder, once. Only runs of the same source read it: its
correctness run, a retry, and duplicates of the same source, which are the same candidate. A
candidate can never read or write another candidate's folder: the folder goes to runners of that
source only, and nothing a runner sends reaches another source's folder.

What comes back is untrusted: it is written by ext_tree.unpack (relative paths, regular files, sizes
that add up), within a size bound, and the first publication wins (a later runner of the same source
started from it and has nothing new).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import TypeGuard

from sandbox_side.build import ext_tree
from sandbox_side.runtime.messages import TritonCacheDone
from worker.engine.timing.baselines import package_version

log = logging.getLogger(__name__)

CACHE_DIR_NAME = "triton-cache"  # inside a runner's extension folder, and inside a candidate's folder
MAX_PUBLISH_BYTES = 256 * 1024**2


def folder_for(root: Path, candidate: str) -> Path:
    """The candidate's cache folder (created empty the first time)."""
    digest = hashlib.sha256()
    for part in (candidate, package_version("triton") or ""):
        digest.update(part.encode())
        digest.update(b"\0")
    folder = root / digest.hexdigest()[:32]
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def is_candidate_folder(root: Path, folder: Path) -> bool:
    try:
        return folder.resolve().parent == root.resolve()
    except OSError:
        return False


def wanted(folder: Path | None) -> TypeGuard[Path]:
    """Whether a runner of the candidate with this folder should send its compiled kernels back."""
    return folder is not None and not (folder / CACHE_DIR_NAME).exists()


def publish(root: Path, folder: Path, reply: TritonCacheDone) -> bool:
    """A runner's `triton_cache` reply into the candidate's folder, if that has no cache yet."""
    files, data = reply.files, reply.payload.read() if reply.payload is not None else b""
    target = folder / CACHE_DIR_NAME
    if not files or not is_candidate_folder(root, folder) or target.exists():
        return False
    staging = Path(tempfile.mkdtemp(prefix=".publish-", dir=folder))
    published = False
    try:
        ext_tree.unpack(files, data, staging)
        # mkdtemp makes it 0700: the later runners that copy it in run as unprivileged sandbox uids.
        os.chmod(staging, 0o755)
        os.rename(staging, target)  # atomic: readers see all of it or none; a second publisher loses
        published = True
        return True
    except (ext_tree.BadTree, OSError) as exc:
        log.info("a runner's Triton cache was not kept: %s", exc)
        return False
    finally:
        if not published:
            shutil.rmtree(staging, ignore_errors=True)
