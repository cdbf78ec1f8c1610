"""The lane's claim policy on its own: a problem's jobs together, fair to other problems and keys,
priorities first. A small queue model stands in for the store (the same groups the store reads)."""

from __future__ import annotations

import random
from collections import Counter

from worker.jobs.claim_policy import ClaimPolicy
from worker.jobs.store.queue import QueueGroup


class Queue:
    """Queued jobs as (priority, key, problem, created), claimed oldest-first within a chosen group."""

    def __init__(self) -> None:
        self.jobs: list[tuple[int, str, str, float]] = []
        self.clock = 0.0

    def add(self, problem: str, *, key: str = "k", priority: int = 0, count: int = 1) -> None:
        for _ in range(count):
            self.clock += 1
            self.jobs.append((priority, key, problem, self.clock))

    def groups(self) -> list[QueueGroup]:
        found: dict[tuple[int, str, str], list[float]] = {}
        for priority, key, problem, created in self.jobs:
            found.setdefault((priority, key, problem), []).append(created)
        return [QueueGroup(p, k, pr, min(times), len(times)) for (p, k, pr), times in found.items()]

    def claim(self, policy: ClaimPolicy, in_flight: Counter | None = None, warm=()) -> tuple[int, str, str]:
        choice = policy.choose(self.groups(), in_flight or Counter(), warm)
        assert choice is not None
        job = min((j for j in self.jobs if j[:3] == (choice.priority, choice.api_key_id, choice.problem_id)),
                  key=lambda j: j[3])
        self.jobs.remove(job)
        policy.claimed(choice)
        return job[:3]


def test_a_problem_with_500_queued_jobs_does_not_starve_a_single_job_of_another_problem():
    queue, policy = Queue(), ClaimPolicy(per_problem=4, burst=16)
    queue.add("A", count=500)
    queue.add("X")  # after all of A's
    order = [queue.claim(policy)[2] for _ in range(40)]
    assert "X" in order[:17], order  # within one burst of A
    assert order.count("A") == 39


def test_a_key_with_one_job_is_not_starved_by_a_key_with_thousands():
    queue, policy = Queue(), ClaimPolicy(per_problem=4, burst=16)
    for index in range(200):
        queue.add(f"P{index}", key="big", count=5)
    queue.add("Q", key="small")
    order = [queue.claim(policy)[1] for _ in range(8)]
    # The first problem opened keeps its turn (its 5 jobs); the next problem opened is the small key's.
    assert order[:6] == ["big"] * 5 + ["small"], order


def test_priorities_come_first_whatever_the_grouping():
    queue, policy = Queue(), ClaimPolicy(per_problem=4, burst=2)
    queue.add("A", count=5)
    queue.add("B", priority=5, count=3)
    assert [queue.claim(policy)[2] for _ in range(3)] == ["B", "B", "B"]


def test_interleaved_problems_are_claimed_one_problem_at_a_time():
    queue, policy = Queue(), ClaimPolicy(per_problem=4, burst=16)
    jobs = [f"P{p}" for p in range(6) for _ in range(4)]
    random.Random(7).shuffle(jobs)
    for problem in jobs:
        queue.add(problem)
    in_flight: Counter = Counter()
    order = []
    for _ in range(len(jobs)):
        problem = queue.claim(policy, in_flight)[2]
        order.append(problem)
        in_flight[problem] += 1
        if in_flight[problem] == 4:  # the lane finishes a problem's jobs before claiming on
            del in_flight[problem]
    runs = [p for i, p in enumerate(order) if i == 0 or order[i - 1] != p]
    assert len(runs) == 6, order


def test_two_device_slots_get_two_problems_and_a_warm_judge_is_preferred():
    queue, policy = Queue(), ClaimPolicy(per_problem=2, burst=16)
    queue.add("A", count=4)
    queue.add("B", count=4)
    queue.add("C", count=4)
    in_flight: Counter = Counter()
    first = [queue.claim(policy, in_flight, warm={"C"})[2] for _ in range(1)]
    assert first == ["C"], "C's judge is warm on the lane"
    in_flight["C"] += 1
    second = queue.claim(policy, in_flight, warm={"C"})[2]
    in_flight[second] += 1
    third = queue.claim(policy, in_flight, warm={"C"})[2]
    assert (second, third) == ("C", "A"), "C is at its share of the lane: the next slot gets another problem"
