"""The torch.compile baseline, measured in the background, once per problem, and persisted.

A job whose problem has no compile baseline yet (or only a stale one) asks for it here and goes on;
background threads per device measure it with a judge of their own (never a job's judge, never a
candidate's process), as soon as it is asked for, beside the batch that asked (one a job waits for
first): the batch's later jobs of that problem get it. Waiting for a quiet lane instead meant that
no job of a batch ever did (measured on an H100: `pending` on every job of every batch). It costs the
batch little: the compile is host work on the build cores that starts only while nobody times, and
the timing window takes its turn on the device like a job's.

1. start the judge (the reference on one trial's inputs and the timing pool's; fresh secret seeds,
   nothing of them kept) on the build cores at the builds' nice value (background work: the jobs' judges and
   runners come first), generating under the device's shared hold;
2. compile the reference with torch.compile (default mode) and check its output on the first trial
   against the eager one (sandbox_side/judging/compiled_reference.py); the compile is mostly host work of
   10-60 s, so it holds nothing on the device: it starts only while nobody times (GpuSchedule.background),
   and its judge is paused while a job is timed (GpuSchedule.neighbour: Inductor's autotuning runs kernels);
3. time the eager and the compiled reference interleaved in one exclusive window, on the lane's reserved
   cores as a job's window is (a calibration run of each, then alternating blocks, eager-compiled then
   compiled-eager, so that drift cancels), and
4. persist both medians and run counts (baselines.CompileBaselineRecord, and the eager timing as a
   ReferenceTimingRecord), or why there is no compiled baseline.

Jobs then attach the record (worker/engine/timing/compile_baseline.py): a job's speedup against torch.compile
is its own eager speedup times the record's eager/compiled ratio (baselines.compile_speedup). Only a
job whose reward uses the compile baseline waits for it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from contract.requests import EvalOptions
from worker.engine.cpu_plan import timing_cores
from worker.engine.engine_settings import EngineSettings
from worker.engine.gpu_schedule import as_neighbour
from worker.engine.launch import UserFailure
from worker.engine.process_tree import tree_cpu_s
from worker.engine.reference.generate_hold import GenerateHold
from worker.engine.reference.judge import JudgeSession
from worker.engine.reference.reference_cache import new_seeds
from worker.engine.timing.baselines import (
    COMPILE_BASELINE,
    BaselineKey,
    CompileBaselineRecord,
    Record,
    ReferenceTimingRecord,
)
from worker.engine.timing.timing_protocol import PairedWindow, TimedBlock, measure_paired

log = logging.getLogger(__name__)

# Each side's timing budget in the window (at most the asking job's): a ratio of medians needs no more,
# and the window holds the whole device.
WINDOW_BUDGET_S = 1.0
# In the baseline judge's environment, beside KJ_ROLE: the host's thread sampler counts its CPU apart from the jobs'.
BASELINE_PURPOSE_VARIABLE = "KJ_PURPOSE"
COMPILE_CORES = 4


@dataclass(frozen=True)
class BaselineTask:
    key: BaselineKey
    reference: str
    options: EvalOptions  # the first asking job's: device, sandbox, tolerances and timing budget
    asked_at: float = field(default_factory=time.monotonic, compare=False)


def measure(task: BaselineTask, settings: EngineSettings) -> tuple[BaselineKey, list[Record]]:
    """Measure one problem's compile baseline (see the module docstring); the key is the one the judge
    reports (its device model). Raises UserFailure when the reference itself fails."""
    schedule = settings.gpu_schedule
    opts = task.options.model_copy(update={"trials": 1, "seed": None,
                                           "timing_budget_s": min(task.options.timing_budget_s, WINDOW_BUDGET_S)})
    deadline = time.monotonic() + settings.compile_baseline_timeout_s
    seeds = new_seeds(None, 1, settings.timing_pool_size)
    seeds["shape_seeds"] = []
    judge = JudgeSession(task.reference, opts, settings)
    plan = settings.cpu_plan()
    # Background host work, as a build is: the build cores at the builds' nice value, so that the jobs' judges and
    # runners (nice 0) come first. At nice 0 a batch's first minute had room for `threads` compiles per lane beside
    # them, on a host that two GPUs keep 83% busy (benchmarks/results/gpu_2026-11-27_session15.md).
    judge.session.process.spec.cpus = plan.build_cpus or None
    judge.session.process.spec.nice = settings.build_nice
    judge.session.process.spec.env[BASELINE_PURPOSE_VARIABLE] = "compile-baseline"  # benchmarks/host_sched.py
    started = time.monotonic()
    measured_on = f"{socket.gethostname()}:gpu{settings.gpu_index}" if settings.gpu_index is not None \
        else socket.gethostname()
    try:
        judge.launch(deadline)
        # The compile runs kernels (Inductor's autotuning, the compiled graph's check) for seconds without holding
        # the device: the judge is paused while a job is timed (gpu_schedule's neighbours).
        with as_neighbour(schedule, judge.session.process):
            generated = judge.generate(seeds, deadline, shape_max_bytes=0, hold=GenerateHold.on_schedule(schedule))
            key = BaselineKey.of(task.reference, opts.device.value, generated.environment.get("gpu_name"))
            with schedule.background() if schedule is not None else contextlib.nullcontext():
                try:
                    compiled = judge.compile(deadline)
                except UserFailure as failure:
                    reason = (f"torch.compile of the reference broke the judge ({failure.kind}): "
                              f"{failure.message[:500]}")
                    return key, [CompileBaselineRecord(False, time.time(), reason, measured_on=measured_on)]
        if not compiled.available:
            return key, [CompileBaselineRecord(False, time.time(), compiled.reason or "not available",
                                               compile_s=compiled.compile_s, measured_on=measured_on)]

        def eager_block(runs: int, warmup: int, _keep: int, spacer_ms: float) -> TimedBlock:
            return judge.time(runs, warmup, deadline, spacer_ms=spacer_ms)

        def compiled_block(runs: int, warmup: int, _keep: int, spacer_ms: float) -> TimedBlock:
            return judge.time(runs, warmup, deadline, compiled=True, spacer_ms=spacer_ms)

        # The same protocol as a job's timing: the two sides as neighbours in one exclusive window, on the lane's
        # reserved cores as a job's window is (its niced process would otherwise launch among the builds).
        with schedule.exclusive() if schedule is not None else contextlib.nullcontext(), \
                timing_cores(plan, [judge.pid]):
            try:
                window: PairedWindow = measure_paired(eager_block, compiled_block, opts)
            except UserFailure as failure:
                reason = f"the compiled reference failed while timed ({failure.kind}): {failure.message[:500]}"
                return key, [CompileBaselineRecord(False, time.time(), reason, compile_s=compiled.compile_s,
                                                   measured_on=measured_on)]
        cpu_s = tree_cpu_s(judge.pid)
    finally:
        judge.close()
    log.info("compile baseline of reference %s measured in %.0f s, %s CPU s (the compile %.0f s)",
             key.reference_sha256[:12], time.monotonic() - started, "?" if cpu_s is None else f"{cpu_s:.0f}",
             compiled.compile_s)
    eager, compiled_stats = window.reference_stats, window.candidate_stats
    now = time.time()
    return key, [
        CompileBaselineRecord(True, now, None, eager.median_ms, compiled_stats.median_ms, eager.n, compiled_stats.n,
                              compiled.compile_s, len(window.pairs), measured_on, compiled_stats.model_dump()),
        ReferenceTimingRecord(eager.median_ms, eager.n, now, measured_on),
    ]


class BaselineWorker:
    """One device's background threads: measure asked-for baselines, those jobs wait for first, in asking order."""

    def __init__(self, settings: EngineSettings,
                 measure_task: Callable[[BaselineTask, EngineSettings], tuple[BaselineKey, list[Record]]] = measure,
                 threads: int = 1):
        self.settings = settings
        self.book = settings.baseline_book()
        self._measure = measure_task
        self._queue: deque[BaselineTask] = deque()
        self._pending: set[BaselineKey] = set()
        self._failed: dict[BaselineKey, str] = {}  # the reference failed in the baseline's judge
        self._waiters: dict[BaselineKey, int] = {}  # jobs waiting for a key
        self._cond = threading.Condition()
        # Compiles are host work on the build cores: several at once; their windows take turns on the device.
        for index in range(max(1, threads)):
            threading.Thread(target=self._loop, name=f"compile-baselines-{index}", daemon=True).start()

    def request(self, task: BaselineTask) -> None:
        """Measure `task` in the background unless it is already queued or being measured."""
        with self._cond:
            if task.key in self._pending:
                return
            self._pending.add(task.key)
            self._failed.pop(task.key, None)
            self._queue.append(task)
            self._cond.notify_all()

    def pending(self, key: BaselineKey) -> bool:
        with self._cond:
            return key in self._pending

    def failure(self, key: BaselineKey) -> str | None:
        with self._cond:
            return self._failed.get(key)

    def wait(self, key: BaselineKey, timeout_s: float) -> Record | None:
        """Wait until `key` is measured (or `timeout_s`); its compile baseline record then, if any. A key
        a job waits for is measured next, whatever the lane is doing."""
        with self._cond:
            self._waiters[key] = self._waiters.get(key, 0) + 1
            self._cond.notify_all()
            try:
                self._cond.wait_for(lambda: key not in self._pending, timeout_s)
            finally:
                self._waiters[key] -= 1
                if not self._waiters[key]:
                    del self._waiters[key]
        return self.book.get(key, COMPILE_BASELINE)

    def _next(self) -> BaselineTask:
        """The next task: one a job waits for first, else the oldest. Called with the condition held."""
        self._cond.wait_for(lambda: bool(self._queue))
        urgent = [t for t in self._queue if self._waiters.get(t.key)]
        task = urgent[0] if urgent else self._queue[0]
        self._queue.remove(task)
        return task

    def _loop(self) -> None:
        while True:
            with self._cond:
                task = self._next()
            failure = None
            try:
                measured_key, records = self._measure(task, self.settings)
                for record in records:
                    self.book.put(measured_key, record)
                    if measured_key != task.key:  # the job guessed another device model: answer it too
                        self.book.put(task.key, record)
            except UserFailure as exc:
                failure = f"the reference failed in the baseline's judge ({exc.kind}): {exc.message[:300]}"
            except Exception as exc:  # noqa: BLE001 - the thread must go on with the next problem
                log.exception("measuring a compile baseline failed")
                failure = f"the baseline could not be measured: {type(exc).__name__}: {exc}"
            with self._cond:
                self._pending.discard(task.key)
                if failure is not None:
                    self._failed[task.key] = failure
                self._cond.notify_all()


_workers: dict[tuple, BaselineWorker] = {}
_workers_lock = threading.Lock()


def worker_for(settings: EngineSettings) -> BaselineWorker:
    """This device's baseline worker (one per GPU index and baseline book)."""
    key = (settings.gpu_index, id(settings.baseline_book()))
    with _workers_lock:
        worker = _workers.get(key)
        if worker is None:
            worker = _workers[key] = BaselineWorker(settings, threads=compile_threads(settings))
        return worker


def compile_threads(settings: EngineSettings) -> int:
    """One lane's concurrent baseline compiles: its share of one per COMPILE_CORES of the host's build cores
    (Inductor compiles with up to 4 threads), which every lane of the host shares; one at a time without a
    device schedule, which alone keeps their timing windows apart. Each lane counting every build core ran 14
    compiles at once on two GPUs against 3 on one, and took 576 CPU s of a 128-job batch against 222
    (benchmarks/results/gpu_2026-11-27_session16.md)."""
    if settings.gpu_schedule is None:
        return 1
    build_cores = len(settings.cpu_plan().build_cpus) or os.cpu_count() or 1
    return max(1, build_cores // (COMPILE_CORES * max(settings.lanes_on_host, 1)))


def register(settings: EngineSettings, worker: BaselineWorker) -> None:
    """Serve this device and book with `worker` (a test's, measuring with a stand-in)."""
    with _workers_lock:
        _workers[(settings.gpu_index, id(settings.baseline_book()))] = worker
