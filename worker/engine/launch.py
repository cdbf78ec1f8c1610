"""Start the sandboxed runner for one role, and talk to it in terms of operations."""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import contract
import sandbox_side
from contract.statuses import SandboxKind
from sandbox_side.runtime.failure_kind import FailureKind
from sandbox_side.runtime.harness_output import USER_OUTPUT_MARK
from sandbox_side.runtime.messages import (
    Command,
    ErrorReply,
    Load,
    Loaded,
    MessageError,
    Ping,
    Pong,
    Proceed,
    Ready,
    Reply,
    StepReached,
)
from worker.engine.engine_settings import EngineSettings
from worker.engine.gpu_arch import visible_devices_value
from worker.engine.sandbox import (
    Mount,
    ResourceLimits,
    SandboxExited,
    SandboxProcess,
    SandboxSpec,
    SandboxTimeout,
    Scratch,
)
from worker.engine.sandbox.bwrap import gpu_device_nodes
from worker.engine.sandbox.process import PAYLOAD_KEY, MarkedLog

# What a sandbox imports of ours: the sandbox side (runtime, judging, timer, builder) and the contract its
# judge's reports are made of, each mounted read-only under SANDBOX_LIB. Nothing of the supervisor's is
# mounted: inside a sandbox, `import worker` fails.
SANDBOX_SIDE_DIR = Path(sandbox_side.__file__).resolve().parent
CONTRACT_DIR = Path(contract.__file__).resolve().parent
SANDBOX_LIB = "/kj/lib"
# Where torch builds and finds load_inline extensions (TORCH_EXTENSIONS_DIR), in the build sandbox and
# in the run: the same path, so a run finds the build up to date. A size-capped tmpfs in both; a
# run gets its built extension read-only at EXT_BUILT and copies it there (sandbox_side/runtime/runner.py).
EXT_DIR = "/kj/ext"
EXT_BUILT = "/kj/ext-built"
BOOT = ("import os, sys; sys.path.insert(0, os.environ['KJ_LIB']); "
        "from sandbox_side.boot import run_and_exit; run_and_exit()")


@dataclass
class UserFailure(Exception):
    """The user code (or the sandbox around it) failed; `kind` says how (sandbox_side/runtime/failure_kind.py)."""

    kind: FailureKind
    message: str
    detail: str = ""

    def __post_init__(self) -> None:
        self.kind = FailureKind(self.kind)  # a name of the supervisor's own that is no kind fails here


R = TypeVar("R", bound=Reply)


def reported_failure(message: dict[str, Any]) -> UserFailure:
    """The failure a sandboxed process reported (an `error` reply), its kind read at the boundary: one that
    is no FailureKind is a protocol failure, with what was reported in its message."""
    error = ErrorReply.read(message)
    return UserFailure(error.kind, error.message, error.detail)


def read_reply(message: dict[str, Any], reply: type[R]) -> R:
    """A runner's reply (as SandboxProcess.receive gives it, its payload's sealed memory file under PAYLOAD_KEY)
    read into the class expected: its `error` reply raised as its failure, anything else that is not one a
    protocol failure."""
    if message.get("event") == "error":
        raise reported_failure(message)
    try:
        return reply.decode(message, message.get(PAYLOAD_KEY))
    except MessageError as exc:
        raise UserFailure(FailureKind.protocol, f"unexpected reply (expected {_named(reply)}): {exc}") from None


# The parts of a runner's work kept from its report (a Ready's start, a RunDone's run): bounded in number and
# name length, whoever wrote them.
MAX_REPORTED_PARTS = 8
MAX_REPORTED_PART_NAME = 32


def reported_parts(reported: dict[str, float]) -> dict[str, float]:
    """Seconds by part that a runner reported (its start's CPU, its run's wall time), bounded in number and name
    length, finite and not negative: diagnostics, never evidence for a verdict."""
    kept: dict[str, float] = {}
    for name, seconds in reported.items():
        if len(kept) >= MAX_REPORTED_PARTS:
            break
        if isinstance(seconds, int | float) and math.isfinite(seconds) and seconds >= 0:
            kept[str(name)[:MAX_REPORTED_PART_NAME]] = round(float(seconds), 3)
    return kept


@dataclass
class RunnerPaths:
    """Host paths a runner sees, all read-only. A build mounts its source (its output comes back over
    its payload); a run gets its source over its pipe (`load`) and exchanges tensors as payloads (sealed
    memory files), so it mounts at most the built extension."""

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
    mounts = [Mount(SANDBOX_SIDE_DIR, f"{SANDBOX_LIB}/sandbox_side"), Mount(CONTRACT_DIR, f"{SANDBOX_LIB}/contract")]
    if paths.source is not None:
        mounts.append(Mount(paths.source, "/kj/src/module.py"))
    if paths.ext_dir is not None:
        mounts.append(Mount(paths.ext_dir, EXT_BUILT))
    bin_dir = os.path.dirname(sys.executable)
    cuda_home = os.environ.get("CUDA_HOME") or "/usr/local/cuda"
    threads = str(settings.cpu_threads)
    env = {
        "PATH": f"{bin_dir}:{cuda_home}/bin:/usr/local/bin:/usr/bin:/bin",
        "HOME": "/tmp",
        "LANG": "C.UTF-8",
        "KJ_ROLE": config.role,
        "KJ_MODE": config.mode,
        "KJ_DEVICE": config.device,
        "KJ_SOURCE": "/kj/src/module.py",
        "TORCH_EXTENSIONS_DIR": EXT_DIR,
        "KJ_LIB": SANDBOX_LIB,
        # In the runner's private /tmp: each runner serves one candidate, so no candidate ever
        # reads a Triton cache another one wrote (a candidate runner's is set below).
        "TRITON_CACHE_DIR": "/tmp/triton-cache",
        "PYTHONDONTWRITEBYTECODE": "1",
        "OMP_NUM_THREADS": threads,
        "MKL_NUM_THREADS": threads,
        "MAX_JOBS": threads,
    }
    if config.device == "cuda":
        # On a GPU the host's torch ops (input sets, copies, comparisons) come one by one between host steps,
        # and libgomp's idle threads spin after each of them by default: on a two-GPU batch judges and runners
        # burned ~2300 CPU s on a host whose run queues waited 0.5-0.7 s per CPU s, and a loop of such ops took
        # 2-3x the CPU time spinning (benchmarks/omp_wait.py). Passive threads sleep at once. (On a CPU device the
        # timed work is these very threads, which spinning answers faster: left as it is there.)
        env["OMP_WAIT_POLICY"] = "PASSIVE"
        if config.mode == "run":  # a build sees no GPU
            env["KJ_CUDA_SYNC_WAIT"] = settings.cuda_sync_wait  # sandbox_side/runtime/cuda_sync.py
    if config.role == "reference":
        # The judge's torch.compile baseline (sandbox_side/judging/compiled_reference.py) writes its
        # Inductor cache in the judge's private /tmp: without a user name in the sandbox, Inductor's
        # default path cannot be formed.
        env["TORCHINDUCTOR_CACHE_DIR"] = "/tmp/inductor-cache"
        env["TORCHINDUCTOR_COMPILE_THREADS"] = threads
    if paths.ext_dir is not None:
        env["KJ_EXT_BUILT"] = EXT_BUILT
    if config.role == "candidate" and config.mode == "run" and paths.ext_dir is not None:
        # The candidate's own Triton cache, copied into its extension folder for this runner only
        # (worker/engine/build/triton_cache.py): kernels compile once per candidate source, not per sandbox.
        env["TRITON_CACHE_DIR"] = "/kj/ext/triton-cache"
    if os.path.isdir(cuda_home):
        env["CUDA_HOME"] = cuda_home
    if config.device == "cpu":
        # Triton kernels run under Triton's interpreter on CPU tensors, Numba's @cuda.jit kernels
        # under Numba's CUDA simulator (sandbox_side/runtime/numba_simulator.py adapts it to torch tensors).
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
    """A started runner: send a command, read its reply (sandbox_side/runtime/messages.py), errors and anything
    that is not the reply expected turned into UserFailure."""

    def __init__(self, config: RunnerConfig, settings: EngineSettings, limits: ResourceLimits) -> None:
        self.config = config
        spec = runner_spec(config, settings, limits)
        self.process = SandboxProcess(spec, [sys.executable, "-I", "-c", BOOT],
                                      name=f"{config.role}-{config.mode}",
                                      use_bwrap=config.sandbox == SandboxKind.bwrap, log_mark=USER_OUTPUT_MARK)
        self.environment: dict[str, Any] = {}
        self.start_cpu_s: dict[str, float] = {}  # its Ready's, bounded (reported_parts)

    def __enter__(self) -> RunnerSession:
        self.process.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.process.close(grace_s=2.0 if exc_info[0] is None else 0.0)

    def wait_ready(self, deadline: float) -> Ready:
        ready = self._expect(Ready, deadline)
        self.environment = ready.environment
        self.start_cpu_s = reported_parts(ready.start_cpu_s)
        return ready

    def load(self, source: str, deadline: float, *, cpu_s: int | None = None) -> None:
        """Import the module this runner serves (once; a runner never loads a second one)."""
        self.request(Load(source=source, cpu_s=cpu_s), Loaded, deadline)

    def request(self, command: Command, reply: type[R], deadline: float) -> R:
        """Send one command and read its reply, which must be a `reply`. A command's payload (the sealed memory
        file another runner sent, as it came) goes along."""
        self._send(command)
        return self._expect(reply, deadline)

    def stepped_request(self, command: Command, reply: type[R], deadline: float,
                        on_step: Callable[[StepReached], None]) -> R:
        """`request` for a command whose runner stops at steps on the way (a judge's Generate): each step goes
        to `on_step` (which moves the device hold), then the runner is told to proceed."""
        self._send(command)
        while True:
            message = self._receive(deadline)
            if message.get("event") != StepReached.NAME:
                return read_reply(message, reply)
            on_step(read_reply(message, StepReached))
            self._send(Proceed())

    def timed_request(self, command: Command, reply: type[R], deadline: float) -> tuple[R, float]:
        """`request`, and the supervisor's own clock around it in seconds: from just before the command
        is written to when the reply's last byte was read. A ping goes first, off the clock: the clock check
        (worker/engine/timing/clock_check.py) compares the two sides' blocks as if alike, and the candidate's
        sandbox was frozen through the reference's block just before, so without it only the candidate's
        clock would hold the wake-up of a thawed process (on CPU, 13-25 us more per request at the median)."""
        self.request(Ping(), Pong, deadline)
        sent = time.monotonic()
        answer = self.request(command, reply, deadline)
        return answer, self.process.received_at - sent

    def _send(self, command: Command) -> None:
        carried = command.carried
        buffer = carried.buffer if carried is not None else None
        if carried is not None and carried.nbytes and buffer is None:
            raise ValueError(f"{command.NAME!r} announces {carried.nbytes} payload bytes and holds none")
        try:
            self.process.send(command.to_message(), payload=buffer)
        except (BrokenPipeError, OSError):
            pass  # the child is gone; _receive reports how it ended

    def _expect(self, reply: type[R], deadline: float) -> R:
        return read_reply(self._receive(deadline), reply)

    def _receive(self, deadline: float) -> dict[str, Any]:
        try:
            return self.process.receive(deadline - time.monotonic())
        except SandboxTimeout as exc:
            raise UserFailure(FailureKind.timeout, str(exc)) from None
        except SandboxExited as exc:
            raise UserFailure(FailureKind.crashed, exc.describe(), exc.detail) from None

    def logs(self) -> str:
        """The loaded module's own output (stdout, then stderr): nothing the runner printed before
        `load`, nor the profiler's lines (sandbox_side/runtime/harness_output.py)."""
        streams = (self.process.stdout, self.process.stderr)
        assert all(isinstance(stream, MarkedLog) for stream in streams)
        parts = (stream.after_mark().strip() for stream in streams)  # type: ignore[union-attr]
        return "\n".join(part for part in parts if part)


def _named(reply: type[Reply]) -> str:
    op = getattr(reply, "OP", None)
    return f"{reply.NAME!r} for {op!r}" if op else repr(reply.NAME)
