"""How many CUDA builds a node runs at once: one per BUILD_CORE_SHARE of the cores no lane reserves (a fast
build keeps about 1.1 cores busy), or what the operator set."""

from __future__ import annotations

from types import SimpleNamespace

from worker.engine.build.pool import build_slots
from worker.engine.cpu_plan import CpuPlan


def _settings(build_cpus: tuple[int, ...], slots: int | None = None) -> SimpleNamespace:
    plan = CpuPlan(lane_cpus=(14, 15) if build_cpus else (), build_cpus=build_cpus)
    return SimpleNamespace(build_slots=slots, cpu_plan=lambda: plan)


def test_a_build_slot_per_one_and_a_quarter_unreserved_cores():
    assert build_slots(_settings(tuple(range(14)))) == 11  # one H100 host: 16 cores, 2 reserved
    assert build_slots(_settings(tuple(range(28)))) == 22  # two: 32 cores, 4 reserved


def test_a_small_host_builds_one_at_a_time_and_the_operator_decides_over_the_default():
    assert build_slots(_settings((0,))) == 1
    assert build_slots(_settings(tuple(range(14)), slots=3)) == 3
    assert build_slots(_settings(tuple(range(14)), slots=0)) == 1
