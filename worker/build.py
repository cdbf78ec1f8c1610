"""Stage 2: build the candidate's CUDA extension in the sandbox, without a GPU.

Built extensions go to a cache directory keyed by the candidate's source hash (plus torch
version and target architecture); the GPU stage gets a private copy of that directory, and
torch finds the built library there instead of compiling again.
"""

from __future__ import annotations

import fcntl
import hashlib
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from .launch import RunnerConfig, RunnerPaths, RunnerSession, UserFailure
from .models import SandboxKind
from .sandbox import ResourceLimits
from .settings import EngineSettings

BUILT_MARKER = "BUILT"
_ERROR_LINE = re.compile(r"(error|Error|ERROR|undefined reference|fatal)")
MAX_LOG_CHARS = 4000


@dataclass
class BuildOutcome:
    ext_dir: Path
    cached: bool


def build_key(candidate: str, torch_version: str, arch: str | None) -> str:
    digest = hashlib.sha256()
    for part in (candidate, torch_version, arch or ""):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:32]


def trim_compiler_log(text: str, max_chars: int = MAX_LOG_CHARS) -> str:
    """The first error lines (with file:line) and a little context, not the whole log."""
    lines = text.splitlines()
    keep: list[str] = []
    for index, line in enumerate(lines):
        if _ERROR_LINE.search(line) and "error_" not in line:
            keep.extend(lines[index:index + 3])
            if sum(len(k) for k in keep) > max_chars or len(keep) > 40:
                break
    if not keep:
        keep = lines[-30:]
    excerpt = "\n".join(dict.fromkeys(keep))  # drop repeated lines, keep order
    return excerpt[:max_chars]


def build_cuda_candidate(
    source_file: Path, candidate: str, *, settings: EngineSettings, limit_s: float, sandbox: SandboxKind,
    torch_version: str,
) -> BuildOutcome:
    key = build_key(candidate, torch_version, settings.cuda_arch())
    ext_dir = settings.build_cache / key
    settings.build_cache.mkdir(parents=True, exist_ok=True)
    with open(settings.build_cache / f"{key}.lock", "w") as lock:
        # Two jobs with the same candidate build once; the second waits and reuses it.
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (ext_dir / BUILT_MARKER).exists():
            return BuildOutcome(ext_dir=ext_dir, cached=True)
        if ext_dir.exists():
            shutil.rmtree(ext_dir)
        ext_dir.mkdir(parents=True)
        out_dir = ext_dir.parent / f"{key}.out"
        out_dir.mkdir(exist_ok=True)
        config = RunnerConfig(role="candidate", mode="build", device="cuda",
                              paths=RunnerPaths(source=source_file, out_dir=out_dir, ext_dir=ext_dir),
                              sandbox=sandbox)
        limits = ResourceLimits(cpu_s=int(limit_s * 4) + 30)
        deadline = time.monotonic() + limit_s
        session = RunnerSession(config, settings, limits)
        try:
            with session:
                session.wait_ready(deadline)
        except UserFailure as failure:
            shutil.rmtree(ext_dir, ignore_errors=True)
            failure.detail = trim_compiler_log(failure.message + "\n" + failure.detail + "\n" + session.logs())
            raise
        finally:
            shutil.rmtree(out_dir, ignore_errors=True)
        (ext_dir / BUILT_MARKER).write_text(key)
        return BuildOutcome(ext_dir=ext_dir, cached=False)


def private_copy(ext_dir: Path, destination: Path) -> Path:
    """A writable copy for one run (torch takes a lock file in the build directory)."""
    shutil.copytree(ext_dir, destination, symlinks=True, copy_function=shutil.copy2)
    return destination
