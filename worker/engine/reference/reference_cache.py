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

A problem may have several judges, up to the device's concurrency (`per_key`), so that two jobs of
a problem on the device at once each have one. A judge can also be started ahead of its first job
(`begin_warming` / `end_warming`, used by worker/engine/reference/judge_start.py): a job that finds its
problem's judge starting waits for it instead of starting another.

Isolation: an entry serves one problem only (a reference never judges another problem's jobs),
one job at a time (a job finding every entry of its problem busy gets a private judge for itself,
kept while there is room for another judge of that problem), and is dropped whenever its judge
misbehaves or dies.
"""

from __future__ import annotations

import hashlib
import logging
import random
import secrets
import threading
import time
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
    uses: int = 0
    cached: bool = True
    lock: threading.Lock = field(default_factory=threading.Lock)
    # What a miss of this entry costs (its judge's start and generate, measured) and what it holds.
    miss_cost_s: float = 1.0
    held: HeldMemory = field(default_factory=HeldMemory)
    value: float = 0.0  # GreedyDual-Size priority: the lowest goes first
    prestarted: bool = False  # started ahead of its first job (judge_start.JudgeWarmer)
    start: JudgeStartNote | None = None  # where its start went (judge_start.start_entry)

    def age_s(self) -> float:
        return time.monotonic() - self.created_at


@dataclass(frozen=True)
class CacheCounts:
    entries: int
    device_bytes: int
    host_bytes: int
    evicted: int


class ReferenceCache:
    """Entries per problem key within a memory budget, cheapest-to-lose dropped first; thread-safe."""

    def __init__(self, max_entries: int, *, max_age_s: float, max_uses: int,
                 budget: MemoryBudget | None = None, per_key: int = 1) -> None:
        self.max_entries = max_entries
        self.max_age_s = max_age_s
        self.max_uses = max_uses
        self.budget = budget
        self.per_key = max(1, per_key)
        self._entries: dict[ProblemKey, list[CachedReference]] = {}
        self._warming: dict[ProblemKey, threading.Event] = {}
        # Entries a job holds now, cached or private, and the thread holding each (kill_held_by).
        self._holders: dict[int, tuple[CachedReference, threading.Thread]] = {}
        self._inflation = 0.0
        self._evicted = 0
        self._lock = threading.Lock()
        self._returned = threading.Condition(self._lock)  # an entry came back (checkin)
        self._checkins = 0

    # -- jobs ------------------------------------------------------------------------------
    def checkout(self, key: ProblemKey, wait_limit_s: float = 0.0) -> CachedReference | None:
        """A live, fresh, free entry of the key, locked for the caller (release with `checkin`); None if
        there is none. Stale or dead entries are retired here (their judges closed).

        `wait_limit_s`: when every live entry of the key is busy (other jobs of the problem hold them), wait for
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
        """(a free entry, locked) or (None, the longest miss cost among the key's busy live entries; None when
        there is none)."""
        stale: list[CachedReference] = []
        found = None
        busy_cost_s: float | None = None
        with self._lock:
            for entry in list(self._entries.get(key, ())):
                if not entry.judge.alive or entry.age_s() > self.max_age_s or entry.uses >= self.max_uses:
                    if entry.lock.acquire(blocking=False):  # a busy one is retired after its job
                        entry.lock.release()
                        self._remove(entry)
                        stale.append(entry)
                    continue
                if found is None and entry.lock.acquire(blocking=False):
                    found = entry
                elif found is None:
                    busy_cost_s = max(busy_cost_s or 0.0, entry.miss_cost_s)
            if found is not None:
                found.uses += 1
                found.value = self._inflation + found.miss_cost_s / self._share(found)
                self._held_by_me(found)
        for entry in stale:
            self._retire(entry)
        return found, busy_cost_s if found is None else None

    def add(self, entry: CachedReference, *, hold: bool = True) -> CachedReference:
        """Keep a freshly generated entry (locked for its creator unless `hold` is False: a judge started
        ahead of its jobs); makes room by evicting the entries cheapest to lose."""
        if hold:
            entry.lock.acquire()
            entry.uses = 1
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
        """Done with an entry: kept for the next job, or (unhealthy, or never cached) closed."""
        with self._lock:
            self._holders.pop(id(entry), None)
            if not (healthy and entry.cached):
                self._remove(entry)
        entry.lock.release()
        with self._returned:  # a job waiting for a busy judge of this problem looks again (checkout)
            self._checkins += 1
            self._returned.notify_all()
        if not (healthy and entry.cached):
            self._retire(entry)

    def kill_held_by(self, threads: set[threading.Thread]) -> int:
        """Kill the judges `threads` hold (a stalled lane's abandoned threads, worker/jobs/watchdog.py): a
        thread blocked on a judge's reply wakes with an error, and the entries are dropped, so no job is
        given a killed judge. Returns how many were killed."""
        with self._lock:
            victims = [entry for entry, holder in self._holders.values() if holder in threads]
            for entry in victims:
                self._remove(entry)
                entry.cached = False  # its holder's checkin retires it
        for entry in victims:
            try:
                entry.judge.kill()
            except Exception:  # noqa: BLE001 - one judge that cannot be killed must not spare the others
                log.exception("could not kill a stalled job's judge")
        return len(victims)

    # -- judges started ahead ------------------------------------------------------------
    def begin_warming(self, key: ProblemKey) -> bool:
        """Claim the start of a judge for `key` ahead of its jobs: False when one is cached or starting."""
        with self._lock:
            if key in self._warming or self._entries.get(key):
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
        self._holders[id(entry)] = (entry, threading.current_thread())

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
            victim = min(victims, key=lambda e: (e.lock.locked(), e.value))
            self._remove(victim)
            self._inflation = max(self._inflation, victim.value)
            self._evicted += 1
            evicted.append(victim)

    @staticmethod
    def _retire(entry: CachedReference) -> None:
        # Off the job's path (closing waits for the judge to exit), and only once no job holds the entry:
        # an entry evicted or replaced while checked out still serves that job. Closing it at once
        # failed 5 of 101 jobs on an H100 with 8 evaluations in one process ("the judge exited with
        # code 0 before it reported a result").
        def close_when_free() -> None:
            with entry.lock:
                entry.judge.close()

        threading.Thread(target=close_when_free, name="judge-retire", daemon=True).start()

    def close(self) -> None:
        with self._lock:
            entries = [e for group in self._entries.values() for e in group]
            self._entries.clear()
        for entry in entries:
            entry.judge.close()


_caches: dict[tuple, ReferenceCache] = {}
_caches_lock = threading.Lock()


def cache_for(settings: EngineSettings) -> ReferenceCache:
    """This worker's cache (one per GPU index and schedule), sized by the worker's memory."""
    key = (settings.gpu_index, settings.reference_cache_entries, settings.reference_max_age_s,
           settings.reference_max_uses)
    with _caches_lock:
        cache = _caches.get(key)
        if cache is None:
            from worker.engine.memory_budget import gpu_total_bytes

            on_gpu = gpu_total_bytes(settings.gpu_index) is not None
            budget = MemoryBudget.for_worker(on_gpu=on_gpu, gpu_index=settings.gpu_index,
                                             gpu_fraction=settings.reference_cache_gpu_fraction,
                                             host_fraction=settings.reference_cache_host_fraction,
                                             lanes_on_host=settings.lanes_on_host)
            sharers = settings.gpu_schedule.sharers if settings.gpu_schedule is not None else 1
            cache = ReferenceCache(settings.reference_cache_entries, max_age_s=settings.reference_max_age_s,
                                   max_uses=settings.reference_max_uses,
                                   budget=budget, per_key=sharers)
            _caches[key] = cache
        return cache
