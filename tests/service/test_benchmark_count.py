"""The throughput benchmark counts what the server finished: its count is checked against the server's
own store (the GPU run counted 0 of 128 while the server had finished 41)."""

from __future__ import annotations

import time

from benchmarks import throughput


def test_the_benchmark_reads_every_job_the_server_finished(tmp_path):
    pairs = throughput.rl_pairs("cpu", None, problems=2, per_problem=2, library_share=1.0,
                                names=["elementwise", "silu"])
    phase = throughput.Phase("rl", "service, embedded")
    throughput.run_batch(phase, pairs, "cpu", dict(throughput.CPU_OPTIONS), tmp_path / "data",
                         deadline=time.monotonic() + 300, broker=None, seed=1, progress=lambda: None)
    assert phase.jobs == 4
    assert phase.server_finished == 4, phase.note
    assert len(phase.outcomes) == 4 and phase.count_error is None
    assert {o.verdict for o in phase.outcomes.values()} <= {"ok", "incorrect"}
    # Each job's moments, from the batch's first submit, in the order the pipeline moves it; and its waits for
    # the device (the server's own measure), as the GPU analysis reads them.
    for name, outcome in phase.outcomes.items():
        moments = [outcome.timeline[m] for m in ("claimed", "built", "running", "finished")]
        # (moments are rounded to 10 ms, the wall is not)
        assert 0 <= moments[0] <= moments[1] <= moments[2] <= moments[3] <= phase.wall_s + 0.01, (name, outcome.timeline)
        assert outcome.device_wait_s is not None and outcome.device_wait_s >= 0, name
        assert outcome.timing_wait_s is not None and 0 <= outcome.timing_wait_s <= outcome.device_wait_s, name
        if outcome.verdict == "ok":  # timed: how many calls its window measured, each side
            assert outcome.timing_runs and outcome.timing_runs["candidate"] > 0, (name, outcome.timing_runs)
    assert "host cores" in phase.busy, phase.busy
    # The first job of each problem says where its judge's start went (the server's fresh cache had none).
    assert any(o.judge_start and o.judge_start["generate_s"] > 0 for o in phase.outcomes.values())


def test_a_budget_cut_batch_still_counts_at_least_what_the_server_finished(tmp_path):
    pairs = throughput.rl_pairs("cpu", None, problems=2, per_problem=3, library_share=1.0,
                                names=["elementwise", "silu"])
    phase = throughput.Phase("rl", "service, embedded")
    # A deadline that passes while jobs still run: the wait windows end in states, never in an exception.
    throughput.run_batch(phase, pairs, "cpu", dict(throughput.CPU_OPTIONS), tmp_path / "data",
                         deadline=time.monotonic() + 5, broker=None, seed=1, progress=lambda: None)
    assert phase.server_finished is not None
    assert len(phase.outcomes) >= phase.server_finished and phase.count_error is None


def test_the_table_says_what_share_of_the_wall_the_device_was_held_alone():
    phase = throughput.Phase("rl", "service, embedded", jobs=3, wall_s=10.0)
    phase.outcomes = {"a": throughput.Outcome("ok", stages={"timing_setup": 0.5, "timing": 2.0, "timing_check": 0.4}),
                      "b": throughput.Outcome("ok", stages={"timing": 1.0}),
                      "c": throughput.Outcome("incorrect", stages={"compare": 0.3})}
    line = throughput.row(phase, None)
    cells = [cell.strip() for cell in line.strip("|").split("|")]
    header = [cell.strip() for cell in throughput.Report.HEADER.strip("|").split("|")]
    assert len(cells) == len(header)
    assert cells[header.index("held alone (timing)")] == "30%"  # 3 s of 10 s; set-up and check share the device


def test_a_jobs_row_names_the_gpu_that_ran_it_and_the_evidence_of_each_rule_that_fired():
    """What the GPU analysis reads per job: its lane's GPU, and why it was rejected (a false reject of an honest
    library kernel on two H100s could not be explained from the rows, which held only the rule's message), and
    both sides' medians (a soak's single-outlier speedups could not be told apart: reference or candidate)."""
    from datetime import UTC, datetime, timedelta
    from types import SimpleNamespace

    from contract.results import (
        ClockCheckReport,
        EnvironmentInfo,
        EvalResult,
        RuleHit,
        TimingReport,
        TimingStats,
    )
    from contract.statuses import Device, EvalStatus, SandboxKind

    hit = RuleHit(rule="KJ-R20-timing-disagrees-with-supervisor-clock", severity="reject", message="the message",
                  evidence="reported 0.1 ms per call; the supervisor's clock allows 0.2 ms")
    result = EvalResult(status=EvalStatus.rejected, rules=[hit],
                        environment=EnvironmentInfo(device=Device.cuda, sandbox=SandboxKind.bwrap, gpu_index=1))
    created = datetime(2026, 11, 26, tzinfo=UTC)
    job = SimpleNamespace(result=result, status=SimpleNamespace(value="done"), created_at=created,
                          finished_at=created + timedelta(seconds=3), building_at=None, built_at=None,
                          running_at=None)
    outcome = throughput.outcome_of(job, created)
    assert outcome.gpu == 1
    assert outcome.timed is None  # rejected before it was timed
    assert outcome.clock_check_retried is None
    first = ClockCheckReport(pairs=9, claimed_ms=1.2, supervisor_ms=1.35, reference_outside_ms=0.1,
                             candidate_outside_ms=0.25, noise_ms=0.01, limit_ms=0.12, pair_calls=[8] + [251] * 8,
                             pair_differences_ms=[3.9] + [0.15] * 8, passed=False)
    result.extra.clock_check_retried = first
    assert throughput.outcome_of(job, created).clock_check_retried == first.model_dump()
    stats = {"n": 40, "mean_ms": 0.5, "std_ms": 0.01, "min_ms": 0.48, "max_ms": 0.55, "rse": 0.003}
    result.timing = TimingReport(method="cuda_events+l2_flush", device="cuda:1",
                                 reference=TimingStats(median_ms=0.9, **stats),
                                 candidate=TimingStats(median_ms=0.3, **stats), speedup=3.0,
                                 speedup_ci95=(2.9, 3.1), pairs=8, candidate_host_median_ms=0.31,
                                 reference_queue_ms=0.45, candidate_queue_ms=0.12)
    assert throughput.outcome_of(job, created).timed == {"reference_ms": 0.9, "candidate_ms": 0.3,
                                                         "speedup_ci95": [2.9, 3.1], "pairs": 8,
                                                         "candidate_host_ms": 0.31, "reference_queue_ms": 0.45,
                                                         "candidate_queue_ms": 0.12}
    assert outcome.rules == ["KJ-R20-timing-disagrees-with-supervisor-clock (reject): reported 0.1 ms per call; "
                             "the supervisor's clock allows 0.2 ms"]


def test_the_report_says_how_many_judges_a_batch_started_and_how_many_jobs_lost_a_shared_one():
    phase = throughput.Phase("rl", "service, embedded", jobs=4, wall_s=10.0)
    phase.outcomes = {
        "a": throughput.Outcome("ok", judge_start={"cpu_s": 12.5}, reference_cache="hit",
                                reference_judge="started ahead, while the candidate was prepared"),
        "b": throughput.Outcome("ok", judge_start={"cpu_s": 20.0}, reference_cache="miss",
                                reference_judge="started its own judge: none of its problem was cached on this GPU"),
        "c": throughput.Outcome("ok", reference_cache="hit", judge_lost="it failed while comparing for another job"),
        "d": throughput.Outcome("incorrect", reference_cache="hit")}
    assert throughput.judges_line(phase) == (
        "Judges during rl (service, embedded): 2 started (1 ahead of their jobs, 1 by a job), 32 CPU s in their "
        "starts (2 measured); 1 job(s) lost a shared judge and ran again.")
    assert throughput.judges_line(throughput.Phase("rl", "serial engine")) is None


def test_the_report_gives_the_batchs_pace_from_its_tenth_percentile_of_verdicts_on():
    phase = throughput.Phase("rl", "service, embedded", jobs=20, wall_s=60.0, gpus=2)
    # Twenty verdicts: the first two late (the warm-up), then one a second from 30 s to 47 s.
    finishes = [25.0, 29.0, *[30.0 + i for i in range(18)]]
    phase.outcomes = {f"job{i}": throughput.Outcome("ok", timeline={"finished": t}) for i, t in enumerate(finishes)}
    # From the tenth percentile (the third verdict, at 30 s) to the last (47 s): 17 verdicts in 17 s.
    assert throughput.pace_line(phase) == (
        "Pace during rl (service, embedded): the first verdict at 25.0 s, the tenth percentile at 30.0 s, the last "
        "at 47.0 s; from the tenth percentile on, 3600 verdicts an hour, 1800 per GPU-hour (2 GPUs).")
    phase.outcomes = dict(list(phase.outcomes.items())[:9])
    assert throughput.pace_line(phase) is None  # too few to tell a pace


def test_the_report_gives_the_median_cpu_of_each_part_of_the_sandboxes_starts():
    phase = throughput.Phase("rl", "service, embedded", jobs=3, wall_s=10.0)
    runner = {"imports": 2.0, "device": 1.0, "triton_import": 0.5, "warm": 1.5}
    phase.outcomes = {
        "a": throughput.Outcome("ok", candidate_cpu_s=8.0, runner_start_cpu_s=runner,
                                judge_start={"cpu_s": 14.0, "launch_cpu_s": 6.0,
                                             "start_cpu_s": {"imports": 2.5, "device": 1.5, "warm": 0.0}}),
        "b": throughput.Outcome("ok", candidate_cpu_s=10.0, runner_start_cpu_s={**runner, "imports": 3.0}),
        "c": throughput.Outcome("incorrect", candidate_cpu_s=6.0, runner_start_cpu_s={**runner, "imports": 4.0})}
    assert throughput.starts_line(phase) == (
        "Sandbox starts during rl (service, embedded), median CPU s by part: 3 candidate runners (imports 3.00, "
        "device 1.00, triton_import 0.50, warm 1.50; the whole sandbox, job included, 8.00); 1 judges (imports "
        "2.50, device 1.50, warm 0.00; to the reference imported, 6.00; the whole start, 14.00).")
    assert throughput.starts_line(throughput.Phase("rl", "serial engine")) is None


def test_the_report_gives_the_median_wall_time_of_each_part_of_the_candidate_stage():
    phase = throughput.Phase("triton-warm", "service, embedded", jobs=3, wall_s=10.0)
    run = {"read": 0.2, "construct": 0.01, "first_call": 1.5, "outputs": 0.4}
    phase.outcomes = {
        "a": throughput.Outcome("ok", stages={"candidate": 3.0}, candidate_run_s=run),
        "b": throughput.Outcome("ok", stages={"candidate": 4.0}, candidate_run_s={**run, "first_call": 2.5}),
        "c": throughput.Outcome("build_error", stages={"build": 1.0})}  # no candidate stage: not counted
    assert throughput.candidate_run_line(phase) == (
        "The candidate stage during triton-warm (service, embedded), median wall s by part over 2 jobs: read 0.20, "
        "construct 0.01, first_call 2.00, outputs 0.40; the stage, median 3.50.")
    assert throughput.candidate_run_line(throughput.Phase("rl", "serial engine")) is None
