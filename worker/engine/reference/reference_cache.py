"""Per-problem reference cache: warm judges holding the input sets and the reference's outputs.

An entry is keyed by everything that changes what the judge would compute: the reference
source's hash, the device (GPU index on this host, and the GPU model the judge reports is kept
with the entry), torch/Triton versions, the sandbox kind and the options that shape inputs,
outputs or timing. Its input sets come from seeds drawn from a secret master seed that never
leaves the supervisor and the judge; they rotate on a schedule: an entry is replaced by a fresh
judge with new seeds once it is `reference_max_age_s` old or has served `reference_max_uses`
jobs, so any one input set is in front of a bounded number of candidates. The reference is timed in
every job, interleaved with the candidate (worker/engine/timing/timing_protocol.py), so no timing is kept
here; the torch.compile baseline is measured once per problem in the background and persisted
(worker/engine/timing/baselines.py).

Capacity is memory, not a count: each judge's device and host memory is measured when it starts
(memory_budget), and the judges together stay within the worker's budget (and under
`reference_cache_entries`). When something must go, the entry that is cheapest to lose goes: each
entry's value is what a miss costs (its judge's measured start and generate time) per share of the
budget it holds, plus the cache's inflation at its last use (GreedyDual-Size: recency and cost
together; the inflation rises to each evicted entry's value, so an entry not used for a while
loses to newer ones whatever it cost).

Jobs share a judge: a job holds its entry from checkout to checkin (its inputs, comparison and timing
come from that one judge), up to `jobs_per_judge` jobs at once (the device's concurrency), and takes the
judge only for each exchange with it (`CachedReference.exchange`: one command and its reply at a time).
A job held its judge from its reference stage to its end before: 6 s a job at the median and 19 s at the 90th
percentile on two H100s (2026-11-27), most of it waiting for the device, against about 2 s of use; the
other jobs of its problem started judges of their own meanwhile (13 of 118 jobs, 12-98 s each). A problem
may still have several judges, up to `per_key`, when more jobs hold its judges than they may share. A
judge can also be started ahead of its first job (`begin_warming` / `end_warming`, used by
worker/engine/reference/judge_start.py): a job that finds its problem's judge starting waits for it instead
of starting another.

Isolation: an entry serves one problem only (a reference never judges another problem's jobs), its jobs'
exchanges never overlap, and it is dropped whenever its judge misbehaves or dies. A judge that failed in one
job's exchange is `broken` at once: the other jobs holding it get no answer from it in their next exchange and
run their device stages again with another judge (worker/engine/device_stage.py), so one job's candidate
never decides another's verdict.
"""

from __future__ import annotations

import hashlib
import logging
import random
import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from contract.requests import EvalOptions
from contract.results import JudgeStartNote
from contract.statuses import Device, SandboxKind
from worker.engine.engine_settings import EngineSettings
from worker.engine.memory_budget import HeldMemory, MemoryBudget
from worker.engine.reference.judge import JudgeSession
from worker.engine.timing.baselines import package_version

log = logging.getLogger(__name__)


def new_seeds(master: int | None, trials: int, pool: int) -> dict:
    """Seeds the candidate cannot know: drawn from a secret master seed unless one is given."""
    rng = random.Random(master if master is not None else secrets.randbits(63))
    return {
        "trial_seeds": [rng.randrange(2**31) for _ in range(trials)],
        "pool_seeds": [rng.randrange(2**31) for _ in range(pool)],
        "init_seed": rng.randrange(2**31),
        # Drawn last so that the seeds above stay what they were for a given master seed.
        "shape_seeds": [rng.randrange(2**31) for _ in range(2)],
    }


@dataclass(frozen=True)
class ProblemKey:
    reference_sha256: str
    device: Device
    gpu_index: int | None
    sandbox: SandboxKind
    torch: str | None
    triton: str | None
    trials: int
    atol: float | None
    rtol: float | None
    seed: int | None
    shape_check: bool
    pool_size: int
    shape_max_bytes: int
    probe_max_bytes: int
    timing: tuple

    @classmethod
    def of(cls, reference: str, options: EvalOptions, settings: EngineSettings, *, shape_check: bool) -> ProblemKey:
        return cls(
            reference_sha256=hashlib.sha256(reference.encode()).hexdigest(), device=options.device,
            gpu_index=settings.gpu_index, sandbox=options.sandbox, torch=package_version("torch"),
            triton=package_version("triton"), trials=options.trials, atol=options.atol, rtol=options.rtol,
            seed=options.seed, shape_check=shape_check, pool_size=settings.timing_pool_size,
            shape_max_bytes=settings.shape_trial_max_bytes, probe_max_bytes=settings.probe_trial_max_bytes,
            timing=(options.timing_budget_s, options.timing_target_rse, options.timing_min_runs,
                    options.timing_max_runs),
        )


@dataclass
class CachedReference:
    """One problem's judge and what it knows; the seeds stay in the supervisor and the judge."""

    key: ProblemKey | None
    judge: JudgeSession
    seeds: dict
    created_at: float = field(default_factory=time.monotonic)
    uses: int = 0  # jobs it served or serves
    jobs: int = 0  # jobs holding it now (checkout to checkin)
    cached: bool = True
    # One exchange with the judge at a time: the jobs holding it take turns (`exchange`).
    lock: threading.Lock = field(default_factory=threading.Lock)
    broken: str | None = None  # why it may serve no more: its judge failed in a job's exchange
    retiring: bool = False  # out of the cache: closed once no job holds it
    closing: bool = False  # its judge is being closed (once)
    # What a miss of this entry costs (its judge's start and generate, measured) and what it holds.
    miss_cost_s: float = 1.0
    held: HeldMemory = field(default_factory=HeldMemory)
    value: float = 0.0  # GreedyDual-Size priority: the lowest goes first
    prestarted: bool = False  # started ahead of its first job (judge_start.JudgeWarmer)
    start_reported: bool = False  # a job said where its start went (the one that started it, or its first)
    start: JudgeStartNote | None = None  # where its start went (judge_start.start_entry)

    def age_s(self) -> float:
        return time.monotonic() - self.created_at

    def serves(self) -> bool:
        return self.broken is None and self.judge.alive

    @contextmanager
    def exchange(self, deadline: float) -> Iterator[str | None]:
        """One exchange with the judge, the other jobs' exchanges kept out: yields None, or why the judge
        cannot serve (another job's exchange broke it, its process is gone, or another job's exchange held it
        past `deadline`)."""
        if not self.lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
            yield "another job's exchange with it lasted past this job's deadline"
            return
        try:
            yield self.broken or (None if self.judge.alive else "its process is gone")
        finally:
            self.lock.release()


@dataclass(frozen=True)
class CacheCounts:
    entries: int
    device_bytes: int
    host_bytes: int
    evicted: int


class ReferenceCache:
    """Entries per problem key within a memory budget, cheapest-to-lose dropped first; thread-safe."""

    def __init__(self, max_entries: int, *, max_age_s: float, max_uses: int,
                 budget: MemoryBudget | None = None, per_key: int = 1, jobs_per_judge: int = 1) -> None:
        self.max_entries = max_entries
        self.max_age_s = max_age_s
        self.max_uses = max_uses
        self.budget = budget
        self.per_key = max(1, per_key)
        self.jobs_per_judge = max(1, jobs_per_judge)
        self._entries: dict[ProblemKey, list[CachedReference]] = {}
        self._warming: dict[ProblemKey, threading.Event] = {}
        # Entries jobs hold now, cached or private, by (entry, holding thread) (kill_held_by).
        self._holders: dict[tuple[int, int], tuple[CachedReference, threading.Thread]] = {}
        self._inflation = 0.0
        self._evicted = 0
        self._lock = threading.Lock()
        self._returned = threading.Condition(self._lock)  # an entry came back (checkin)
        self._checkins = 0

    # -- jobs ------------------------------------------------------------------------------
    def checkout(self, key: ProblemKey, wait_limit_s: float = 0.0) -> CachedReference | None:
        """A live, fresh entry of the key that fewer than `jobs_per_judge` jobs hold (the one fewest hold),
        held for the caller (give it back with `checkin`); None if there is none. Stale, dead or broken
        entries are retired here (their judges closed once no job holds them).

        `wait_limit_s`: when every live entry of the key is held by as many jobs as may share it, wait for
        one to come back, for as long as starting another judge cost (the longest `miss_cost_s` among them:
        10-40 s on an H100, against seconds for a job's use of one) and at most this long."""
        deadline: float | None = None
        while True:
            with self._lock:
                seen = self._checkins
            found, busy_cost_s = self._checkout_now(key)
            if found is not None or busy_cost_s is None:
                return found
            if deadline is None:
                deadline = time.monotonic() + min(wait_limit_s, busy_cost_s)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            self._wait_for_checkin(seen, remaining)

    def _wait_for_checkin(self, seen: int, timeout_s: float) -> None:
        """Until an entry comes back after the `seen`-th checkin, or `timeout_s` passes."""
        with self._returned:
            self._returned.wait_for(lambda: self._checkins != seen, timeout_s)

    def _checkout_now(self, key: ProblemKey) -> tuple[CachedReference | None, float | None]:
        """(an entry with room for one more job, now held by the caller too) or (None, the longest miss cost
        among the key's live entries, all full; None when there is none)."""
        stale: list[CachedReference] = []
        found = None
        busy_cost_s: float | None = None
        with self._lock:
            for entry in list(self._entries.get(key, ())):
                if not entry.serves() or entry.age_s() > self.max_age_s or entry.uses >= self.max_uses:
                    self._remove(entry)  # no new job; the jobs holding it finish with it
                    stale.append(entry)
                    continue
                if entry.jobs < self.jobs_per_judge:
                    found = entry if found is None or entry.jobs < found.jobs else found
                else:
                    busy_cost_s = max(busy_cost_s or 0.0, entry.miss_cost_s)
            if found is not None:
                found.uses += 1
                found.value = self._inflation + found.miss_cost_s / self._share(found)
                self._held_by_me(found)
        for entry in stale:
            self._retire(entry)
        return found, busy_cost_s if found is None else None

    def add(self, entry: CachedReference, *, hold: bool = True) -> CachedReference:
        """Keep a freshly generated entry (held by its creator unless `hold` is False: a judge started
        ahead of its jobs); makes room by evicting the entries cheapest to lose."""
        if hold:
            entry.uses = 1
            entry.start_reported = True  # by its creator
            with self._lock:
                self._held_by_me(entry)
        if self.max_entries <= 0 or entry.key is None:
            entry.cached = False
            return entry
        with self._lock:
            siblings = self._entries.setdefault(entry.key, [])
            if len(siblings) >= self.per_key:
                entry.cached = False  # a private judge: as many of this problem are kept as may run at once
                if not siblings:
                    del self._entries[entry.key]
                return entry
            siblings.append(entry)
            entry.value = self._inflation + entry.miss_cost_s / self._share(entry)
            evicted = self._make_room(protect=entry)
        for stale in evicted:
            self._retire(stale)
        return entry

    def checkin(self, entry: CachedReference, *, healthy: bool) -> None:
        """A job is done with an entry: kept for the next jobs, or (unhealthy, or never cached) closed once no
        job holds it."""
        with self._lock:
            holder = (id(entry), id(threading.current_thread()))
            if holder not in self._holders:  # given back by another thread than the one that took it
                holder = next((taken for taken in self._holders if taken[0] == id(entry)), holder)
            self._holders.pop(holder, None)
            entry.jobs -= 1
            if not (healthy and entry.cached):
                self._remove(entry)
        with self._returned:  # a job waiting for a busy judge of this problem looks again (checkout)
            self._checkins += 1
            self._returned.notify_all()
        if not (healthy and entry.cached) or entry.retiring:
            self._retire(entry)

    def first_to_report(self, entry: CachedReference) -> bool:
        """True for one job only: the one that says where the entry's judge start went (a judge started ahead
        is first served by whichever of the jobs sharing it asks first)."""
        with self._lock:
            first, entry.start_reported = not entry.start_reported, True
            return first

    def kill_held_by(self, threads: set[threading.Thread]) -> int:
        """Kill the judges `threads` hold (a stalled lane's abandoned threads, worker/jobs/watchdog.py): a
        thread blocked on a judge's reply wakes with an error, and the entries are dropped, so no job is
        given a killed judge. Returns how many were killed."""
        with self._lock:
            victims = list({id(entry): entry for entry, holder in self._holders.values() if holder in threads}.values())
            for entry in victims:
                self._remove(entry)
                entry.cached = False  # its holders' checkins retire it
                entry.broken = "it was killed: a job holding it stalled its lane"
        for entry in victims:
            try:
                entry.judge.kill()
            except Exception:  # noqa: BLE001 - one judge that cannot be killed must not spare the others
                log.exception("could not kill a stalled job's judge")
        return len(victims)

    # -- judges started ahead ------------------------------------------------------------
    def begin_warming(self, key: ProblemKey) -> bool:
        """Announce the start of a judge for `key` (ahead of its jobs, or by a job), for the jobs that come
        meanwhile to wait for and share: False when one is cached or starting, or the cache is off (a judge
        started then is no one else's)."""
        with self._lock:
            if self.max_entries <= 0 or key in self._warming or self._entries.get(key):
                return False
            self._warming[key] = threading.Event()
            return True

    def end_warming(self, key: ProblemKey) -> None:
        with self._lock:
            event = self._warming.pop(key, None)
        if event is not None:
            event.set()

    def warming(self, key: ProblemKey) -> threading.Event | None:
        with self._lock:
            return self._warming.get(key)

    # -- what the scheduler and the benchmark read ---------------------------------------
    def problems(self) -> set[str]:
        """Reference hashes with a judge cached or starting (the claim prefers their jobs)."""
        with self._lock:
            return {key.reference_sha256 for key in (*self._entries, *self._warming)}

    def entries_of(self, key: ProblemKey) -> list[CachedReference]:
        with self._lock:
            return list(self._entries.get(key, ()))

    def counts(self) -> CacheCounts:
        with self._lock:
            entries = [e for group in self._entries.values() for e in group]
            return CacheCounts(len(entries), sum(e.held.device_bytes for e in entries),
                               sum(e.held.host_bytes for e in entries), self._evicted)

    # -- inside ------------------------------------------------------------------------------
    def _held_by_me(self, entry: CachedReference) -> None:
        """Called with the lock held."""
        entry.jobs += 1
        thread = threading.current_thread()
        self._holders[(id(entry), id(thread))] = (entry, thread)

    def _share(self, entry: CachedReference) -> float:
        return self.budget.share(entry.held) if self.budget is not None else 1.0

    def _remove(self, entry: CachedReference) -> None:
        if entry.key is None:
            return
        group = self._entries.get(entry.key)
        if group and entry in group:
            group.remove(entry)
            if not group:
                del self._entries[entry.key]

    def _make_room(self, protect: CachedReference) -> list[CachedReference]:
        """Evict (lowest value first, free entries before busy ones) while over the count or the memory
        budget; one more when the device's free memory is short. Called with the lock held."""
        evicted: list[CachedReference] = []
        short = self.budget is not None and self.budget.device_short()
        while True:
            entries = [e for group in self._entries.values() for e in group]
            over = len(entries) > self.max_entries
            if self.budget is not None:
                over = over or self.budget.over(sum(e.held.device_bytes for e in entries),
                                                 sum(e.held.host_bytes for e in entries))
            if not over and not short:
                return evicted
            short = False
            victims = [e for e in entries if e is not protect]
            if not victims:
                return evicted
            victim = min(victims, key=lambda e: (e.jobs > 0, e.value))
            self._remove(victim)
            self._inflation = max(self._inflation, victim.value)
            self._evicted += 1
            evicted.append(victim)

    def _retire(self, entry: CachedReference) -> None:
        """Close an entry out of the cache once no job holds it (the last one's checkin closes it): an entry
        evicted or replaced while checked out still serves its jobs. Closing it at once failed 5 of 101 jobs
        on an H100 with 8 evaluations in one process ("the judge exited with code 0 before it reported a
        result"). Off the job's path: closing waits for the judge to exit."""
        with self._lock:
            entry.retiring = True
            if entry.jobs > 0 or entry.closing:
                return
            entry.closing = True
        threading.Thread(target=entry.judge.close, name="judge-retire", daemon=True).start()

    def close(self) -> None:
        with self._lock:
            entries = [e for group in self._entries.values() for e in group]
            self._entries.clear()
        for entry in entries:
            entry.judge.close()


_caches: dict[tuple, ReferenceCache] = {}
_caches_lock = threading.Lock()


def cache_for(settings: EngineSettings) -> ReferenceCache:
    """This worker's cache (one per GPU index and schedule), sized by the worker's memory; its jobs share a
    judge up to the schedule's concurrency."""
    sharers = settings.gpu_schedule.sharers if settings.gpu_schedule is not None else 1
    key = (settings.gpu_index, settings.reference_cache_entries, settings.reference_max_age_s,
           settings.reference_max_uses, sharers)
    with _caches_lock:
        cache = _caches.get(key)
        if cache is None:
            from worker.engine.memory_budget import gpu_total_bytes

            on_gpu = gpu_total_bytes(settings.gpu_index) is not None
            budget = MemoryBudget.for_worker(on_gpu=on_gpu, gpu_index=settings.gpu_index,
                                             gpu_fraction=settings.reference_cache_gpu_fraction,
                                             host_fraction=settings.reference_cache_host_fraction,
                                             lanes_on_host=settings.lanes_on_host)
            cache = ReferenceCache(settings.reference_cache_entries, max_age_s=settings.reference_max_age_s,
                                   max_uses=settings.reference_max_uses,
                                   budget=budget, per_key=sharers, jobs_per_judge=sharers)
            _caches[key] = cache
        return cache
