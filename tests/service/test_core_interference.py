"""benchmarks/core_interference.py: which cores slow a timing core (hidden SMT siblings, the host's load)."""

from __future__ import annotations

import os

import pytest

from benchmarks import core_interference
from benchmarks.core_interference import ProbeResult, hidden_siblings, interfering_cores, unsteady_cores


def test_a_core_that_slows_the_probe_alone_is_a_hidden_sibling_unless_sysfs_lists_it(monkeypatch):
    monkeypatch.setattr(core_interference, "thread_siblings", lambda cpu: (0, 16))
    # The probe alone before core 1's spinner, after it, after core 2's, after 16's, after 17's, after all of them.
    result = ProbeResult(probe_cpu=0, baseline_ms=[0.50, 0.52, 0.51, 0.51, 0.50, 0.52],
                         alone_ms={1: 0.52, 2: 0.72, 16: 0.80, 17: 0.58}, all_ms=0.62)
    assert result.baseline == 0.51
    assert result.drift == pytest.approx(0.52 / 0.50 - 1)
    assert result.slowdown(2) == pytest.approx(0.72 / 0.515)  # against its own bracket: 0.52 before, 0.51 after
    assert result.all_slowdown == pytest.approx(0.62 / 0.51)
    # Core 2 (1.40x) and core 16 (1.57x) interfere; core 17 (1.14x) is under the 1.15x threshold.
    assert interfering_cores(result) == [2, 16]
    # Core 16 is the probe's sibling as sysfs shows it: already kept off the timing core's builds.
    assert hidden_siblings(result) == [2]
    assert hidden_siblings(result, threshold=1.10) == [2, 17]
    assert unsteady_cores(result) == []


def test_a_core_measured_while_the_hosts_pace_changed_is_named_neither_way(monkeypatch):
    # As on an idle H100 VM: the probe alone flipped between 0.26 and 0.52 ms a loop. Core 3's spinner ran as
    # the pace halved (its bracket 0.26 -> 0.52): against one old baseline it looked like a 2x sibling.
    monkeypatch.setattr(core_interference, "thread_siblings", lambda cpu: (cpu,))
    result = ProbeResult(probe_cpu=15, baseline_ms=[0.26, 0.26, 0.52, 0.52, 0.52],
                         alone_ms={2: 0.27, 3: 0.52, 4: 0.53}, all_ms=0.55)
    assert unsteady_cores(result) == [3]
    assert interfering_cores(result) == [] and hidden_siblings(result) == []
    # A core inside a steady bracket at the slow pace is judged against that pace, not the fast one.
    assert result.slowdown(4) == pytest.approx(0.53 / 0.52)
    assert any("(unsteady)" in line for line in core_interference.report_lines(result, 1.15))


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to pin a spinner beside the probe")
def test_spinners_are_pinned_and_running_while_the_probe_measures_and_reaped_after():
    cpus = sorted(os.sched_getaffinity(0))[:2]
    with core_interference.spinners([cpus[1]]) as processes:
        assert [os.sched_getaffinity(process.pid) for process in processes] == [{cpus[1]}]
        assert all(process.poll() is None for process in processes)
    assert all(process.returncode is not None for process in processes)

    result = core_interference.measure(cpus[0], cpus, loops=20)
    assert result.probe_cpu == cpus[0]
    assert list(result.alone_ms) == [cpus[1]]
    assert len(result.baseline_ms) == 3  # before, after core 1's spinner, after all at once
    assert min(result.baseline_ms) > 0 and result.all_ms > 0
    assert core_interference.report_lines(result, 1.15)[0] == f"## Probe core {cpus[0]}"
