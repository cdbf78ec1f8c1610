"""Start the sandboxed runner for one role, and talk to it in terms of operations."""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..models import SandboxKind
from .gpu_arch import visible_devices_value
from .sandbox import (
    Mount,
    ResourceLimits,
    SandboxExited,
    SandboxProcess,
    SandboxSpec,
    SandboxTimeout,
    Scratch,
)
from .sandbox.bwrap import gpu_device_nodes
from .sandbox.process import PAYLOAD_KEY, MarkedLog
from .sandbox_runtime.harness_output import USER_OUTPUT_MARK
from .settings import EngineSettings

RUNTIME_DIR = Path(__file__).resolve().parent / "sandbox_runtime"
# The judge compares with this package's own comparison code, mounted read-only (never for a candidate).
PACKAGE_DIR = Path(__file__).resolve().parents[1]  # worker/, the package the judge imports it from
# Where torch builds and finds load_inline extensions (TORCH_EXTENSIONS_DIR), in the build sandbox and
# in the run: the same path, so a run finds the build up to date. A size-capped tmpfs in both; a
# run gets its built extension read-only at EXT_BUILT and copies it there (sandbox_runtime/runner.py).
EXT_DIR = "/kj/ext"
EXT_BUILT = "/kj/ext-built"
# KJ_RUNTIME is the runtime package's directory (mapped to the host path without a sandbox).
BOOT = ("import os, sys; sys.path.insert(0, os.path.dirname(os.environ['KJ_RUNTIME'])); "
        "from sandbox_runtime.runner import run_and_exit; run_and_exit()")


@dataclass
class UserFailure(Exception):
    """The user code (or the sandbox around it) failed; `kind` says how."""

    kind: str  # compile_error | runtime_error | invalid_output | timeout | crashed | protocol
    message: str
    detail: str = ""


@dataclass
class RunnerPaths:
    """Host paths a runner sees, all read-only. A build mounts its source (its output comes back over
    its pipe); a run gets its source over the pipe (`load`) and exchanges tensors over it, so it
    mounts at most the built extension."""

    source: Path | None = None
    ext_dir: Path | None = None


@dataclass
class RunnerConfig:
    role: str  # reference | candidate
    mode: str  # build | run
    device: str  # cpu | cuda
    paths: RunnerPaths
    sandbox: SandboxKind = SandboxKind.bwrap


def runner_spec(config: RunnerConfig, settings: EngineSettings, limits: ResourceLimits) -> SandboxSpec:
    paths = config.paths
    mounts = [Mount(RUNTIME_DIR, "/kj/rt/sandbox_runtime")]
    if paths.source is not None:
        mounts.append(Mount(paths.source, "/kj/src/module.py"))
    if config.role == "reference" and config.mode == "run":
        mounts.append(Mount(PACKAGE_DIR, "/kj/lib/worker"))
    if paths.ext_dir is not None:
        mounts.append(Mount(paths.ext_dir, EXT_BUILT))
    bin_dir = os.path.dirname(sys.executable)
    cuda_home = os.environ.get("CUDA_HOME") or "/usr/local/cuda"
    threads = str(settings.cpu_threads)
    env = {
        "PATH": f"{bin_dir}:{cuda_home}/bin:/usr/local/bin:/usr/bin:/bin",
        "HOME": "/tmp",
        "LANG": "C.UTF-8",
        "KJ_RUNTIME": "/kj/rt/sandbox_runtime",
        "KJ_ROLE": config.role,
        "KJ_MODE": config.mode,
        "KJ_DEVICE": config.device,
        "KJ_SOURCE": "/kj/src/module.py",
        "TORCH_EXTENSIONS_DIR": EXT_DIR,
        "KJ_LIB": "/kj/lib/worker",
        # In the runner's private /tmp: each runner serves one candidate, so no candidate ever
        # reads a Triton cache another one wrote (a candidate runner's is set below).
        "TRITON_CACHE_DIR": "/tmp/triton-cache",
        "PYTHONDONTWRITEBYTECODE": "1",
        "OMP_NUM_THREADS": threads,
        "MKL_NUM_THREADS": threads,
        "MAX_JOBS": threads,
    }
    if config.role == "reference":
        # The judge's torch.compile baseline (sandbox_runtime/compile_baseline.py) writes its
        # Inductor cache in the judge's private /tmp: without a user name in the sandbox, Inductor's
        # default path cannot be formed.
        env["TORCHINDUCTOR_CACHE_DIR"] = "/tmp/inductor-cache"
        env["TORCHINDUCTOR_COMPILE_THREADS"] = threads
    if paths.ext_dir is not None:
        env["KJ_EXT_BUILT"] = EXT_BUILT
    if config.role == "candidate" and config.mode == "run" and paths.ext_dir is not None:
        # The candidate's own Triton cache, copied into its extension folder for this runner only
        # (worker/engine/triton_cache.py): kernels compile once per candidate source, not per sandbox.
        env["TRITON_CACHE_DIR"] = "/kj/ext/triton-cache"
    if os.path.isdir(cuda_home):
        env["CUDA_HOME"] = cuda_home
    if config.device == "cpu":
        # Triton kernels run under Triton's interpreter on CPU tensors, Numba's @cuda.jit kernels
        # under Numba's CUDA simulator (sandbox_runtime/numba_simulator.py adapts it to torch tensors).
        env["TRITON_INTERPRET"] = "1"
        env["NUMBA_ENABLE_CUDASIM"] = "1"
        env["CUDA_VISIBLE_DEVICES"] = ""
    elif config.mode == "build":
        env["CUDA_VISIBLE_DEVICES"] = ""
    elif settings.gpu_index is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible_devices_value(settings.gpu_index,
                                                            only_its_node=config.sandbox == SandboxKind.bwrap)
    elif os.environ.get("CUDA_VISIBLE_DEVICES"):
        env["CUDA_VISIBLE_DEVICES"] = os.environ["CUDA_VISIBLE_DEVICES"]
    if config.device == "cuda":
        # The same target list for the build (no GPU visible) and the run, so the run finds
        # the built extension up to date instead of compiling it again for the device's arch.
        arch = settings.cuda_arch()
        if arch:
            env["TORCH_CUDA_ARCH_LIST"] = arch
    nodes = gpu_device_nodes(settings.gpu_index) if (config.device == "cuda" and config.mode == "run") else []
    return SandboxSpec(mounts=mounts, scratch=[Scratch(EXT_DIR, settings.sandbox_ext_bytes)], env=env,
                       gpu_device_nodes=nodes, isolate_network=settings.isolate_network,
                       tmp_size_bytes=settings.sandbox_tmp_bytes, shm_size_bytes=settings.sandbox_shm_bytes,
                       limits=limits, isolation=settings.isolation)


class RunnerSession:
    """A started runner: send an operation, get its reply, errors turned into UserFailure."""

    def __init__(self, config: RunnerConfig, settings: EngineSettings, limits: ResourceLimits) -> None:
        self.config = config
        spec = runner_spec(config, settings, limits)
        self.process = SandboxProcess(spec, [sys.executable, "-I", "-c", BOOT],
                                      name=f"{config.role}-{config.mode}",
                                      use_bwrap=config.sandbox == SandboxKind.bwrap, log_mark=USER_OUTPUT_MARK)
        self.environment: dict = {}

    def __enter__(self) -> RunnerSession:
        self.process.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.process.close(grace_s=2.0 if exc_info[0] is None else 0.0)

    def wait_ready(self, deadline: float) -> dict:
        message = self._expect(("ready",), deadline)
        self.environment = message.get("environment") or {}
        return message

    def load(self, source: str, deadline: float, *, cpu_s: int | None = None) -> None:
        """Import the module this runner serves (once; a runner never loads a second one)."""
        self.request("load", deadline, expect="loaded", source=source, cpu_s=cpu_s)

    def request(self, op: str, deadline: float, expect: str = "done", forward: dict | None = None,
                **fields) -> dict:
        """Send one operation and wait for its reply. `forward`: a reply from another runner whose
        tensors go along (their description and bytes, passed on as they came)."""
        payload = None
        if forward is not None and PAYLOAD_KEY in forward:
            fields["payload"] = forward["payload"]
            fields["payload_bytes"] = forward["payload_bytes"]
            payload = forward[PAYLOAD_KEY]
        try:
            self.process.send({"op": op, **fields}, payload=payload)
        except (BrokenPipeError, OSError):
            pass  # the child is gone; _expect reports how it ended
        return self._expect((expect,), deadline)

    def timed_request(self, op: str, deadline: float, expect: str = "done", **fields) -> tuple[dict, float]:
        """`request`, and the supervisor's own clock around it in seconds: from just before the command
        is written to when the reply's last byte was read."""
        sent = time.monotonic()
        reply = self.request(op, deadline, expect, **fields)
        return reply, self.process.received_at - sent

    def _expect(self, events: tuple[str, ...], deadline: float) -> dict:
        try:
            message = self.process.receive(deadline - time.monotonic())
        except SandboxTimeout as exc:
            raise UserFailure("timeout", str(exc)) from None
        except SandboxExited as exc:
            raise UserFailure("crashed", exc.describe(), exc.detail) from None
        if message.get("event") == "error":
            raise UserFailure(str(message.get("kind", "runtime_error")), str(message.get("message", "")),
                              str(message.get("detail", "")))
        if message.get("event") not in events:
            raise UserFailure("protocol", f"unexpected reply {message.get('event')!r}, expected {events}")
        return message

    def logs(self) -> str:
        """The loaded module's own output (stdout, then stderr): nothing the runner printed before
        `load`, nor the profiler's lines (sandbox_runtime/harness_output.py)."""
        streams = (self.process.stdout, self.process.stderr)
        assert all(isinstance(stream, MarkedLog) for stream in streams)
        parts = (stream.after_mark().strip() for stream in streams)  # type: ignore[union-attr]
        return "\n".join(part for part in parts if part)
