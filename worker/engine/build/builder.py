"""Stage 2: build the candidate's CUDA extension in the sandbox, without a GPU.

The sandboxed builder (sandbox_side/build) imports the candidate; each load_inline call builds
through the fast path (kernels with nvcc, no torch headers; host code against a precompiled torch
header) or, where the fast path declines, the usual full ninja build. The sandbox builds in its own
size-capped tmpfs and sends the built folder back as its reply's payload (sandbox_side/build/ext_tree, at most
KERNELJUDGE_SANDBOX_EXT_MB); this process writes it to a cache directory keyed by the candidate's
source hash (plus torch version and target architecture). The GPU stage mounts it read-only into
the candidate's runner, which copies it into its own capped extension folder, and torch finds the
built library there instead of compiling again. The cache is on disk, so it outlives restarts.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from contract.results import BuildNote
from contract.statuses import SandboxKind
from sandbox_side.build import ext_tree
from sandbox_side.build.pch import ensure_pchs
from sandbox_side.build.source_map import map_compiler_log
from sandbox_side.build.toolchain import Toolchain, ToolchainMissing, find_toolchain
from sandbox_side.build.torch_support import support_env
from sandbox_side.runtime.failure_kind import FailureKind
from sandbox_side.runtime.messages import Built, MessageError
from worker.engine.build import pool
from worker.engine.engine_settings import EngineSettings
from worker.engine.launch import (
    SANDBOX_LIB,
    SANDBOX_SIDE_DIR,
    RunnerConfig,
    RunnerPaths,
    UserFailure,
    read_reply,
    reported_failure,
    runner_spec,
)
from worker.engine.sandbox import (
    Mount,
    ResourceLimits,
    SandboxExited,
    SandboxProcess,
    SandboxTimeout,
    SandboxUnavailable,
)
from worker.engine.sandbox.bwrap import SYSTEM_DIRS

BUILT_MARKER = "BUILT"
# Target for builds on a machine without a GPU and without KERNELJUDGE_CUDA_ARCH (dev and CI checks).
ARCH_WITHOUT_GPU = "9.0"
RECORD_FILE = "kj_build.json"
_ERROR_LINE = re.compile(r"(error|Error|ERROR|undefined reference|fatal)")
MAX_LOG_CHARS = 4000
# The sandbox side (with the build support headers) and the precompiled headers appear in the build sandbox at
# their own paths: clang checks that every file a precompiled header was made from is still where it was.
BOOT = (f"import sys; sys.path.insert(0, {str(SANDBOX_SIDE_DIR.parent)!r}); "
        "from sandbox_side.build.sandboxed import main; from sandbox_side.runtime.leave import leave; leave(main())")
_pch_ready: set[Path] = set()
_pch_failed: dict[Path, str] = {}  # root -> why its headers could not be built (builds take the full path)
_pch_lock = threading.Lock()
log = logging.getLogger(__name__)
# A builder that died without reporting (no compile error, no time limit) is built once more before the job
# is failed for it: two honest corpus sources' builds died so in a 20-minute soak on two GPUs (1024 jobs),
# each once in 16 builds. A source whose build dies again gets the verdict.
CRASHED_BUILD_ATTEMPTS = 2


@dataclass
class BuildRecord:
    path: str  # fast | full
    reason: str  # why the full build was taken ("" on the fast path)
    seconds: float
    extensions: list[dict] = field(default_factory=list)  # per load_inline call: steps, timings, ABI check

    def summary(self) -> BuildNote:
        """What an evaluation result carries (EvalResult.extra.build)."""
        return BuildNote(path=self.path, reason=self.reason, seconds=self.seconds)


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
    """The precompiled torch headers, built once by this (trusted) process; builds read them only.

    Callers that arrive while they are being built (by PchWarmup at start-up, or by an earlier build)
    wait for that one build. Where it fails, the failure is logged and kept (not retried until the
    process restarts): builds go on, and a build whose flags have no header takes the full path,
    saying so in its record. A missing toolchain raises ToolchainMissing."""
    root = settings.build_cache / "pch"
    with _pch_lock:
        if root not in _pch_ready and root not in _pch_failed:
            toolchain = find_toolchain()
            try:
                ensure_pchs(root, toolchain, torch_version)
            except Exception as exc:  # noqa: BLE001 - a header that cannot be built costs speed, not builds
                _pch_failed[root] = f"{type(exc).__name__}: {str(exc)[-1500:]}"
                log.error("the precompiled torch header could not be built (CUDA builds take the full build "
                          "path where no header fits): %s", _pch_failed[root])
            else:
                _pch_ready.add(root)
    return root


def pch_failure(settings: EngineSettings) -> str | None:
    """Why this process could not build the precompiled headers (None: built, or not tried)."""
    return _pch_failed.get(settings.build_cache / "pch")


class PchWarmup:
    """The precompiled headers built in a background thread at service start, off the first jobs' path
    (builds that arrive meanwhile wait in pch_root for this one build). `state` is what /v1/ready
    reports: warming, ok, or failed: why (then builds take the full path where no header fits)."""

    def __init__(self, settings: EngineSettings, torch_version: str) -> None:
        self.settings = settings
        self.torch_version = torch_version
        self.seconds: float | None = None
        self.error: str | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pch-warmup", daemon=True)

    def start(self) -> PchWarmup:
        self._thread.start()
        return self

    def _run(self) -> None:
        started = time.monotonic()
        try:
            pch_root(self.settings, self.torch_version)
            self.error = pch_failure(self.settings)
        except Exception as exc:  # noqa: BLE001 - reported by /v1/ready, never left "warming"
            self.error = f"{type(exc).__name__}: {exc}"
        self.seconds = round(time.monotonic() - started, 1)
        if self.error is None:
            log.info("precompiled torch headers ready in %.1fs", self.seconds)
        self._done.set()

    def wait(self, timeout_s: float | None = None) -> bool:
        return self._done.wait(timeout_s)

    @property
    def done(self) -> bool:
        return self._done.is_set()

    @property
    def state(self) -> str:
        if not self._done.is_set():
            return "warming"
        if self.error is None:
            return "ok"
        return f"failed: {self.error}; CUDA builds take the full build path where no header fits"


def start_pch_warmup(settings: EngineSettings, device: str) -> PchWarmup | None:
    """Start building the precompiled headers now where this process's workers build CUDA: device
    `cuda`, or `auto` on a host with a GPU (CPU workers refuse CUDA candidates, so a CPU-only service
    never builds them) and a CUDA toolchain (without one, builds report the sandbox unavailable)."""
    if device == "cpu" or (device == "auto" and not os.path.exists("/dev/nvidiactl")):
        return None
    try:
        find_toolchain()
    except ToolchainMissing as exc:
        log.warning("no precompiled header warm-up: %s", exc)
        return None
    import torch

    return PchWarmup(settings, torch.__version__).start()


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
                      sandbox: SandboxKind, torch_version: str, build_path: str = "auto") -> Built:
    """Run the sandboxed builder once and write what it built into `ext_dir`; returns its reply
    (raises UserFailure for the user's errors)."""
    toolchain = find_toolchain()
    config = RunnerConfig(role="candidate", mode="build", device="cuda", paths=RunnerPaths(source=source_file),
                          sandbox=sandbox)
    limits = ResourceLimits(cpu_s=int(limit_s * 4) + 30, address_space_bytes=settings.build_memory_bytes,
                            memory_bytes=settings.sandbox_memory_bytes)
    spec = runner_spec(config, settings, limits)
    # Builds use the cores the device lanes do not reserve, below everything else (timing isolation).
    spec.cpus = settings.cpu_plan().build_cpus or None
    spec.nice = settings.build_nice
    # The sandbox side at its own path (see BOOT), in place of its mount under SANDBOX_LIB.
    spec.mounts = [mount for mount in spec.mounts if mount.target != f"{SANDBOX_LIB}/sandbox_side"]
    headers = pch_root(settings, torch_version).resolve()
    spec.mounts += [Mount(SANDBOX_SIDE_DIR, str(SANDBOX_SIDE_DIR)), Mount(headers, str(headers))]
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
        raise UserFailure(FailureKind.timeout, f"the build exceeded its time limit: {exc}") from None
    except SandboxExited as exc:
        raise UserFailure(FailureKind.crashed, exc.describe(), trim_compiler_log(exc.detail)) from None
    finally:
        process.close(grace_s=2.0)
    if reply.get("event") == "error":
        logs = "\n".join(part for part in (process.stdout.text(), process.stderr.text()) if part.strip())
        reported = reported_failure(reply)  # its kind read at the boundary: none that is no kind
        try:  # what the builder sends beside its error: Built's fields, where they read as such
            beside = Built.decode({"event": "built", "extensions": reply.get("extensions", []),
                                   "line_map": reply.get("line_map", {})})
        except MessageError:
            beside = Built()
        detail = trim_compiler_log(map_compiler_log(reported.message + "\n" + reported.detail + "\n" + logs,
                                                    beside.line_map))
        raise BuildFailure(reported.kind, map_compiler_log(reported.message, beside.line_map)[:2000],
                           detail, record=_record(beside.extensions, 0.0))
    built = read_reply(reply, Built)  # anything but Built is a protocol failure
    try:
        ext_tree.unpack(built.files, built.payload.read() if built.payload is not None else b"", ext_dir)
    except (ext_tree.BadTree, OSError) as exc:
        raise UserFailure(FailureKind.protocol, f"the builder's files could not be stored: {exc}") from None
    return built


@dataclass
class _Flight:
    """One build of a cache key in progress in this process; jobs with the same key wait for it."""

    done: threading.Event = field(default_factory=threading.Event)
    outcome: BuildOutcome | None = None
    failure: BuildFailure | None = None  # the candidate's own build error, shared with the waiters


_flights: dict[Path, _Flight] = {}  # by cache entry (cache folder and key)
_flights_lock = threading.Lock()


def build_cuda_candidate(
    source_file: Path, candidate: str, *, settings: EngineSettings, limit_s: float, sandbox: SandboxKind,
    torch_version: str, build_path: str | None = None,
) -> BuildOutcome:
    """The candidate's built extension: from the cache, from a build of the same key already running
    in this process (single flight: a batch holding one source N times builds it once), or built now.

    A BuildFailure (the builder's report of the candidate's own error) reaches every job that waited
    for that build. Other failures (time limit, a crash, the sandbox) may be the host's, not the
    source's: the waiters then build again themselves, one at a time. A builder that died without a
    report is built once more before its job fails (CRASHED_BUILD_ATTEMPTS). Failures are not cached."""
    build_path = build_path or settings.build_path  # KERNELJUDGE_BUILD_PATH=full: no fast path
    key = cache_key(candidate, torch_version, settings, build_path, sandbox)
    settings.build_cache.mkdir(parents=True, exist_ok=True)
    try:
        pch_root(settings, torch_version)  # trusted work, before the pool slot and the time limit
    except ToolchainMissing as exc:
        raise SandboxUnavailable(str(exc)) from None
    entry = settings.build_cache / key
    while True:
        with _flights_lock:
            running = _flights.get(entry)
            if running is None:  # this job leads the build
                flight = _flights[entry] = _Flight()
                break
        running.done.wait()
        if running.outcome is not None:
            return dataclasses.replace(running.outcome, cached=True)
        if running.failure is not None:
            raise dataclasses.replace(running.failure)  # an exception object of its own per job
    try:
        flight.outcome = _build_once(source_file, key, settings=settings, limit_s=limit_s, sandbox=sandbox,
                                     torch_version=torch_version, build_path=build_path)
        return flight.outcome
    except BuildFailure as failure:
        flight.failure = failure
        raise
    finally:
        with _flights_lock:
            del _flights[entry]
        flight.done.set()


def _build_once(source_file: Path, key: str, *, settings: EngineSettings, limit_s: float, sandbox: SandboxKind,
                torch_version: str, build_path: str) -> BuildOutcome:
    ext_dir = settings.build_cache / key
    with open(settings.build_cache / f"{key}.lock", "w") as lock:
        # Two processes (workers sharing the cache) with the same candidate build once; the second
        # waits and reuses it.
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (ext_dir / BUILT_MARKER).exists():
            saved = ext_dir / RECORD_FILE
            record = (BuildRecord(**json.loads(saved.read_text())) if saved.exists()
                      else BuildRecord("full", "built before build records were kept", 0.0))
            return BuildOutcome(ext_dir=ext_dir, cached=True, record=record)
        if ext_dir.exists():
            shutil.rmtree(ext_dir)
        for attempt in range(1, CRASHED_BUILD_ATTEMPTS + 1):
            ext_dir.mkdir(parents=True, exist_ok=True)
            started = time.monotonic()
            try:
                with pool.build_slot(settings):
                    started = time.monotonic()
                    reply = run_build_sandbox(source_file, ext_dir, settings=settings, limit_s=limit_s,
                                              sandbox=sandbox, torch_version=torch_version, build_path=build_path)
                    record = _record(reply.extensions, round(time.monotonic() - started, 2))
                break
            except BuildFailure as failure:
                if failure.record is not None:
                    failure.record.seconds = round(time.monotonic() - started, 2)
                shutil.rmtree(ext_dir, ignore_errors=True)
                raise
            except UserFailure as failure:
                shutil.rmtree(ext_dir, ignore_errors=True)
                if failure.kind != FailureKind.crashed or attempt == CRASHED_BUILD_ATTEMPTS:
                    raise
                log.warning("the build of candidate %s died without a report (%s), after %.1f s: building it "
                            "once more; its output ended: %s", key[:12], failure.message,
                            time.monotonic() - started, failure.detail[-600:])
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
