"""Warm sandboxes: candidate runners started ahead of time, each used for exactly one candidate.

A runner in the pool has started its sandbox, imported torch and Triton and initialised the
device, and waits for its `load`. `take` hands one out and removes it from the pool for good:
after its job it is torn down (`retire`), never returned, so nothing one candidate left behind
(files in its private /tmp, its Triton cache, GPU state, monkeypatches) can reach another. A
background thread refills the pool to its size; retired runners are closed by another thread, so
neither start nor teardown sits on a job's path. When the pool is empty, `take` waits for the
next runner (back-pressure) and raises PoolEmpty when its time is up.

Size 0 means no pool: `take` starts a runner itself (the same runner, just cold).
"""

from __future__ import annotations

import atexit
import logging
import queue
import shutil
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from contract.statuses import Device, SandboxKind
from worker.engine.engine_settings import EngineSettings
from worker.engine.gpu_schedule import as_neighbour
from worker.engine.launch import RunnerConfig, RunnerPaths, RunnerSession, UserFailure
from worker.engine.sandbox import IsolationConfig, ResourceLimits, SandboxUnavailable

log = logging.getLogger(__name__)

# Pooled runners wait for a job of unknown length: the job's own CPU limit is set at `load`.
POOLED_CPU_S = 4 * 3600
READY_TIMEOUT_S = 300.0
# After failed starts the refiller waits this long before trying again (not a synchronisation).
RETRY_AFTER_S = 5.0
# Starts that must fail in a row before a caller gets the failure. One runner crashing in its start (a warm runner
# died of SIGSEGV once in a two-GPU batch) is the harness's accident: the next start serves the job. A sandbox that
# cannot start at all fails every time, and the callers hear it.
FAILED_STARTS_TO_REPORT = 3


class PoolEmpty(TimeoutError):
    """No warm runner became ready in time."""


@dataclass
class WarmRunner:
    """A started candidate runner and its host folder, whose `ext` is mounted read-only as the built
    extension (filled when the job arrives, see build.private_copy)."""

    session: RunnerSession
    slot_dir: Path | None

    @property
    def ext_dir(self) -> Path | None:
        return None if self.slot_dir is None else self.slot_dir / "ext"

    @property
    def alive(self) -> bool:
        return self.session.process.running

    def kill(self) -> None:
        """Kill it now: a thread waiting for its reply wakes with SandboxExited (its job's retire cleans up)."""
        self.session.process.kill()

    def close(self) -> None:
        try:
            self.session.process.close(grace_s=2.0)
        finally:
            if self.slot_dir is not None:
                shutil.rmtree(self.slot_dir, ignore_errors=True)

class SandboxPool:
    def __init__(self, start_runner: Callable[[], WarmRunner], size: int, *, name: str = "sandbox-pool") -> None:
        self._start_runner = start_runner
        self.size = size
        self.name = name
        self._ready: deque[WarmRunner] = deque()
        self._starting = 0
        self._error: Exception | None = None
        self._failed_starts_in_a_row = 0
        self._closed = False
        self._cond = threading.Condition()
        # Runners handed out and not yet retired, with the thread that took each (kill_taken_by).
        self._taken: dict[int, tuple[WarmRunner, threading.Thread]] = {}
        self._teardown: queue.Queue[WarmRunner | None] = queue.Queue()
        self._teardown_thread = threading.Thread(target=self._teardown_loop, name=f"{name}-teardown", daemon=True)
        self._teardown_thread.start()
        # One refill thread per pooled runner: runners start in parallel. A runner's start (sandbox, torch,
        # CUDA context, Triton) takes seconds; one at a time, a GPU lane used them up faster than they came
        # (measured on an H100: jobs waited ~5 s each in `take`, the device 2-4% busy).
        self._refill_threads = [threading.Thread(target=self._refill_loop, name=f"{name}-refill{i}", daemon=True)
                                for i in range(max(size, 0))]
        for thread in self._refill_threads:
            thread.start()

    # -- handing out -------------------------------------------------------------------
    def take(self, timeout_s: float) -> WarmRunner:
        """A ready runner, for one candidate only. Waits while the pool is empty."""
        if self.size <= 0:
            runner = self._start_runner()
            with self._cond:
                self._taken[id(runner)] = (runner, threading.current_thread())
            return runner
        deadline = time.monotonic() + max(timeout_s, 0.0)
        with self._cond:
            while True:
                while self._ready:
                    runner = self._ready.popleft()
                    self._cond.notify_all()  # the refiller starts the next one
                    if runner.alive:
                        self._taken[id(runner)] = (runner, threading.current_thread())
                        return runner
                    log.warning("%s: a warm runner died while waiting; discarded", self.name)
                    self._teardown.put(runner)
                if self._error is not None:
                    error, self._error = self._error, None
                    raise error
                left = deadline - time.monotonic()
                if left <= 0 or self._closed:
                    raise PoolEmpty(f"no warm sandbox became ready within {timeout_s:.0f}s")
                self._cond.wait(left)

    def retire(self, runner: WarmRunner) -> None:
        """Tear a used runner down, off the caller's thread."""
        with self._cond:
            self._taken.pop(id(runner), None)
        self._teardown.put(runner)

    def kill_taken_by(self, threads: set[threading.Thread]) -> int:
        """Kill the runners `threads` took and have not retired (a stalled lane's abandoned threads,
        worker/jobs/watchdog.py), so that a thread blocked on a runner's reply wakes with an error."""
        with self._cond:
            victims = [runner for runner, taker in self._taken.values() if taker in threads]
        for runner in victims:
            try:
                runner.kill()
            except Exception:  # noqa: BLE001 - one runner that cannot be killed must not spare the others
                log.exception("%s: could not kill a stalled job's runner", self.name)
        return len(victims)

    @property
    def ready_count(self) -> int:
        with self._cond:
            return len(self._ready)

    # -- background work ---------------------------------------------------------------
    def _refill_loop(self) -> None:
        while True:
            with self._cond:
                while not self._closed and len(self._ready) + self._starting >= self.size:
                    self._cond.wait()
                if self._closed:
                    return
                self._starting += 1
            runner: WarmRunner | None = None
            error: Exception | None = None
            try:
                runner = self._start_runner()
            except Exception as exc:  # noqa: BLE001 - handed to the next take(), logged here
                with self._cond:
                    closing = self._closed
                # A start cut by the pool's close (the service stopping kills its sandboxes) is no failure.
                (log.debug if closing else log.warning)("%s: starting a warm runner failed: %s", self.name, exc)
                error = exc
            with self._cond:
                self._starting -= 1
                if runner is not None and not self._closed:
                    self._ready.append(runner)
                elif runner is not None:
                    self._teardown.put(runner)
                if error is None:
                    # A start that works again: the failure reported before it no longer holds.
                    self._failed_starts_in_a_row, self._error = 0, None
                else:
                    self._failed_starts_in_a_row += 1
                reported = self._failed_starts_in_a_row >= FAILED_STARTS_TO_REPORT
                if error is not None and reported:
                    self._error = error
                self._cond.notify_all()
                if error is not None and reported and not self._closed:
                    self._cond.wait(RETRY_AFTER_S)

    def _teardown_loop(self) -> None:
        while True:
            runner = self._teardown.get()
            if runner is None:
                return
            try:
                runner.close()
            except Exception:  # noqa: BLE001 - a teardown failure must not stop the others
                log.exception("%s: closing a runner failed", self.name)

    def close(self) -> None:
        """Stop refilling, close the waiting runners, and wait for every teardown to finish."""
        with self._cond:
            self._closed = True
            waiting = list(self._ready)
            self._ready.clear()
            self._cond.notify_all()
        for thread in self._refill_threads:
            thread.join()
        for runner in waiting:
            self._teardown.put(runner)
        self._teardown.put(None)
        self._teardown_thread.join()


# -- candidate runner pools, one per kind of runner ----------------------------------------
@dataclass(frozen=True)
class PoolKey:
    """Everything a runner's sandbox is started with; jobs that agree on it can share a pool."""

    device: Device
    sandbox: SandboxKind
    gpu_index: int | None
    cpu_threads: int
    cuda_sync_wait: str
    isolate_network: bool
    cuda_arch: str | None
    size: int
    isolation: IsolationConfig
    scratch_bytes: tuple[int, int, int]  # /tmp, /dev/shm, /kj/ext
    memory_bytes: int  # the cap on each sandbox's memory (ResourceLimits.memory_bytes)


_pools: dict[PoolKey, SandboxPool] = {}
_pools_lock = threading.Lock()
_slot_root: Path | None = None


def _slot_folder() -> Path:
    global _slot_root
    if _slot_root is None:
        _slot_root = Path(tempfile.mkdtemp(prefix="kj-sandboxes-"))
        _slot_root.chmod(0o755)
    slot = Path(tempfile.mkdtemp(dir=_slot_root))
    # Passable by the sandbox's own uid (a root-run worker's sandboxes run as unprivileged uids); the
    # folder holds only the candidate's own build, mounted read-only.
    slot.chmod(0o755)
    return slot


def start_candidate_runner(key: PoolKey, settings: EngineSettings) -> WarmRunner:
    """Start one candidate runner and wait until it is warm (SandboxUnavailable / UserFailure).

    It starts (imports torch and Triton) on the build cores, at normal priority, so that a start
    never competes with a job timing on the lane's reserved cores; a job moves it there. Its start is a
    neighbour of the device (gpu_schedule): paused while a job is timed."""
    slot = _slot_folder()
    (slot / "ext").mkdir()
    limits = ResourceLimits(cpu_s=POOLED_CPU_S,
                            address_space_bytes=None if key.device == Device.cuda else 16 * 1024**3,
                            memory_bytes=key.memory_bytes)
    config = RunnerConfig(role="candidate", mode="run", device=key.device.value,
                          paths=RunnerPaths(ext_dir=slot / "ext"), sandbox=key.sandbox)
    plan = settings.cpu_plan()
    session = RunnerSession(config, settings, limits)
    session.process.spec.cpus = plan.build_cpus or None
    runner = WarmRunner(session, slot)
    try:
        runner.session.process.start()
        # Its CUDA and profiler set-up touch the device outside any job's stage: paused while a job is timed.
        with as_neighbour(settings.gpu_schedule, runner.session.process):
            runner.session.wait_ready(time.monotonic() + READY_TIMEOUT_S)
    except (SandboxUnavailable, UserFailure):
        runner.close()
        raise
    return runner


def pool_for(device: Device, sandbox: SandboxKind, settings: EngineSettings) -> SandboxPool:
    """The pool of candidate runners for this kind of job (started on first use)."""
    key = PoolKey(device, sandbox, settings.gpu_index, settings.cpu_threads, settings.cuda_sync_wait,
                  settings.isolate_network, settings.cuda_arch_list, settings.pool_size(), settings.isolation,
                  (settings.sandbox_tmp_bytes, settings.sandbox_shm_bytes, settings.sandbox_ext_bytes),
                  settings.sandbox_memory_bytes)
    with _pools_lock:
        pool = _pools.get(key)
        if pool is None:
            pool = SandboxPool(lambda: start_candidate_runner(key, settings), key.size,
                               name=f"sandboxes-{device.value}-{sandbox.value}")
            _pools[key] = pool
        return pool


def kill_runners_held_by(threads: set[threading.Thread]) -> int:
    """Kill the candidate runners `threads` hold, in every pool of this process (SandboxPool.kill_taken_by)."""
    with _pools_lock:
        pools = list(_pools.values())
    return sum(pool.kill_taken_by(threads) for pool in pools)


@atexit.register
def close_pools() -> None:
    with _pools_lock:
        pools = list(_pools.values())
        _pools.clear()
    for pool in pools:
        pool.close()
    if _slot_root is not None:
        shutil.rmtree(_slot_root, ignore_errors=True)
