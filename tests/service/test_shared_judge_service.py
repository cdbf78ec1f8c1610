"""Through the embedded service on CPU: a batch's jobs of one problem share its judge. The service's device lane
runs two jobs at once on a CPU worker; each job of the batch is judged by the problem's one judge (started ahead
of the first job, or by it), none loses it, and every verdict stands."""

from __future__ import annotations

import time

from benchmarks import throughput


def test_a_batch_of_one_problem_is_judged_by_one_judge(tmp_path):
    pairs = throughput.rl_pairs("cpu", None, problems=1, per_problem=4, library_share=1.0, names=["silu"])
    phase = throughput.Phase("rl", "service, embedded")
    throughput.run_batch(phase, pairs, "cpu", dict(throughput.CPU_OPTIONS), tmp_path / "data",
                         deadline=time.monotonic() + 300, broker=None, seed=3, progress=lambda: None)
    assert phase.server_finished == 4 and len(phase.outcomes) == 4, phase.note
    verdicts = {name: outcome.verdict for name, outcome in phase.outcomes.items()}
    assert all(verdict == ("ok" if "_ok" in name else "incorrect") for name, verdict in verdicts.items()), verdicts
    # Exactly one job says where the judge's start went: the one that started it, or the first it served.
    starts = [name for name, outcome in phase.outcomes.items() if outcome.judge_start]
    assert len(starts) == 1, {name: (o.reference_cache, o.reference_judge) for name, o in phase.outcomes.items()}
    assert all(outcome.judge_lost is None for outcome in phase.outcomes.values())
