"""The coverage arithmetic (worker/coverage.py), from per-operator times."""

from __future__ import annotations

from worker.coverage import coverage_report


def test_only_compute_operators_count_against_the_candidate():
    report = coverage_report({"aten.mm": 6.0, "aten.copy_": 1.0, "aten.empty": 0.5}, 10.0, "cuda")
    assert report.share == 0.4 and report.pytorch_compute_ms == 6.0
    assert report.top_pytorch_ops == {"aten.mm": 6.0}
    assert report.method == "cuda_events_per_op"


def test_share_never_goes_below_zero_and_top_ops_are_sorted():
    times = {f"aten.op{i}": float(i) for i in range(1, 8)}
    report = coverage_report(times, 5.0, "cpu")
    assert report.share == 0.0 and report.pytorch_compute_ms == 5.0
    assert list(report.top_pytorch_ops) == ["aten.op7", "aten.op6", "aten.op5", "aten.op4", "aten.op3"]


def test_no_measurable_forward_gives_no_report():
    assert coverage_report({}, 0.0, "cpu") is None
