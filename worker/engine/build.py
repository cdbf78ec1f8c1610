"""Stage 2: build the candidate's CUDA extension in the sandbox, without a GPU.

The sandboxed builder (worker/engine/cuda_build) imports the candidate; each load_inline call builds
through the fast path (kernels with nvcc, no torch headers; host code against a precompiled torch
header) or, where the fast path declines, the usual full ninja build. The sandbox builds in its own
size-capped tmpfs and sends the built folder back over its pipe (cuda_build/ext_tree, at most
KERNELJUDGE_SANDBOX_EXT_MB); this process writes it to a cache directory keyed by the candidate's
source hash (plus torch version and target architecture). The GPU stage mounts it read-only into
the candidate's runner, which copies it into its own capped extension folder, and torch finds the
built library there instead of compiling again. The cache is on disk, so it outlives restarts.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..models import SandboxKind
from .cuda_build import ext_tree, pool
from .cuda_build.pch import ensure_pchs
from .cuda_build.source_map import map_compiler_log
from .cuda_build.toolchain import Toolchain, ToolchainMissing, find_toolchain
from .cuda_build.torch_support import support_env
from .launch import RUNTIME_DIR, RunnerConfig, RunnerPaths, UserFailure, runner_spec
from .sandbox import Mount, ResourceLimits, SandboxExited, SandboxProcess, SandboxTimeout, SandboxUnavailable
from .sandbox.bwrap import SYSTEM_DIRS
from .sandbox.process import PAYLOAD_KEY
from .settings import EngineSettings

BUILT_MARKER = "BUILT"
BUILD_PATHS = ("auto", "full")
# Target for builds on a machine without a GPU and without KERNELJUDGE_CUDA_ARCH (dev and CI checks).
ARCH_WITHOUT_GPU = "9.0"
RECORD_FILE = "kj_build.json"
_ERROR_LINE = re.compile(r"(error|Error|ERROR|undefined reference|fatal)")
MAX_LOG_CHARS = 4000
PACKAGE_DIR = Path(__file__).resolve().parent / "cuda_build"
# The package and the precompiled headers appear in the sandbox at their own paths: clang checks
# that every file a precompiled header was made from is still where it was.
BOOT = (f"import sys; sys.path.insert(0, {str(PACKAGE_DIR.parent)!r}); "
        "from cuda_build.sandboxed import main; raise SystemExit(main())")
_pch_ready: set[Path] = set()
_pch_lock = threading.Lock()


@dataclass
class BuildRecord:
    path: str  # fast | full
    reason: str  # why the full build was taken ("" on the fast path)
    seconds: float
    extensions: list[dict] = field(default_factory=list)  # per load_inline call: steps, timings, ABI check

    def summary(self) -> dict:
        """What an evaluation result carries (EvalResult.extra["build"])."""
        return {"path": self.path, "reason": self.reason, "seconds": self.seconds}


@dataclass
class BuildFailure(UserFailure):
    """A build that failed, with what the builder recorded about it (fast or full, and why)."""

    record: BuildRecord | None = None


@dataclass
class BuildOutcome:
    ext_dir: Path
    cached: bool
    record: BuildRecord


def build_key(candidate: str, torch_version: str, arch: str | None) -> str:
    digest = hashlib.sha256()
    for part in (candidate, torch_version, arch or ""):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:32]


def default_build_path() -> str:
    """auto (fast, falling back to full) unless KERNELJUDGE_BUILD_PATH=full switches the fast path off."""
    value = os.environ.get("KERNELJUDGE_BUILD_PATH", "auto")
    if value not in BUILD_PATHS:
        raise ValueError(f"KERNELJUDGE_BUILD_PATH must be one of {', '.join(BUILD_PATHS)}, not {value!r}")
    return value


def cache_key(candidate: str, torch_version: str, settings: EngineSettings, build_path: str = "auto",
              sandbox: SandboxKind = SandboxKind.bwrap) -> str:
    """The candidate's build cache entry; a forced path (benchmarks, `kerneljudge build --full`) has its own,
    and so has an unsandboxed build (its build.ninja names host paths, which a sandboxed run would rebuild)."""
    key = build_key(candidate, torch_version, settings.cuda_arch())
    if build_path != "auto":
        key = f"{key}-{build_path}"
    return key if sandbox == SandboxKind.bwrap else f"{key}-{sandbox.value}"


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


def pch_root(settings: EngineSettings, torch_version: str) -> Path:
    """The precompiled torch headers, built once by this (trusted) process; builds read them only."""
    root = settings.build_cache / "pch"
    with _pch_lock:
        if root not in _pch_ready:
            ensure_pchs(root, find_toolchain(), torch_version)
            _pch_ready.add(root)
    return root


def _record(extensions: list[dict], seconds: float) -> BuildRecord:
    if not extensions:
        return BuildRecord("full", "load_inline was not called at import; the run stage builds it", seconds)
    full = [ext for ext in extensions if ext["path"] != "fast"]
    reason = "; ".join(f"{ext['name']}: {ext['reason']}" for ext in full)
    return BuildRecord("full" if full else "fast", reason, seconds, extensions)


def compiler_mounts(toolchain: Toolchain) -> list[Mount]:
    """The compilers' directories where the sandbox's read-only system view lacks them."""
    directories = {str(Path(path).parent) for path in (toolchain.host_cxx, toolchain.fast_cxx)}
    return [Mount(Path(d), d) for d in sorted(directories)
            if not any(d == root or d.startswith(root + "/") for root in SYSTEM_DIRS)]


def run_build_sandbox(source_file: Path, ext_dir: Path, *, settings: EngineSettings, limit_s: float,
                      sandbox: SandboxKind, torch_version: str, build_path: str = "auto") -> dict:
    """Run the sandboxed builder once and write what it built into `ext_dir`; returns its reply
    (raises UserFailure for the user's errors)."""
    toolchain = find_toolchain()
    config = RunnerConfig(role="candidate", mode="build", device="cuda", paths=RunnerPaths(source=source_file),
                          sandbox=sandbox)
    limits = ResourceLimits(cpu_s=int(limit_s * 4) + 30, address_space_bytes=pool.memory_cap_bytes())
    spec = runner_spec(config, settings, limits)
    # Builds use the cores the device lanes do not reserve, below everything else (timing isolation).
    spec.cpus = settings.cpu_plan().build_cpus or None
    spec.nice = settings.build_nice
    # The runtime package at its own path: the builder packs what it built with sandbox_runtime/file_tree.
    spec.mounts = [mount for mount in spec.mounts if mount.source != RUNTIME_DIR]
    spec.mounts.append(Mount(RUNTIME_DIR, str(RUNTIME_DIR)))
    headers = pch_root(settings, torch_version).resolve()
    spec.mounts += [Mount(PACKAGE_DIR, str(PACKAGE_DIR)), Mount(headers, str(headers))]
    spec.mounts += compiler_mounts(toolchain)
    # The fast path compiles with the very compiler the precompiled headers were built with. CXX stays
    # unset: torch writes it into build.ninja, and the run stage's load_inline must find the same file
    # (any other command line makes ninja rebuild everything there).
    spec.env["KERNELJUDGE_FAST_CXX"] = toolchain.fast_cxx
    spec.env.update({"CUDA_HOME": str(toolchain.cuda_home), "KJ_PCH_ROOT": str(headers), "KJ_BUILD_PATH": build_path,
                     "MAX_JOBS": str(pool.jobs_per_build()), **support_env()})
    spec.env.setdefault("TORCH_CUDA_ARCH_LIST", ARCH_WITHOUT_GPU)
    spec.env["PATH"] = f"{Path(sys.executable).parent}:{toolchain.cuda_home}/bin:/usr/local/bin:/usr/bin:/bin"
    process = SandboxProcess(spec, [sys.executable, "-I", "-c", BOOT], name="candidate-build",
                             use_bwrap=sandbox == SandboxKind.bwrap)
    # The built folder cannot be larger than the tmpfs it was built in.
    process.max_payload_bytes = settings.sandbox_ext_bytes
    try:
        process.start()
        reply = process.receive(limit_s)
    except SandboxTimeout as exc:
        raise UserFailure("timeout", f"the build exceeded its time limit: {exc}") from None
    except SandboxExited as exc:
        raise UserFailure("crashed", exc.describe(), trim_compiler_log(exc.detail)) from None
    finally:
        process.close(grace_s=2.0)
    if reply.get("event") == "error":
        logs = "\n".join(part for part in (process.stdout.text(), process.stderr.text()) if part.strip())
        message = str(reply.get("message", ""))
        line_map = reply.get("line_map") or {}
        detail = trim_compiler_log(map_compiler_log(message + "\n" + str(reply.get("detail", "")) + "\n" + logs,
                                                    line_map))
        raise BuildFailure(str(reply.get("kind", "compile_error")), map_compiler_log(message, line_map)[:2000],
                           detail, record=_record(reply.get("extensions", []), 0.0))
    if reply.get("event") != "built":
        raise UserFailure("protocol", f"the builder replied {reply.get('event')!r} instead of 'built'")
    try:
        ext_tree.unpack(reply.get("files") or [], reply.get(PAYLOAD_KEY) or b"", ext_dir)
    except (ext_tree.BadTree, OSError) as exc:
        raise UserFailure("protocol", f"the builder's files could not be stored: {exc}") from None
    return reply


def build_cuda_candidate(
    source_file: Path, candidate: str, *, settings: EngineSettings, limit_s: float, sandbox: SandboxKind,
    torch_version: str, build_path: str | None = None,
) -> BuildOutcome:
    build_path = build_path or default_build_path()
    key = cache_key(candidate, torch_version, settings, build_path, sandbox)
    ext_dir = settings.build_cache / key
    settings.build_cache.mkdir(parents=True, exist_ok=True)
    try:
        pch_root(settings, torch_version)  # trusted work, before the pool slot and the time limit
    except ToolchainMissing as exc:
        raise SandboxUnavailable(str(exc)) from None
    with open(settings.build_cache / f"{key}.lock", "w") as lock:
        # Two jobs with the same candidate build once; the second waits and reuses it.
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (ext_dir / BUILT_MARKER).exists():
            saved = ext_dir / RECORD_FILE
            record = (BuildRecord(**json.loads(saved.read_text())) if saved.exists()
                      else BuildRecord("full", "built before build records were kept", 0.0))
            return BuildOutcome(ext_dir=ext_dir, cached=True, record=record)
        if ext_dir.exists():
            shutil.rmtree(ext_dir)
        ext_dir.mkdir(parents=True)
        started = time.monotonic()
        try:
            with pool.build_slot():
                started = time.monotonic()
                reply = run_build_sandbox(source_file, ext_dir, settings=settings, limit_s=limit_s,
                                          sandbox=sandbox, torch_version=torch_version, build_path=build_path)
                record = _record(reply.get("extensions", []), round(time.monotonic() - started, 2))
        except BuildFailure as failure:
            if failure.record is not None:
                failure.record.seconds = round(time.monotonic() - started, 2)
            shutil.rmtree(ext_dir, ignore_errors=True)
            raise
        except UserFailure:
            shutil.rmtree(ext_dir, ignore_errors=True)
            raise
        (ext_dir / RECORD_FILE).write_text(json.dumps(asdict(record)))
        (ext_dir / BUILT_MARKER).write_text(key)
        return BuildOutcome(ext_dir=ext_dir, cached=False, record=record)


def private_copy(ext_dir: Path, destination: Path) -> Path:
    """The built extension for one run, in the folder its runner mounts read-only (the runner copies it
    into its own size-capped extension folder): hard links to the cache's files where the file system
    allows, copies with their times otherwise."""
    shutil.copytree(ext_dir, destination, symlinks=True, copy_function=_link_or_copy, dirs_exist_ok=True)
    return destination


def _link_or_copy(source: str, destination: str) -> None:
    try:
        os.link(source, destination)
    except OSError:
        shutil.copy2(source, destination)
