"""The soak benchmark (benchmarks/soak.py): rounds against one service, judged by the server's own store,
its /metrics and nvidia-smi. A short soak on CPU, and its pass/fail rule on made-up readings."""

from __future__ import annotations

import json

import pytest

from benchmarks import soak
from benchmarks.throughput import rl_pairs


# 600: each round is finished before the next is sent; 1: the next round goes while the first one's jobs are
# still open (a trainer that does not wait), and they are read later, in the drain.
@pytest.mark.parametrize("round_limit_s", ["600", "1"])
def test_a_short_soak_counts_every_job_from_the_store_and_passes(tmp_path, round_limit_s):
    out, jsonl = tmp_path / "soak.md", tmp_path / "soak.jsonl"
    argv = ["--device", "cpu", "--names", "elementwise,silu", "--problems", "2", "--per-problem", "2",
            "--rounds", "2", "--duration-s", "600", "--drain-s", "300", "--sample-s", "1",
            "--round-limit-s", round_limit_s,
            "--data-dir", str(tmp_path / "data"), "--out", str(out), "--jsonl", str(jsonl)]
    run = soak.Soak(soak.parse_args(argv), argv)
    assert run.run() == 0
    assert run.verdict is not None and run.verdict.passed and run.verdict.lost == 0, run.verdict
    assert [r.jobs for r in run.rounds] == [4, 4] and all(len(r.outcomes) == 4 for r in run.rounds)
    if round_limit_s == "1":  # CPU jobs take seconds each: the first round was open when the second went
        assert run.rounds[0].left_open > 0
    else:
        assert [r.left_open for r in run.rounds] == [0, 0]
    # The lanes were read from the server's /metrics (a soak that never saw them could not see a stall).
    assert run.watch.samples >= 1 and run.watch.stalled_seen and not any(run.watch.stalled_seen.values())
    report = out.read_text()
    assert "**PASS**: 0 lost, 0 stalls" in report and "state: finished" in report
    rows = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert len(rows) == 8 and {row["round"] for row in rows} == {1, 2}
    assert {row["verdict"] for row in rows} <= {"ok", "incorrect"}
    assert all(0 <= row["timeline"]["claimed"] <= row["timeline"]["finished"] for row in rows)
    assert "## Repeats across rounds" in report and "| elementwise/triton_ok | ok |" in report


def test_a_soak_starts_only_on_a_fresh_data_dir(tmp_path):
    (tmp_path / "embedded.db").write_text("")
    with pytest.raises(SystemExit, match="not empty"):
        soak.parse_args(["--data-dir", str(tmp_path)])


def test_each_round_sends_new_samples_of_the_same_problems():
    base = rl_pairs("cpu", None, problems=2, per_problem=4, library_share=1.0, names=["elementwise", "silu"])
    first, second = soak.round_pairs(base, 1, seed=3), soak.round_pairs(base, 2, seed=3)
    assert {p.problem for p in first} == {p.problem for p in second} == {"elementwise", "silu"}
    assert not {p.candidate for p in first} & {p.candidate for p in second}, "a later step's samples are new"
    # Exact duplicates inside a round stay duplicates (one build each).
    assert len({p.candidate for p in first}) == len({p.candidate for p in base}) < len(base)


def _watch(stalled: int = 0, restarts: float = 0.0) -> soak.LaneWatch:
    return soak.LaneWatch(samples=10, stalled_seen={"cuda:0": stalled}, restarts={"cuda:0": restarts})


def test_the_soak_passes_only_with_nothing_lost_no_stall_and_memory_under_the_limit():
    assert soak.judge_soak(128, 128, 128, _watch(), 0, 0.7).passed
    lost = soak.judge_soak(128, 127, 127, _watch(), 0, 0.7)
    assert not lost.passed and lost.lost == 1 and "1 of 128 jobs not finished" in lost.problems[0]
    unread = soak.judge_soak(128, 128, 120, _watch(), 0, 0.7)
    assert not unread.passed and "client read 120" in unread.problems[0]
    stalled = soak.judge_soak(128, 128, 128, _watch(stalled=3, restarts=1), 0, 0.7)
    assert not stalled.passed and stalled.stalls == 4 and len(stalled.problems) == 2
    quiet_store = soak.judge_soak(128, 128, 128, _watch(), 1, 0.7)
    assert not quiet_store.passed and "stacks in the server log" in quiet_store.problems[0]
    memory = soak.judge_soak(128, 128, 128, _watch(), 0, 0.93)
    assert not memory.passed and "93.0%" in memory.problems[0]


def _timed(verdict: str, speedup: float | None, reference_ms: float = 1.0) -> soak.Outcome:
    timed = None if speedup is None else {"reference_ms": reference_ms, "candidate_ms": reference_ms / speedup}
    return soak.Outcome(verdict, speedup=speedup, timed=timed)


def test_the_report_lists_each_candidates_runs_across_rounds_widest_spread_first():
    """A soak's single-outlier speedups (8.3 eleven times, 6.3 once) must show, with the side that moved."""
    rows = [("r1/box_loss/triton_ok#0", _timed("ok", 8.0)), ("r2/box_loss/triton_ok#3", _timed("ok", 6.0, 0.75)),
            ("r1/silu/cuda_ok#1", _timed("ok", 1.0)), ("r2/silu/cuda_ok#0", _timed("ok", 1.01)),
            ("r1/silu/cuda_wrong#0", _timed("incorrect", None)), ("r2/silu/cuda_wrong#0", _timed("ok", 1.0))]
    repeats = soak.repeats_of(rows)
    assert [r.name for r in repeats] == ["box_loss/triton_ok", "silu/cuda_ok", "silu/cuda_wrong"]
    box = repeats[0]
    assert box.spread == pytest.approx(8.0 / 6.0 - 1) and box.reference_ms == (1.0, 0.75)
    assert box.candidate_ms == pytest.approx((0.125, 0.125))  # the reference moved, not the candidate
    assert repeats[2].verdicts == ("incorrect", "ok") and repeats[2].spread is None
    table = "\n".join(soak.repeats_table(repeats))
    assert "| box_loss/triton_ok | ok | 2 | 6.000-8.000 | 33.3% | 0.7500-1.0000 | 0.1250-0.1250 |" in table
    assert "| silu/cuda_wrong | incorrect, ok | 1 | 1.000-1.000 | - |" in table
