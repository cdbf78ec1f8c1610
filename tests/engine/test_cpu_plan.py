"""Timing isolation: which cores a lane reserves, and moving a running process tree onto them."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from worker.engine.cpu_plan import parse_cpu_list, pin_process_tree, plan_cpus

SIXTEEN = tuple(range(16))


def test_auto_reserves_two_cores_per_lane_at_the_top_and_leaves_the_rest_to_builds():
    plan = plan_cpus("auto", lane=0, lanes=1, available=SIXTEEN)
    assert plan.lane_cpus == (14, 15) and plan.build_cpus == tuple(range(14))
    second = plan_cpus("auto", lane=1, lanes=2, available=SIXTEEN)
    first = plan_cpus("auto", lane=0, lanes=2, available=SIXTEEN)
    assert first.lane_cpus == (12, 13) and second.lane_cpus == (14, 15)
    assert first.build_cpus == second.build_cpus == tuple(range(12))


def test_small_hosts_reserve_nothing_and_off_means_off():
    assert not plan_cpus("auto", lane=0, lanes=1, available=(0, 1)).reserved
    assert not plan_cpus("off", lane=0, lanes=1, available=SIXTEEN).reserved


def test_an_explicit_plan_gives_each_lane_its_cores():
    assert parse_cpu_list("0-2,8, 10-11") == (0, 1, 2, 8, 10, 11)
    plan = plan_cpus("0-1;2-3", lane=1, lanes=2, available=SIXTEEN)
    assert plan.lane_cpus == (2, 3) and plan.build_cpus == tuple(range(4, 16))


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to move a process between")
def test_a_running_process_tree_moves_to_the_lanes_cores():
    cores = sorted(os.sched_getaffinity(0))
    child = subprocess.Popen([sys.executable, "-c", "import subprocess, sys; "
                              "subprocess.run([sys.executable, '-c', 'import sys; sys.stdin.read()'])"],
                             stdin=subprocess.PIPE)
    try:
        assert pin_process_tree(child.pid, (cores[-1],))
        assert os.sched_getaffinity(child.pid) == {cores[-1]}
    finally:
        child.stdin.close()
        child.wait(30)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to move a process between")
def test_timed_processes_hold_the_lanes_cores_only_for_the_timing_window():
    from worker.engine.cpu_plan import CpuPlan, timing_cores

    cores = sorted(os.sched_getaffinity(0))
    plan = CpuPlan(lane_cpus=(cores[-1],), build_cpus=tuple(cores[:-1]))
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        with timing_cores(plan, [child.pid, None]):
            assert os.sched_getaffinity(child.pid) == {cores[-1]}
        # Correctness stages (other jobs' too) run on the shared cores, never crowded onto the lane's.
        assert os.sched_getaffinity(child.pid) == set(cores[:-1])
    finally:
        child.stdin.close()
        child.wait(30)


def _smt(cores: int):
    """A made-up topology of `cores` threads on cores // 2 physical cores, numbered as Linux numbers most
    hosts: thread i and thread i + cores // 2 share a core."""
    half = cores // 2
    return lambda cpu: tuple(sorted({cpu % half, cpu % half + half}))


def test_with_smt_a_lane_reserves_whole_cores_and_no_build_runs_beside_a_timed_thread():
    first = plan_cpus("auto", lane=0, lanes=2, available=SIXTEEN, siblings=_smt(16))
    second = plan_cpus("auto", lane=1, lanes=2, available=SIXTEEN, siblings=_smt(16))
    assert first.lane_cpus == (6, 14) and second.lane_cpus == (7, 15)
    assert first.build_cpus == second.build_cpus == (0, 1, 2, 3, 4, 5, 8, 9, 10, 11, 12, 13)
    # An explicit plan is the operator's, but the sibling of a reserved thread builds nothing either.
    explicit = plan_cpus("15", lane=0, lanes=1, available=SIXTEEN, siblings=_smt(16))
    assert explicit.lane_cpus == (15,) and 7 not in explicit.build_cpus and len(explicit.build_cpus) == 14


def test_without_smt_the_plan_is_unchanged_and_the_sysfs_topology_is_read():
    alone = plan_cpus("auto", lane=0, lanes=1, available=SIXTEEN, siblings=lambda cpu: (cpu,))
    assert alone.lane_cpus == (14, 15) and alone.build_cpus == tuple(range(14))
    from worker.engine.cpu_plan import thread_siblings

    cpu = sorted(os.sched_getaffinity(0))[0]
    assert cpu in thread_siblings(cpu)
    assert thread_siblings(10**6) == (10**6,)  # no such core: just itself


def test_the_supervisors_threads_leave_the_reserved_cores_and_threads_it_starts_later_inherit_that():
    import threading

    from worker.engine.cpu_plan import CpuPlan, confine_supervisor

    before = {int(tid): os.sched_getaffinity(int(tid)) for tid in os.listdir("/proc/self/task")}
    first = min(os.sched_getaffinity(0))
    waiting, go = threading.Event(), threading.Event()
    older = threading.Thread(target=lambda: (waiting.set(), go.wait()))
    older.start()
    waiting.wait()
    try:
        assert not confine_supervisor(CpuPlan())  # no reservation, nothing moved
        assert confine_supervisor(CpuPlan(lane_cpus=(first + 1,), build_cpus=(first,)))
        tids = [int(tid) for tid in os.listdir("/proc/self/task")]
        assert all(os.sched_getaffinity(tid) == {first} for tid in tids)  # the thread started before too
        seen = []
        later = threading.Thread(target=lambda: seen.append(os.sched_getaffinity(0)))
        later.start()
        later.join()
        assert seen == [{first}]
    finally:
        go.set()
        older.join()
        for tid, cpus in before.items():
            try:
                os.sched_setaffinity(tid, cpus)
            except OSError:
                pass


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to reserve one")
def test_a_plan_made_after_the_supervisor_is_confined_is_the_plan_made_before():
    # Each timed job makes its lane's plan again, from a supervisor thread that `confine_supervisor` has
    # moved off the reserved cores: the plan must still see the host's cores, not that thread's.
    from worker.engine.cpu_plan import confine_supervisor

    cores = sorted(os.sched_getaffinity(0))
    before = {int(tid): os.sched_getaffinity(int(tid)) for tid in os.listdir("/proc/self/task")}
    setting = str(cores[-1])
    first = plan_cpus(setting, lane=0, lanes=1, siblings=lambda cpu: (cpu,))
    assert first.lane_cpus == (cores[-1],) and first.build_cpus == tuple(cores[:-1])
    try:
        assert confine_supervisor(first)
        assert os.sched_getaffinity(0) == set(cores[:-1])
        assert plan_cpus(setting, lane=0, lanes=1, siblings=lambda cpu: (cpu,)) == first
    finally:
        for tid, cpus in before.items():
            try:
                os.sched_setaffinity(tid, cpus)
            except OSError:
                pass
