"""The dashboard's aggregate queries (app/dashboard_stats.py) on SQLite and (marked) PostgreSQL.

PostgreSQL is shared across runs, so every test makes its own API keys, problems, rule ids and
stage names (uuid-suffixed) and checks exact numbers only for those.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from app.dashboard_stats import JobStats
from worker.jobs.store import JobStore, NewJob


def _tag() -> str:
    return uuid.uuid4().hex[:10]


class Jobs:
    """Makes jobs of one API key that run on a given worker and finish with a given result."""

    def __init__(self, store: JobStore, owner: str):
        self.store = store
        self.owner = owner

    def problem(self, name: str) -> str:
        problem, _ = self.store.put_problem(f"# {name} {uuid.uuid4().hex}\nclass Model: pass\n", name)
        return problem.id

    def queued(self, problem_id: str) -> str:
        job, _ = self.store.create_job(NewJob(problem_id=problem_id, submission={"candidate": "pass", "options": {}},
                                              api_key_id=self.owner))
        return job.id

    def started(self, problem_id: str, worker: str = "embedded@node1:gpu0", gpu: str | None = "0") -> str:
        job_id = self.queued(problem_id)
        claimed, why = self.store.claim(job_id, worker, gpu)
        assert claimed is not None, why
        return job_id

    def finished(self, problem_id: str, verdict: str, *, speedup: float | None = None,
                 rules: list[dict[str, Any]] | None = None, stages: dict[str, float] | None = None) -> str:
        job_id = self.started(problem_id)
        result = {"status": verdict, "speedup": speedup, "reward": 1.0 if verdict == "ok" else 0.0,
                  "rules": rules or [], "stages": stages or {}}
        assert self.store.finish(job_id, 1, result, verdict)
        return job_id


def _hit(rule: str, line: int, severity: str = "flag") -> dict[str, Any]:
    return {"rule": rule, "severity": severity, "message": f"{rule} at line {line}", "line": line,
            "evidence": f"evidence {line}"}


def test_speedup_quantiles_per_problem_with_most_jobs_first(store):
    jobs = Jobs(store, f"key-{_tag()}")
    busy, quiet = jobs.problem("busy"), jobs.problem("quiet")
    for speedup in (4.0, 1.0, 3.0, 2.0, 5.0):
        jobs.finished(busy, "ok", speedup=speedup)
    jobs.finished(quiet, "ok", speedup=0.5)
    jobs.finished(quiet, "ok")  # correct but not timed: no speedup
    jobs.finished(quiet, "incorrect", speedup=9.0)  # only correct jobs count

    rows = JobStats(store).speedups(jobs.owner, time.time() - 60, max_problems=10)
    assert [(r.problem_name, r.count) for r in rows] == [("busy", 5), ("quiet", 1)]
    assert (rows[0].minimum, rows[0].p25, rows[0].median, rows[0].p75, rows[0].maximum) == (1.0, 2.0, 3.0, 4.0, 5.0)
    assert (rows[1].minimum, rows[1].median, rows[1].maximum) == (0.5, 0.5, 0.5)
    assert [r.problem_name for r in JobStats(store).speedups(jobs.owner, time.time() - 60, max_problems=1)] == ["busy"]


def test_rules_ranked_by_jobs_with_latest_hit_as_example(store):
    jobs = Jobs(store, f"key-{_tag()}")
    problem = jobs.problem("rules")
    common, rare = f"KJ-COMMON-{_tag()}", f"KJ-RARE-{_tag()}"
    jobs.finished(problem, "rejected", rules=[_hit(common, 3, "reject")])
    # One job firing a rule on two lines counts once.
    jobs.finished(problem, "rejected", rules=[_hit(rare, 7), _hit(rare, 9)])
    latest = jobs.finished(problem, "rejected", rules=[_hit(common, 5, "reject"), _hit(common, 11, "reject")])
    jobs.finished(problem, "ok", speedup=1.0)

    rows = JobStats(store).rules(jobs.owner, time.time() - 60, limit=10)
    assert [(r.rule, r.jobs) for r in rows] == [(common, 2), (rare, 1)]
    top = rows[0]
    assert (top.example_job_id, top.severity, top.line, top.message, top.evidence) == (
        latest, "reject", 5, f"{common} at line 5", "evidence 5")
    assert [r.rule for r in JobStats(store).rules(jobs.owner, time.time() - 60, limit=1)] == [common]


def test_stages_slowest_first_with_quantiles_and_slowest_job(store):
    jobs = Jobs(store, f"key-{_tag()}")
    problem = jobs.problem("stages")
    build, run = f"build-{_tag()}", f"run-{_tag()}"
    ids = [jobs.finished(problem, "ok", speedup=1.0, stages={build: float(s), run: 0.5}) for s in range(1, 21)]

    rows = JobStats(store).stages(jobs.owner, time.time() - 60)
    assert [r.stage for r in rows] == [build, run]
    slow = rows[0]
    assert (slow.count, slow.mean_s, slow.p50_s, slow.p95_s, slow.max_s) == (20, 10.5, 10.0, 19.0, 20.0)
    assert slow.slowest_job_id == ids[-1]
    assert (rows[1].count, rows[1].p95_s, rows[1].max_s) == (20, 0.5, 0.5)


def test_outcomes_count_finished_jobs_per_bucket_and_verdict(store):
    jobs = Jobs(store, f"key-{_tag()}")
    problem = jobs.problem("outcomes")
    jobs.finished(problem, "ok", speedup=1.0)
    jobs.finished(problem, "ok", speedup=1.0)
    jobs.finished(problem, "compile_error")
    failed = jobs.started(problem)
    assert store.fail(failed, "worker lost")
    cancelled = jobs.queued(problem)
    store.cancel(cancelled)
    jobs.queued(problem)  # not finished: not counted
    now = time.time()

    counts = JobStats(store).outcomes(jobs.owner, now - 3600, now + 1, buckets=4)
    # Everything finished within the last of the four 15-minute buckets.
    assert {(c.bucket, c.outcome, c.count) for c in counts} == {
        (3, "ok", 2), (3, "compile_error", 1), (3, "failed", 1), (3, "cancelled", 1)}
    assert JobStats(store).outcomes(jobs.owner, now - 7200, now - 3600, buckets=4) == []


def test_a_key_sees_only_its_own_jobs_and_all_keys_sees_both(store):
    mine, theirs = Jobs(store, f"key-{_tag()}"), Jobs(store, f"key-{_tag()}")
    problem = mine.problem("shared")
    rule = f"KJ-SCOPE-{_tag()}"
    mine.finished(problem, "rejected", rules=[_hit(rule, 1)])
    theirs.finished(problem, "rejected", rules=[_hit(rule, 2)])
    theirs.finished(problem, "ok", speedup=2.0)
    stats = JobStats(store)
    since = time.time() - 60

    assert [(r.rule, r.jobs) for r in stats.rules(mine.owner, since, 50) if r.rule == rule] == [(rule, 1)]
    assert [(r.rule, r.jobs) for r in stats.rules(None, since, 50) if r.rule == rule] == [(rule, 2)]
    assert stats.speedups(mine.owner, since, 10) == []
    assert [r.problem_id for r in stats.speedups(None, since, 50)].count(problem) == 1
    assert [j.outcome for j in stats.recent_jobs(mine.owner, 10)] == ["rejected"]
    assert [j.outcome for j in stats.recent_jobs(theirs.owner, 10)] == ["ok", "rejected"]


def test_recent_jobs_newest_first_with_result_fields_and_outcome_filter(store):
    jobs = Jobs(store, f"key-{_tag()}")
    problem = jobs.problem("recent")
    first = jobs.finished(problem, "ok", speedup=2.5)
    second = jobs.finished(problem, "rejected", rules=[_hit("KJ-X", 1), _hit("KJ-Y", 2)])
    third = jobs.queued(problem)
    stats = JobStats(store)

    rows = stats.recent_jobs(jobs.owner, 10)
    assert [r.job_id for r in rows] == [third, second, first]
    assert (rows[0].status, rows[0].outcome, rows[0].speedup, rows[0].rules_fired) == ("queued", None, None, 0)
    assert (rows[1].outcome, rows[1].rules_fired, rows[1].reward) == ("rejected", 2, 0.0)
    assert (rows[2].outcome, rows[2].speedup, rows[2].reward, rows[2].problem_name) == ("ok", 2.5, 1.0, "recent")
    assert [r.job_id for r in stats.recent_jobs(jobs.owner, 10, outcome="ok")] == [first]
    assert [r.job_id for r in stats.recent_jobs(jobs.owner, 2)] == [third, second]


def test_queue_snapshot_counts_queued_jobs_and_lists_busy_workers(store):
    jobs = Jobs(store, f"key-{_tag()}")
    problem = jobs.problem("queue")
    worker = f"embedded@node-{_tag()}:gpu3"
    jobs.queued(problem)
    jobs.queued(problem)
    running = jobs.started(problem, worker=worker, gpu="3")

    snapshot = JobStats(store).queue(jobs.owner, recent_s=600)
    assert snapshot.queued_owned == 2 and snapshot.queued >= 2
    busy = [job for job in snapshot.in_flight if job.job_id == running]
    assert len(busy) == 1 and (busy[0].worker, busy[0].gpu, busy[0].status) == (worker, "3", "building")
    assert (worker, "3") in snapshot.recent_workers
