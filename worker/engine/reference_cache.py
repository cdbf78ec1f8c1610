"""Per-problem reference cache: a warm judge holding the input sets, the reference's outputs and its timing.

An entry is keyed by everything that changes what the judge would compute: the reference
source's hash, the device (GPU index on this host, and the GPU model the judge reports is kept
with the entry), torch/Triton versions, the sandbox kind and the options that shape inputs,
outputs or timing. Its input sets come from seeds drawn from a secret master seed that never
leaves the supervisor and the judge; they rotate on a schedule: an entry is replaced by a fresh
judge with new seeds once it is `reference_max_age_s` old or has served `reference_max_uses`
jobs, so any one input set is in front of a bounded number of candidates. Reference timing is
re-measured once it is older than `reference_retime_s`, which bounds its drift; every result
says how old the reference timing it used was. The torch.compile baseline is compiled by the
entry's judge the first time a job wants it, kept with the entry (its timing re-measured on the
same schedule as the eager one), and gone with the entry.

Isolation: an entry serves one problem only (a reference never judges another problem's jobs),
one job at a time (a job finding its entry busy gets a private judge for itself), and is dropped
whenever its judge misbehaves or dies.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import logging
import random
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from ..models import Device, EvalOptions, SandboxKind
from .judge import CompileBaseline, JudgeSession
from .settings import EngineSettings

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


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


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
            gpu_index=settings.gpu_index, sandbox=options.sandbox, torch=_version("torch"), triton=_version("triton"),
            trials=options.trials, atol=options.atol, rtol=options.rtol, seed=options.seed, shape_check=shape_check,
            pool_size=settings.timing_pool_size, shape_max_bytes=settings.shape_trial_max_bytes,
            probe_max_bytes=settings.probe_trial_max_bytes,
            timing=(options.timing_budget_s, options.timing_target_rse, options.timing_min_runs,
                    options.timing_max_runs),
        )


@dataclass
class ReferenceTiming:
    device_ms: list[float]
    runs: int
    measured_at: float  # time.monotonic()

    def age_s(self) -> float:
        return time.monotonic() - self.measured_at


@dataclass
class CachedReference:
    """One problem's judge and what it knows; the seeds stay in the supervisor and the judge."""

    key: ProblemKey | None
    judge: JudgeSession
    seeds: dict
    created_at: float = field(default_factory=time.monotonic)
    uses: int = 0
    timing: ReferenceTiming | None = None
    # The torch.compile baseline: None until a job asks the judge for it.
    compiled: CompileBaseline | None = None
    compile_timing: ReferenceTiming | None = None
    cached: bool = True
    lock: threading.Lock = field(default_factory=threading.Lock)

    def age_s(self) -> float:
        return time.monotonic() - self.created_at


class ReferenceCache:
    """Entries per problem key, least recently used dropped first; thread-safe."""

    def __init__(self, max_entries: int, *, max_age_s: float, max_uses: int, retime_s: float) -> None:
        self.max_entries = max_entries
        self.max_age_s = max_age_s
        self.max_uses = max_uses
        self.retime_s = retime_s
        self._entries: OrderedDict[ProblemKey, CachedReference] = OrderedDict()
        # Problems whose torch.compile broke their judge: not compiled again (see worker.engine.compile_baseline).
        self.compile_failures: dict[ProblemKey, str] = {}
        self._lock = threading.Lock()

    def checkout(self, key: ProblemKey) -> CachedReference | None:
        """The key's live, fresh entry, locked for the caller (release with `checkin`); None if there
        is none or it is busy. A stale or dead entry is retired here (its judge closed)."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            if not entry.judge.alive or entry.age_s() > self.max_age_s or entry.uses >= self.max_uses:
                del self._entries[key]
                stale = entry
            else:
                if not entry.lock.acquire(blocking=False):
                    return None
                self._entries.move_to_end(key)
                entry.uses += 1
                return entry
        self._retire(stale)
        return None

    def add(self, entry: CachedReference) -> CachedReference:
        """Keep a freshly generated entry (locked for its creator); evicts the least recently used."""
        entry.lock.acquire()
        entry.uses = 1
        if self.max_entries <= 0 or entry.key is None:
            entry.cached = False
            return entry
        evicted = []
        with self._lock:
            old = self._entries.pop(entry.key, None)
            if old is not None:
                evicted.append(old)
            self._entries[entry.key] = entry
            while len(self._entries) > self.max_entries:
                evicted.append(self._entries.popitem(last=False)[1])
        for stale in evicted:
            self._retire(stale)
        return entry

    def checkin(self, entry: CachedReference, *, healthy: bool) -> None:
        """Done with an entry: kept for the next job, or (unhealthy, or never cached) closed."""
        if healthy and entry.cached:
            entry.lock.release()
            return
        with self._lock:
            if entry.key is not None and self._entries.get(entry.key) is entry:
                del self._entries[entry.key]
        entry.lock.release()
        self._retire(entry)

    def timing_fresh(self, entry: CachedReference) -> bool:
        return self.fresh(entry.timing)

    def fresh(self, timing: ReferenceTiming | None) -> bool:
        return timing is not None and timing.age_s() <= self.retime_s

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
            entries = list(self._entries.values())
            self._entries.clear()
        for entry in entries:
            entry.judge.close()


_caches: dict[tuple, ReferenceCache] = {}
_caches_lock = threading.Lock()


def cache_for(settings: EngineSettings) -> ReferenceCache:
    """This worker's cache (one per GPU index and schedule)."""
    key = (settings.gpu_index, settings.reference_cache_entries, settings.reference_max_age_s,
           settings.reference_max_uses, settings.reference_retime_s)
    with _caches_lock:
        cache = _caches.get(key)
        if cache is None:
            cache = ReferenceCache(settings.reference_cache_entries, max_age_s=settings.reference_max_age_s,
                                   max_uses=settings.reference_max_uses, retime_s=settings.reference_retime_s)
            _caches[key] = cache
        return cache
