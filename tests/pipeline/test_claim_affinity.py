"""Lanes of one process open different problems: a problem another lane holds (jobs in flight) or has
warm (a judge in its cache) is passed over when a lane opens a problem, so that each problem starts
one judge, not one per GPU; it is still opened when nothing else waits and it has a backlog, and
fairness between keys comes first. One lane claims as before."""

from __future__ import annotations

from collections import Counter

import pytest

from pipeline.fakes import WAIT_S, FakeEngine, add_job
from worker.jobs.claim_policy import ClaimPolicy
from worker.jobs.engine_call import EngineCalls, WorkerIdentity
from worker.jobs.pipeline import DeviceLane, JobPipeline, PipelineConfig
from worker.jobs.store import Job, JobStore
from worker.jobs.store.queue import QueueGroup


def _groups(*jobs: tuple[str, str, int]) -> list[QueueGroup]:
    """Queue groups of priority 0 for (key, problem, jobs) in submission order (the first is the oldest)."""
    return [QueueGroup(0, key, problem, float(index), count) for index, (key, problem, count) in enumerate(jobs)]


# ---- the policy -------------------------------------------------------------------------------


def test_a_problem_held_on_another_lane_is_passed_over_for_one_that_is_not():
    groups = _groups(("k", "A", 3), ("k", "B", 3), ("k", "C", 3))
    assert ClaimPolicy().choose(groups, {}).problem_id == "A"  # the oldest, with no other lane
    assert ClaimPolicy().choose(groups, {}, elsewhere={"A"}).problem_id == "B"
    assert ClaimPolicy().choose(groups, {}, elsewhere={"A", "B"}).problem_id == "C"


def test_not_held_elsewhere_goes_before_warm_on_this_lane():
    groups = _groups(("k", "A", 3), ("k", "B", 3), ("k", "C", 3))
    assert ClaimPolicy().choose(groups, {}, warm={"B"}).problem_id == "B"
    assert ClaimPolicy().choose(groups, {}, warm={"B"}, elsewhere={"B"}).problem_id == "A"
    assert ClaimPolicy().choose(groups, {}, warm={"C"}, elsewhere={"A", "B", "C"}).problem_id == "C"


def test_a_problem_held_elsewhere_is_opened_for_a_backlog_when_nothing_else_waits():
    only = _groups(("k", "A", 4))
    assert ClaimPolicy(per_problem=4).choose(only, {}, elsewhere={"A"}).problem_id == "A"
    every = _groups(("k", "A", 4), ("k", "B", 6))
    assert ClaimPolicy(per_problem=4).choose(every, {}, elsewhere={"A", "B"}).problem_id == "A"  # the oldest
    # Two queued keys of one problem add up to its backlog.
    two_keys = _groups(("a", "A", 2), ("b", "A", 2))
    assert ClaimPolicy(per_problem=4).choose(two_keys, {}, elsewhere={"A"}).problem_id == "A"


def test_the_last_jobs_of_a_problem_held_elsewhere_are_left_to_its_lane():
    """A second judge costs 10-40 s; the lane that holds the problem finishes 1-3 jobs sooner."""
    short = _groups(("k", "A", 3), ("k", "B", 1))
    assert ClaimPolicy(per_problem=4).choose(short, {}, elsewhere={"A", "B"}) is None
    assert ClaimPolicy(per_problem=4).choose(_groups(("k", "A", 3)), {}, elsewhere={"A"}) is None
    # Among them, one with a backlog is opened, and a free problem goes first whatever its size.
    mixed = _groups(("k", "A", 3), ("k", "B", 9), ("k", "C", 1))
    assert ClaimPolicy(per_problem=4).choose(mixed, {}, elsewhere={"A", "B"}).problem_id == "C"
    assert ClaimPolicy(per_problem=4).choose(mixed, {}, elsewhere={"A", "B", "C"}).problem_id == "B"


def test_a_lane_claims_more_of_its_own_problems_before_opening_one_another_lane_holds():
    """Two H100s, per_problem 2, 16 problems x 8: after 32 claims every problem was held, and each lane then
    opened the other's problems (their in-flight count on it was 0 < 2), starting 31 judges for 16 problems."""
    groups = _groups(("k", "A", 6), ("k", "B", 6), ("k", "C", 6), ("k", "D", 6))
    policy = ClaimPolicy(per_problem=2, burst=16)
    in_flight: Counter[str] = Counter()
    for expected in ("A", "A", "B", "B"):
        choice = policy.choose(groups, in_flight, elsewhere={"C", "D"})
        assert choice.problem_id == expected
        policy.claimed(choice)
        in_flight[expected] += 1
    # Now this lane's share of the slots for each of its problems is in flight.
    assert policy.choose(groups, in_flight, elsewhere={"C", "D"}).problem_id == "A"
    # A problem warm here too costs no judge: it is spread to as before.
    assert policy.choose(groups, in_flight, warm={"C"}, elsewhere={"C", "D"}).problem_id == "C"
    # With nothing of its own queued, the lane still opens another lane's backlog.
    assert policy.choose(_groups(("k", "C", 6), ("k", "D", 6)), in_flight, elsewhere={"C", "D"}).problem_id == "C"


def test_a_lower_priority_is_opened_when_every_higher_one_is_another_lanes_short_backlog():
    groups = [QueueGroup(5, "k", "A", 0.0, 2), QueueGroup(0, "k", "B", 1.0, 3)]
    choice = ClaimPolicy(per_problem=4).choose(groups, {}, elsewhere={"A"})
    assert (choice.priority, choice.problem_id) == (0, "B")
    # Whatever this lane may open at the higher priority goes first.
    assert ClaimPolicy(per_problem=4).choose(groups, {}).problem_id == "A"
    assert ClaimPolicy(per_problem=4).choose(groups, {}, elsewhere={"A", "B"}) is None


def test_a_short_problem_held_elsewhere_is_opened_where_its_judge_is_warm_too():
    short = _groups(("k", "A", 2))
    assert ClaimPolicy(per_problem=4).choose(short, {}, warm={"A"}, elsewhere={"A"}).problem_id == "A"


def test_a_lane_keeps_serving_a_problem_it_opened_however_short_its_backlog():
    policy = ClaimPolicy(per_problem=4)
    policy.claimed(policy.choose(_groups(("k", "A", 6)), {}))
    # The other lane took A too; two jobs are left: this lane's turn on A is open, so it goes on.
    assert policy.choose(_groups(("k", "A", 2)), {"A": 1}, elsewhere={"A"}).problem_id == "A"
    assert policy.choose(_groups(("k", "A", 2), ("k", "B", 2)), {"A": 1}, elsewhere={"A", "B"}).problem_id == "A"


def test_key_fairness_comes_before_affinity():
    # Key "a" has the oldest job; its only problem is held on another lane (with a backlog), key "b"'s is free.
    groups = _groups(("a", "A", 4), ("b", "B", 3))
    choice = ClaimPolicy().choose(groups, {}, elsewhere={"A"})
    assert (choice.api_key_id, choice.problem_id) == ("a", "A")
    # Once "a" was served, "b" (served least recently) goes first, whatever the other lanes hold.
    policy = ClaimPolicy(per_problem=1)
    policy.claimed(policy.choose(groups, {}))
    choice = policy.choose(groups, {"A": 1}, elsewhere={"B"})
    assert (choice.api_key_id, choice.problem_id) == ("b", "B")


def test_a_problem_this_lane_opened_keeps_its_turn_when_another_lane_takes_it_too():
    groups = _groups(("k", "A", 5), ("k", "B", 5))
    policy = ClaimPolicy(per_problem=4, burst=16)
    first = policy.choose(groups, {})
    policy.claimed(first)
    assert first.problem_id == "A"
    assert policy.choose(groups, {"A": 1}, elsewhere={"A"}).problem_id == "A"  # rule 1 is unchanged


def _claim_order(policy: ClaimPolicy, **choose_kwargs) -> list[str]:
    """Claim a mixed queue (3 keys, a problem queued by two keys) to the end; the lane finishes its jobs
    in flight every 3 claims. Returns problem+key per claim."""
    queue: list[tuple[str, str, float]] = []
    for key, problem, count in [("a", "P1", 5), ("b", "P2", 2), ("a", "P3", 3), ("b", "P1", 2), ("c", "P4", 4),
                                ("a", "P5", 1)]:
        queue += [(key, problem, float(len(queue) + n)) for n in range(count)]
    in_flight: Counter[str] = Counter()
    order = []
    while queue:
        found: dict[tuple[str, str], list[float]] = {}
        for key, problem, created in queue:
            found.setdefault((key, problem), []).append(created)
        groups = [QueueGroup(0, key, problem, min(times), len(times)) for (key, problem), times in found.items()]
        choice = policy.choose(groups, in_flight, **choose_kwargs)
        assert choice is not None
        job = min((j for j in queue if j[:2] == (choice.api_key_id, choice.problem_id)), key=lambda j: j[2])
        queue.remove(job)
        policy.claimed(choice)
        order.append(job[1] + job[0])
        in_flight[job[1]] += 1
        if len(order) % 3 == 0:
            in_flight.clear()
    return order


def test_one_lane_claims_exactly_as_before():
    # The order the policy gave before lanes knew of each other (recorded from it).
    before = ["P3a", "P3a", "P1b", "P3a", "P1b", "P1a", "P4c", "P4c", "P2b", "P4c", "P2b", "P1a", "P1a", "P1a",
              "P4c", "P1a", "P5a"]
    assert _claim_order(ClaimPolicy(per_problem=2, burst=3), warm={"P3"}) == before
    assert _claim_order(ClaimPolicy(per_problem=2, burst=3), warm={"P3"}, elsewhere=set()) == before


# ---- lanes of one pipeline --------------------------------------------------------------------

# Each test needs an empty store of its own (tests/conftest.py's `store`, on SQLite only).
pipeline_test = pytest.mark.sqlite_store

GPUS = [WorkerIdentity(name=f"embedded@affinity-test:cpu{n}", device="cpu") for n in range(2)]
CONFIG = PipelineConfig(device_concurrency=1, prepare_ahead=3, prepare_threads=1)


def _claim(lane: DeviceLane, claimed: list[Job]) -> None:
    """Admit one job on `lane` (its claim policy chooses it); the pipeline's device threads are not started,
    so the job stays in flight on the lane."""

    def claim() -> Job | None:
        job = lane.claim_next()
        assert job is not None
        claimed.append(job)
        return job

    assert lane.admit(claim, timeout=WAIT_S) is not None


def _stop(pipeline: JobPipeline) -> None:
    for lane in pipeline.lanes:  # every admitted job prepared: none is left in a prepare thread at stop
        assert lane.wait_until(lambda s: s.preparing == 0, WAIT_S)
    pipeline.stop(timeout_s=WAIT_S)


@pipeline_test
def test_two_lanes_each_open_a_different_problem_first(store: JobStore):
    engine = FakeEngine()
    a = [add_job(store, f"a-{i}", problem="A") for i in range(3)]
    b = [add_job(store, f"b-{i}", problem="B") for i in range(3)]
    pipeline = JobPipeline(store, GPUS, CONFIG, engine=EngineCalls(prepare=engine.prepare, execute=engine.execute))
    first, second = pipeline.lanes
    mine: dict[DeviceLane, list[Job]] = {first: [], second: []}
    try:
        for lane in (first, second, first, second):
            _claim(lane, mine[lane])
        assert [job.problem_id for job in mine[first]] == [a[0].problem_id] * 2
        assert [job.problem_id for job in mine[second]] == [b[0].problem_id] * 2
        # With every problem held, A's last job (no backlog) is left to the lane that holds A: the second lane
        # takes B's last job, then claims nothing, and the first lane takes A's.
        _claim(second, mine[second])
        assert second.claim_next() is None
        _claim(first, mine[first])
        assert [job.problem_id for job in mine[second]][2:] == [b[0].problem_id]
        assert [job.problem_id for job in mine[first]][2:] == [a[0].problem_id]
    finally:
        _stop(pipeline)


@pipeline_test
def test_a_lane_does_not_open_a_problem_warm_on_another_lane(store: JobStore):
    engine = FakeEngine()
    a = add_job(store, "a-0", problem="A")
    add_job(store, "a-1", problem="A")
    b = add_job(store, "b-0", problem="B")
    add_job(store, "b-1", problem="B")

    def warm(settings) -> set[str]:  # A's judge is in the first lane's cache, nothing in flight anywhere
        return {a.problem_id} if settings is pipeline.lanes[0].settings else set()

    pipeline = JobPipeline(store, GPUS, CONFIG,
                           engine=EngineCalls(prepare=engine.prepare, execute=engine.execute, warm_problems=warm))
    first, second = pipeline.lanes
    claimed: list[Job] = []
    try:
        assert first.held_problems() == {a.problem_id} and second.held_problems() == set()
        _claim(second, claimed)
        _claim(first, claimed)
        assert [job.problem_id for job in claimed] == [b.problem_id, a.problem_id]
        assert second.held_problems() == {b.problem_id}
    finally:
        _stop(pipeline)


@pipeline_test
def test_one_lane_sees_no_other_lane(store: JobStore, monkeypatch):
    engine = FakeEngine()
    add_job(store, "a-0", problem="A")
    add_job(store, "b-0", problem="B")
    seen: list[set[str]] = []
    choose = ClaimPolicy.choose

    def spy(self, groups, in_flight, warm=(), elsewhere=()):
        seen.append(set(elsewhere))
        return choose(self, groups, in_flight, warm, elsewhere)

    monkeypatch.setattr(ClaimPolicy, "choose", spy)
    pipeline = JobPipeline(store, GPUS[:1], CONFIG, engine=EngineCalls(prepare=engine.prepare, execute=engine.execute))
    claimed: list[Job] = []
    try:
        _claim(pipeline.lanes[0], claimed)
        _claim(pipeline.lanes[0], claimed)
        assert seen == [set(), set()]
    finally:
        _stop(pipeline)
