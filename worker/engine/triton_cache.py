"""Triton kernels compiled once per candidate source, not once per sandbox.

Each candidate source (its sha256, with the Triton version) has a cache folder on the host. A
runner that serves that candidate gets a copy of it in its own extension folder (the runner's
`/kj/ext`, where TRITON_CACHE_DIR points; worker/engine/launch.py), and after the job what the
runner compiled is published back to the candidate's folder, once. Only runs of the same source
read it: its correctness run, a retry, and duplicates of the same source, which are the same
candidate. A candidate can never read or write another candidate's folder: the folder is copied
into the runner of that source only, and nothing a runner wrote reaches another source's folder.

The runner's copy is untrusted when it comes back: only regular files are published (no links),
within a size bound, and the first publication wins (a later runner of the same source started
from it and has nothing new).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
from pathlib import Path

from .baselines import package_version

log = logging.getLogger(__name__)

CACHE_DIR_NAME = "triton-cache"  # inside a runner's extension folder, and inside a candidate's folder
ORIGIN_FILE = "kj-triton-origin"  # beside the runner's extension folder, outside its mount
MAX_PUBLISH_BYTES = 256 * 1024**2
MAX_PUBLISH_FILES = 20_000


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


def remember_origin(source: Path, runner_ext_dir: Path) -> None:
    """Note, outside the runner's view, which candidate folder its extension folder was filled from."""
    (runner_ext_dir.parent / ORIGIN_FILE).write_text(str(source))


def publish_from_slot(root: Path, slot_dir: Path) -> bool:
    """After a runner's job: its Triton cache goes to its candidate's folder if that has none yet."""
    origin_file = slot_dir / ORIGIN_FILE
    if not origin_file.is_file():
        return False
    origin = Path(origin_file.read_text())
    produced = slot_dir / "ext" / CACHE_DIR_NAME
    target = origin / CACHE_DIR_NAME
    if not is_candidate_folder(root, origin) or target.exists() or not produced.is_dir():
        return False
    staging = Path(tempfile.mkdtemp(prefix=".publish-", dir=origin))
    try:
        if not _copy_regular_files(produced, staging):
            return False
        try:
            os.rename(staging, target)  # atomic: readers see all of it or none
        except OSError:
            return False  # another runner of the same source published first
        staging = None
        return True
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)


def _copy_regular_files(source: Path, destination: Path) -> bool:
    """Copy the regular files under `source` (never following a link); False past the bounds."""
    total = files = 0
    for directory, subdirs, names in os.walk(source, followlinks=False):
        relative = Path(directory).relative_to(source)
        subdirs[:] = [d for d in subdirs if not (Path(directory) / d).is_symlink()]
        for name in names:
            path = Path(directory) / name
            if path.is_symlink() or not path.is_file():
                continue
            size = path.stat().st_size
            total += size
            files += 1
            if total > MAX_PUBLISH_BYTES or files > MAX_PUBLISH_FILES:
                log.info("a runner's Triton cache is over %d bytes or %d files; not kept", MAX_PUBLISH_BYTES,
                         MAX_PUBLISH_FILES)
                return False
            (destination / relative).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, destination / relative / name, follow_symlinks=False)
    return True
