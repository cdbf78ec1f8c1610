"""The job pipeline: builds on a CPU pool ahead of the device, several jobs per GPU, timing alone.

    claim ──> prepare (CPU threads: validate, policy, CUDA build) ──> ready (priority order)
          ──> device threads (per GPU: reference, candidate, compare shared; timing exclusive)
          ──> result in the store

Each device has a `DeviceLane`. A lane admits at most `capacity` jobs at once
(`device_concurrency` on the device plus `prepare_ahead` being prepared or waiting), so the
node never claims or builds far more than its devices consume: a caller waits for room in
`admit()` before it claims a job. The prepare threads are shared by the lanes of a process;
heavy CUDA builds are further limited by the build pool (worker/engine/build/pool.py).

Both launchers feed lanes through `admit()`: the embedded workers (worker/jobs/launchers/embedded_launcher.py) claim the
next queued job from the store, the Celery task (worker/jobs/distributed/tasks.py) claims the job
its message names. Every stage is visible in the store (`building`, `built_at`, `running`),
and a job in any stage when the process dies is requeued by JobStore's recovery.

A lane that has jobs but makes no progress for `stall_s` is restarted by the process's watchdog
(worker/jobs/watchdog.py, `DeviceLane.restart`): its jobs go back to the queue and fresh device
threads start; the stuck threads are abandoned, and what they do afterwards changes nothing (their
tickets are marked abandoned, and the store refuses their attempt's writes).
"""

from __future__ import annotations

import functools
import heapq
import itertools
import logging
import math
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from worker.config.pipeline_section import DEFAULT_BURST, DEFAULT_DEVICE_CONCURRENCY, DEFAULT_STALL_S
from worker.config.tree import KernelJudgeConfig, load_config
from worker.engine.build.pool import build_slots
from worker.engine.cpu_plan import confine_supervisor
from worker.engine.engine_settings import EngineSettings
from worker.engine.gpu_monitor import memory_share_of
from worker.engine.gpu_schedule import GpuSchedule
from worker.jobs.claim_policy import ClaimPolicy
from worker.jobs.engine_call import (
    EngineCalls,
    ReadyJob,
    WorkerIdentity,
    engine_settings_for,
    execute_ready,
    prepare_claimed,
    real_engine,
)
from worker.jobs.store import Job, JobStore
from worker.jobs.store.baseline_rows import StoreBaselineBook
from worker.jobs.store.queue import ClaimChoice
from worker.jobs.watchdog import LaneWatchdog

log = logging.getLogger(__name__)

RELEASED_ON_STOP = "returned to the queue: its worker stopped before the job reached the device"
STALLED = "its device lane made no progress and was restarted (KERNELJUDGE_WATCHDOG_STALL_S)"
RESTART_LOCK_S = 30.0  # a restart waits this long for the lane's lock (held only for moments when healthy)


class LaneRestarted(Exception):
    """The future of a job whose lane was restarted (watchdog): the job went back to the queue (or, after
    its retry, was failed); a caller that holds a claim token for it (the Celery task) claims again."""


@dataclass(frozen=True)
class PipelineConfig:
    device_concurrency: int = DEFAULT_DEVICE_CONCURRENCY  # jobs in device stages at once per device
    prepare_ahead: int = 2  # jobs per device being prepared or prepared and waiting
    prepare_threads: int = 3  # prepare (validate + build) threads per process
    claim_burst: int = DEFAULT_BURST  # claims in a row of one problem while others wait (claim_policy)
    stall_s: float = DEFAULT_STALL_S  # a lane with jobs and no progress this long is restarted; 0: never

    @property
    def capacity(self) -> int:
        """Jobs one device lane holds at once (claimed and not finished)."""
        return self.device_concurrency + self.prepare_ahead

    @property
    def per_problem(self) -> int:
        """Jobs of one problem a lane holds while other problems wait: enough to keep every device slot
        on its own problem (each job of a problem needs a judge of that problem)."""
        return max(1, self.capacity // self.device_concurrency)

    def warm_sandboxes(self, device: str) -> int:
        """Warm candidate runners per lane when none is configured: on a GPU one per device slot, and two
        started ahead for the jobs being prepared; on a CPU worker one (there the runners' start-ups would
        take the very cores the jobs run and time on)."""
        return self.device_concurrency + min(self.prepare_ahead, 2) if device == "cuda" else 1

    @classmethod
    def from_config(cls, config: KernelJudgeConfig, device: str | None = None, lanes: int = 1) -> PipelineConfig:
        """The configuration's pipeline section for `lanes` lanes of `device` in one process (default: the
        Celery worker's device), with what it leaves unset sized to the device and the build slots.

        By default a GPU runs 8 jobs' correctness stages at once and a CPU worker 2
        (PipelineSection.concurrency_for), and the lanes together prepare enough jobs ahead to keep every
        build slot of the node busy: each lane its share. (Each lane preparing all of them put twice as many
        jobs in `building` on two H100s, each claimed job with a judge started ahead, for the same cores.)
        Prepare threads outnumber build slots so that a Triton candidate's prepare (milliseconds) never
        waits behind CUDA builds.
        """
        section = config.pipeline
        slots = build_slots(EngineSettings.from_config(config))
        concurrency = section.concurrency_for(device or section.worker_device)
        ahead, threads = section.prepare_ahead, section.prepare_threads
        return cls(device_concurrency=concurrency,
                   prepare_ahead=ahead if ahead is not None else max(concurrency, math.ceil(slots / max(1, lanes))),
                   prepare_threads=threads if threads is not None else slots + 2,
                   claim_burst=section.claim_burst, stall_s=section.stall_s)


@dataclass(frozen=True)
class LaneState:
    admitted: int  # claimed and not finished
    preparing: int
    ready: int  # prepared, waiting for a device thread
    executing: int
    waiting_for_room: int  # callers blocked in admit()


@dataclass(frozen=True)
class LaneHealth:
    """What the watchdog, /v1/ready and /metrics read of a lane."""

    name: str
    busy: bool  # jobs claimed and not finished
    last_progress_s_ago: float  # since its last stage transition (claim, prepared, device stage, finish)
    stalled: bool  # the watchdog found it stalled and has not restarted it yet
    restarts: int


@dataclass
class _Ticket:
    job: Job
    future: Future
    claimed: int  # this lane's claim sequence: the claim policy's order (priority, fairness, by problem)
    ready: ReadyJob | None = None
    thread: threading.Thread | None = None  # the thread working on it now (prepare, then device)
    # Set (under the lane's lock) when a restart gave its job back: its thread's later results change nothing.
    abandoned: bool = False


class DeviceLane:
    """One device's part of the pipeline: admission, prepared jobs, and its device threads."""

    def __init__(self, pipeline: JobPipeline, identity: WorkerIdentity, index: int = 0, lanes: int = 1):
        config = pipeline.config
        self.pipeline = pipeline
        self.identity = identity
        self.capacity = config.capacity
        self.schedule = self._new_schedule()
        self.settings = pipeline.settings_factory(identity, self.schedule)
        _configure_lane(self.settings, pipeline, identity, index, lanes)
        self.claims = ClaimPolicy(per_problem=config.per_problem, burst=config.claim_burst)
        self._cond = threading.Condition()
        self._admitted = self._preparing = self._executing = self._waiting = 0
        self._ready: list[tuple[int, int, _Ticket]] = []
        self._order = itertools.count()
        self._threads: list[threading.Thread] = []
        self._in_flight: Counter[str] = Counter()  # claimed, unfinished jobs per problem
        self._on_device: Counter[str] = Counter()  # jobs per problem in device stages now
        self._tickets: dict[int, _Ticket] = {}  # claimed, unfinished, by claim sequence
        self._generation = 0  # device threads of an older generation exit (a restart abandoned them)
        self._progress_at = time.monotonic()
        self._stalled = False
        self._restarts = 0

    def _new_schedule(self) -> GpuSchedule:
        """The lane's device schedule; on a GPU it admits shared stages by the card's measured memory."""
        gpu = self.identity.gpu
        memory = memory_share_of(int(gpu)) if self.identity.device == "cuda" and gpu and gpu.isdigit() else None
        return GpuSchedule(self.identity.name, self.pipeline.config.device_concurrency, memory_share=memory)

    # ---- what to claim --------------------------------------------------------------------

    def claim_next(self) -> Job | None:
        """Claim the next queued job for this lane by its claim policy (worker/jobs/claim_policy.py). The lanes
        of a process claim one at a time, each seeing what the others hold (`held_problems`): two lanes claiming
        at once both opened the oldest problem, and each started a judge of it."""
        store = self.pipeline.store
        with self.pipeline.claim_lock:
            warm = self._warm_problems()
            elsewhere = set().union(*(lane.held_problems() for lane in self.pipeline.lanes if lane is not self))
            chosen: list[ClaimChoice] = []
            with self._cond:
                in_flight = dict(self._in_flight)

            def choose(groups):
                choice = self.claims.choose(groups, in_flight, warm, elsewhere)
                if choice is not None:
                    chosen.append(choice)
                return choice

            job = store.claim_next(self.identity.name, self.identity.gpu, choose)
            if job is not None and chosen:
                self.claims.claimed(chosen[-1])
            return job

    def held_problems(self) -> set[str]:
        """Problems this lane serves: jobs of them in flight, its turn open on them (claim_policy), or a judge of
        them warm. Other lanes open other problems first. Called with the pipeline's claim lock held."""
        with self._cond:
            in_flight = set(self._in_flight)
        return in_flight | self.claims.open_problems() | self._warm_problems()

    def _warm_problems(self) -> set[str]:
        calls = self.pipeline.engine
        if calls.warm_problems is None:
            return set()
        try:
            return set(calls.warm_problems(self.settings))
        except Exception:  # noqa: BLE001 - only a preference
            log.exception("%s could not read its warm problems", self.identity.name)
            return set()

    # ---- admission ------------------------------------------------------------------------

    def admit(self, claim: Callable[[], Job | None], timeout: float | None = None) -> Future | None:
        """Wait for room (or `timeout`), then claim a job with `claim` and start it.

        Returns a future of the job's final record (None if this attempt lost the job), or None
        when nothing was claimed (no room in time, no job, or the pipeline is stopping).
        """
        with self._cond:
            self._waiting += 1
            self._cond.notify_all()
            roomy = self._cond.wait_for(lambda: self.pipeline.stopping or self._admitted < self.capacity, timeout)
            self._waiting -= 1
            if not roomy or self.pipeline.stopping:
                self._cond.notify_all()
                return None
            self._admitted += 1
            self.schedule.note_lane_jobs(self._admitted)
            self._cond.notify_all()
        try:
            job = claim()
        except BaseException:
            self._leave()
            raise
        if job is None:
            self._leave()
            return None
        ticket = _Ticket(job=job, future=Future(), claimed=next(self._order))
        with self._cond:
            self._preparing += 1
            self._in_flight[job.problem_id] += 1
            self._tickets[ticket.claimed] = ticket
            self._progress()
            self._cond.notify_all()
        try:
            self.pipeline.submit_prepare(self._prepare, ticket)
        except RuntimeError:  # the pool shut down between the check above and now
            with self._cond:
                if not ticket.abandoned:
                    self._preparing -= 1
            self.pipeline.release_unrun(job)
            self._complete(ticket, None)
        return ticket.future

    def state(self) -> LaneState:
        with self._cond:
            return self._state()

    def _state(self) -> LaneState:
        return LaneState(self._admitted, self._preparing, len(self._ready), self._executing, self._waiting)

    def health(self) -> LaneHealth:
        """Read without the lane's lock (each field is one atomic read), so that the watchdog and /v1/ready
        still answer when a stuck thread holds it."""
        return LaneHealth(self.identity.name, bool(self._tickets), time.monotonic() - self._progress_at,
                          self._stalled, self._restarts)

    def _progress(self) -> None:
        """A stage transition: the lane's sign of life for the watchdog (a float store, atomic)."""
        self._progress_at = time.monotonic()

    def wait_until(self, predicate: Callable[[LaneState], bool], timeout: float | None = None) -> bool:
        """Block until `predicate(state)` holds (re-checked at every change); False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: predicate(self._state()), timeout)

    def _leave(self) -> None:
        with self._cond:
            self._admitted -= 1
            self.schedule.note_lane_jobs(self._admitted)
            self._cond.notify_all()

    # ---- stages ---------------------------------------------------------------------------

    def _prepare(self, ticket: _Ticket) -> None:
        job = ticket.job
        with self._cond:
            if ticket.abandoned:  # its lane restarted before a thread got to it: the watchdog requeued it
                return
            ticket.thread = threading.current_thread()
        if self.pipeline.stopping:
            with self._cond:
                if not ticket.abandoned:
                    self._preparing -= 1
            self.pipeline.release_unrun(job)
            self._complete(ticket, None)
            return
        try:
            outcome = prepare_claimed(self.pipeline.store, job, self.identity, self.settings, self.pipeline.engine)
        except Exception:  # the store failed us; the engine's own crashes are recorded by the runner
            log.exception("%s could not prepare job %s", self.identity.name, job.id)
            outcome = self.pipeline.fail_safely(job, "the worker failed while preparing this job; see its log")
        with self._cond:
            abandoned = ticket.abandoned
            if not abandoned:
                self._preparing -= 1
                self._progress()
            if isinstance(outcome, ReadyJob) and not self.pipeline.stopping and not abandoned:
                ticket.ready = outcome
                key = (-job.priority, ticket.claimed, ticket)
                heapq.heappush(self._ready, key)
                self._cond.notify_all()
                return
            self._cond.notify_all()
        if isinstance(outcome, ReadyJob) and abandoned:  # the watchdog gave the job back; the store refuses us
            outcome.discard()
            outcome = None
        elif isinstance(outcome, ReadyJob):  # stopping: the job goes back to the queue, unrun
            self.pipeline.release_unrun(outcome.job, outcome)
            outcome = None
        self._complete(ticket, outcome)

    def _next_ready(self) -> _Ticket:
        """The prepared job to run next: highest priority first; among equals, one whose problem has no
        job on the device now (the jobs on the device share their problems' judges, whose exchanges take
        turns: different problems' jobs wait for none), then the first claimed (claim order keeps a
        problem's jobs together: ordering by submission time instead let a problem's last job be passed
        until its judge was evicted). Called with the lock held and `_ready` not empty."""
        best = min(range(len(self._ready)),
                   key=lambda i: (self._ready[i][0], self._on_device[self._ready[i][2].job.problem_id] > 0,
                                  self._ready[i][1]))
        entry = self._ready.pop(best)
        heapq.heapify(self._ready)
        return entry[2]

    def _device_loop(self, generation: int) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self.pipeline.stopping or self._generation != generation
                                    or self._ready)
                if self.pipeline.stopping or self._generation != generation:
                    return
                ticket = self._next_ready()
                ticket.thread = threading.current_thread()
                self._executing += 1
                self._on_device[ticket.job.problem_id] += 1
                self._progress()
                lease = self.schedule.lease()
                self._cond.notify_all()
            final = None
            try:
                assert ticket.ready is not None
                final = execute_ready(self.pipeline.store, ticket.ready, self.settings, self.pipeline.engine,
                                      lease, functools.partial(self._stage_entered, ticket))
            except Exception:
                log.exception("%s could not record job %s", self.identity.name, ticket.job.id)
                final = self.pipeline.fail_safely(ticket.job, "the worker failed to record this job's outcome; "
                                                              "see the server log")
            finally:
                with self._cond:
                    if not ticket.abandoned:
                        self._executing -= 1
                        self._on_device[ticket.job.problem_id] -= 1
                    self._cond.notify_all()
                self._complete(ticket, final)

    def _stage_entered(self, ticket: _Ticket) -> None:
        if not ticket.abandoned:  # an abandoned thread is no sign of this lane's life
            self._progress()

    def _complete(self, ticket: _Ticket, final: Job | None) -> None:
        with self._cond:
            abandoned = ticket.abandoned
            if not abandoned:
                self._tickets.pop(ticket.claimed, None)
                self._in_flight[ticket.job.problem_id] -= 1
                if self._in_flight[ticket.job.problem_id] <= 0:
                    del self._in_flight[ticket.job.problem_id]
                self._progress()
        if abandoned:  # the restart settled its future and its place in the lane
            if final is not None:  # it finished before the watchdog could take it back: report it
                self.pipeline.finished(final)
            return
        self._leave()
        ticket.future.set_result(final)
        if final is not None:
            self.pipeline.finished(final)

    # ---- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        with self._cond:
            generation = self._generation
            threads = [threading.Thread(target=self._device_loop, args=(generation,), daemon=True,
                                        name=f"{self.identity.name}/device{slot}"
                                             + (f"/restart{generation}" if generation else ""))
                       for slot in range(self.pipeline.config.device_concurrency)]
            self._threads = threads
        for thread in threads:
            thread.start()

    def mark_stalled(self) -> None:
        """The watchdog found this lane stalled: not ready until `restart` has run (no lock: see health)."""
        self._stalled = True

    def restart(self, reason: str = STALLED) -> list[str]:
        """Give this lane's jobs back and start fresh device threads (the watchdog's cure for a stall).

        Every job the lane holds is taken from it at once: prepared jobs waiting for a device thread go
        back to the queue unrun (as at stop); jobs a thread is working on (preparing, on the device) go
        back with their attempt counted, so the store refuses whatever that thread writes later, or are
        failed if it was their retry (JobStore.requeue_stalled). The old threads are abandoned (Python
        cannot stop a thread): their tickets are marked so that nothing they do afterwards touches the
        lane's counters or futures; the device schedule is replaced, since a stuck thread may hold it; the
        sandboxes the old threads hold are killed (EngineCalls.reset), so one blocked on a reply wakes up
        with an error; a prepare pool that may have a stuck thread is replaced. Returns the ids of the jobs
        taken back (none when the lane's own lock stays held: the lane then stays stalled, not ready).
        """
        self._stalled = True
        if not self._cond.acquire(timeout=RESTART_LOCK_S):
            log.error("%s cannot restart: a thread holds its lock (see the stacks logged)", self.identity.name)
            return []
        try:
            tickets = list(self._tickets.values())
            # No thread has these, nor will: prepared and waiting for a device thread, or not yet taken up
            # by a prepare thread (which sees `abandoned` first). They go back to the queue uncounted.
            unrun = {entry[2].claimed for entry in self._ready} | {t.claimed for t in tickets if t.thread is None}
            old_threads = {ticket.thread for ticket in tickets if ticket.thread is not None} | set(self._threads)
            preparing = self._preparing > 0
            for ticket in tickets:
                ticket.abandoned = True
            self._tickets.clear()
            self._ready.clear()
            self._in_flight.clear()
            self._on_device.clear()
            self._admitted -= len(tickets)  # what remains: callers of admit() between room and ticket
            self._preparing = self._executing = 0
            self._generation += 1  # the old device threads exit when they come back
            self.schedule = self._new_schedule()
            if hasattr(self.settings, "gpu_schedule"):
                self.settings.gpu_schedule = self.schedule
            self.schedule.note_lane_jobs(self._admitted)
            self._cond.notify_all()
        finally:
            self._cond.release()
        for ticket in tickets:
            self._give_back(ticket, reason, unrun=ticket.claimed in unrun)
        self._reset_engine(old_threads)
        if preparing:
            self.pipeline.renew_prepare_pool()
        if not self.pipeline.stopping:
            self.start()
        with self._cond:
            self._stalled = False
            self._restarts += 1
            self._progress()
            self._cond.notify_all()
        return [ticket.job.id for ticket in tickets]

    def _give_back(self, ticket: _Ticket, reason: str, *, unrun: bool) -> None:
        job = ticket.job
        if unrun:  # no thread has it: back to the queue uncounted, as at stop
            self.pipeline.release_unrun(job, ticket.ready, f"returned to the queue: {reason}")
            ticket.future.set_exception(LaneRestarted(reason))
            return
        try:
            outcome = self.pipeline.store.requeue_stalled(job.id, job.attempts, reason)
        except Exception:  # the store is down: the next start's recovery (or the reaper) settles the job
            log.exception("%s could not give job %s back", self.identity.name, job.id)
            outcome = "gone"
        log.warning("%s restarted: job %s (attempt %d) %s", self.identity.name, job.id, job.attempts, outcome)
        if outcome == "requeued":
            ticket.future.set_exception(LaneRestarted(reason))
        elif outcome == "failed":
            final = self.pipeline.store.get(job.id)
            ticket.future.set_result(final)
            if final is not None:
                self.pipeline.finished(final)
        else:  # its thread finished it meanwhile and reports it (see _complete)
            ticket.future.set_result(None)

    def _reset_engine(self, threads: set[threading.Thread]) -> None:
        reset = self.pipeline.engine.reset
        if reset is None:
            return
        try:
            killed = reset(self.settings, threads)
            log.warning("%s restarted: killed %s sandboxes its old threads held", self.identity.name, killed)
        except Exception:  # noqa: BLE001 - the restart goes on: fresh threads start their own sandboxes
            log.exception("%s could not kill its old threads' sandboxes", self.identity.name)

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def return_ready_jobs(self) -> None:
        """Prepared jobs that no device thread took go back to the queue, unrun (at stop)."""
        with self._cond:
            waiting = [entry[2] for entry in self._ready]
            self._ready.clear()
            self._cond.notify_all()
        for ticket in waiting:
            self.pipeline.release_unrun(ticket.job, ticket.ready)
            self._complete(ticket, None)

    def join(self, timeout_s: float) -> None:
        for thread in list(self._threads):
            thread.join(timeout_s)  # a thread mid-job is abandoned; its job is requeued next start


def _configure_lane(settings, pipeline: JobPipeline, identity: WorkerIdentity, index: int, lanes: int) -> None:
    """What the engine learns from the lane it serves: persisted baselines in the job store, the warm
    runner pool sized to the lane, and the lane's place on its host (its reserved cores, cpu_plan)."""
    if hasattr(settings, "baselines"):
        settings.baselines = pipeline.baselines
    if getattr(settings, "warm_sandboxes", 0) is None:
        settings.warm_sandboxes = pipeline.config.warm_sandboxes(identity.device)
    if hasattr(settings, "lane_index") and lanes > 1:
        settings.lane_index, settings.lanes_on_host = index, lanes
    if hasattr(settings, "cpu_plan"):
        plan = settings.cpu_plan()
        log.info("lane %d of %d (%s): times on cores %s, builds and correctness stages on %s", index, lanes,
                 identity.device, list(plan.lane_cpus) or "any", list(plan.build_cpus) or "any")
        confine_supervisor(plan)


class JobPipeline:
    """Device lanes of one process, with the prepare threads they share."""

    def __init__(self, store: JobStore, identities: list[WorkerIdentity], config: PipelineConfig | None = None,
                 *, engine: EngineCalls | None = None, on_finished: Callable[[Job], object] | None = None,
                 settings_factory: Callable | None = None, process_config: KernelJudgeConfig | None = None):
        """`process_config`: the configuration its process loaded (default: load_config()); the pipeline's
        own (`config`) and each lane's engine settings are made from it unless given."""
        self.store = store
        self.process_config = process_config if process_config is not None else load_config()
        self.config = config or PipelineConfig.from_config(self.process_config,
                                                           identities[0].device if identities else None,
                                                           lanes=len(identities))
        self.engine = engine or real_engine()
        self.on_finished = on_finished
        self.settings_factory = settings_factory or functools.partial(engine_settings_for,
                                                                      config=self.process_config)
        self.stopping = False
        self.prepare_pool = ThreadPoolExecutor(self.config.prepare_threads, thread_name_prefix="kj-prepare")
        self._pool_lock = threading.Lock()
        self.baselines = StoreBaselineBook(store)
        self.claim_lock = threading.Lock()  # the lanes' claims, one at a time (DeviceLane.claim_next)
        self.lanes = [DeviceLane(self, identity, index, len(identities)) for index, identity in enumerate(identities)]
        self.watchdog: LaneWatchdog | None = None

    def start(self) -> None:
        for lane in self.lanes:
            lane.start()
        if self.config.stall_s > 0:
            self.watchdog = LaneWatchdog(self.lanes, self.config.stall_s)
            self.watchdog.start()

    def health(self) -> list[LaneHealth]:
        return [lane.health() for lane in self.lanes]

    def submit_prepare(self, fn: Callable, *args) -> Future:
        """Submit to the prepare pool, the current one if a restart replaced it meanwhile."""
        while True:
            pool = self.prepare_pool
            try:
                return pool.submit(fn, *args)
            except RuntimeError:
                if self.stopping or pool is self.prepare_pool:
                    raise

    def renew_prepare_pool(self) -> None:
        """A fresh prepare pool (a lane restarted with jobs being prepared: one of its threads may be stuck
        for good). The old pool runs what was submitted to it, and its threads exit when done."""
        with self._pool_lock:
            if self.stopping:
                return
            old = self.prepare_pool
            self.prepare_pool = ThreadPoolExecutor(self.config.prepare_threads, thread_name_prefix="kj-prepare")
        old.shutdown(wait=False, cancel_futures=False)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop taking jobs; prepared jobs not yet on a device go back to the queue, unrun."""
        if self.watchdog is not None:
            self.watchdog.stop()
        self.stopping = True
        for lane in self.lanes:
            lane.wake()
            lane.return_ready_jobs()
        with self._pool_lock:
            self.prepare_pool.shutdown(wait=False, cancel_futures=False)
        for lane in self.lanes:
            lane.join(timeout_s)

    def release_unrun(self, job: Job, ready: ReadyJob | None = None, reason: str = RELEASED_ON_STOP) -> None:
        if ready is not None:
            ready.discard()
        try:
            self.store.release(job.id, job.attempts, reason)
        except Exception:  # the next start's recovery requeues it instead
            log.exception("could not return job %s to the queue", job.id)

    def fail_safely(self, job: Job, reason: str) -> Job | None:
        try:
            if self.store.fail(job.id, reason, attempt=job.attempts):
                return self.store.get(job.id)
        except Exception:
            log.exception("could not mark job %s failed", job.id)
        return None

    def finished(self, job: Job) -> None:
        if self.on_finished is None:
            return
        try:
            self.on_finished(job)
        except Exception:
            log.exception("finish hook failed for job %s", job.id)
