"""A fake engine for pipeline tests: each job's candidate names what its stages do, and events
let a test hold a job at a chosen stage and see where every job is."""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass, field

from contract.results import EvalResult
from contract.statuses import EvalStatus
from worker.jobs.store import Job, JobStore, NewJob, problem_id_for

WAIT_S = 60.0  # an upper bound for event waits, never reached when the pipeline works


@dataclass
class FakePrepared:
    candidate: str
    problem: str = ""
    discarded: bool = False

    def discard(self) -> None:
        self.discarded = True


@dataclass
class Observed:
    """What the fake engine saw, guarded by one condition."""

    cond: threading.Condition = field(default_factory=threading.Condition)
    prepared: list[str] = field(default_factory=list)
    executed: list[str] = field(default_factory=list)
    timing_now: set[str] = field(default_factory=set)
    max_timing_at_once: int = 0
    shared_during_timing: list[int] = field(default_factory=list)
    at_stage: dict[str, str] = field(default_factory=dict)


class JudgeModel:
    """A device's judges as the scheduler sees them: `capacity` problems loaded, least recently used
    dropped; counts the jobs that had to start a judge (misses)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.loaded: list[str] = []
        self.misses = 0
        self.hits = 0
        self.lock = threading.Lock()

    def use(self, problem: str) -> None:
        with self.lock:
            if problem in self.loaded:
                self.hits += 1
                self.loaded.remove(problem)
            else:
                self.misses += 1
                if len(self.loaded) >= self.capacity:
                    self.loaded.pop(0)
            self.loaded.append(problem)

    def warm(self, settings) -> set[str]:
        with self.lock:
            return set(self.loaded)


class FakeEngine:
    """prepare/execute with the engine's signatures.

    Candidate names: "crash-prepare" and "crash-execute" raise, "invalid" ends at prepare with a
    verdict, "hang" times out once released from its first device stage; a candidate in `holds` stops at that stage (before the stage's work) until its event
    is set.
    """

    def __init__(self, judges: JudgeModel | None = None) -> None:
        self.seen = Observed()
        self.holds: dict[tuple[str, str], threading.Event] = {}
        self.schedule = None  # set by the test to check the device's state during timing
        self.judges = judges
        self.problems_run: list[str] = []  # the problem of each job, in the order they reached the device

    def hold(self, candidate: str, stage: str) -> threading.Event:
        event = threading.Event()
        self.holds[(candidate, stage)] = event
        return event

    def wait_for(self, predicate, timeout: float = WAIT_S) -> None:
        with self.seen.cond:
            assert self.seen.cond.wait_for(lambda: predicate(self.seen), timeout), "the pipeline did not get there"

    def _at(self, candidate: str, stage: str) -> None:
        with self.seen.cond:
            self.seen.at_stage[candidate] = stage
            self.seen.cond.notify_all()
        gate = self.holds.get((candidate, stage))
        if gate is not None:
            assert gate.wait(WAIT_S), f"{candidate} was held at {stage} and never released"

    def prepare(self, request, *, settings, on_stage):
        candidate = request.candidate
        if candidate == "crash-prepare":
            raise RuntimeError("prepare blew up")
        if candidate == "invalid":
            return EvalResult(status=EvalStatus.invalid_input)
        self._at(candidate, "build")
        with self.seen.cond:
            self.seen.prepared.append(candidate)
            self.seen.cond.notify_all()
        return FakePrepared(candidate, problem_id_for(request.reference))

    def execute(self, prepared: FakePrepared, *, settings, on_stage):
        candidate = prepared.candidate
        with self.seen.cond:
            self.seen.executed.append(candidate)
            self.problems_run.append(prepared.problem)
            self.seen.cond.notify_all()
        if self.judges is not None:
            self.judges.use(prepared.problem)
        for stage in ("reference", "candidate", "compare"):
            on_stage(stage)
            self._at(candidate, stage)
            if candidate == "hang":  # released by the test as the engine's stage limit would end it
                return EvalResult(status=EvalStatus.timeout)
        if candidate == "crash-execute":
            raise RuntimeError("execute blew up")
        on_stage("timing")
        with self.seen.cond:
            self.seen.timing_now.add(candidate)
            self.seen.max_timing_at_once = max(self.seen.max_timing_at_once, len(self.seen.timing_now))
            if self.schedule is not None:
                self.seen.shared_during_timing.append(self.schedule.state().shared)
        self._at(candidate, "timing")
        with self.seen.cond:
            self.seen.timing_now.discard(candidate)
        on_stage("reward")
        self._at(candidate, "done")
        return EvalResult(status=EvalStatus.ok, correct=True, compiled=True)


def add_job(store: JobStore, candidate: str, priority: int = 0, *, problem: str | None = None,
            key: str = "k") -> Job:
    """A queued job; `problem` names its reference (the same name, the same problem), else a new one."""
    reference = f"# problem {problem or uuid.uuid4().hex}\nclass Model: pass\n"
    stored, _ = store.put_problem(reference)
    return store.create_job(NewJob(problem_id=stored.id, submission={"candidate": candidate, "options": {}},
                                   api_key_id=key, priority=priority))[0]
