"""A paused sandbox runs nothing: the candidate's processes while the reference is timed (issue 23, section 3).

A candidate that started busy-loop processes (pausing them while its own forward ran) slowed the reference's
timing 30-fold and so raised its own speedup. The supervisor now pauses the candidate's whole sandbox around
each reference block (SandboxProcess.paused): its freezer cgroup (a root-run service) or, without one, every
process of its tree stopped by signal. These tests start a sandbox whose processes keep busy (children, one in a
session of its own, one double-forked away from its parent) and read each process's CPU time from
/proc/<pid>/schedstat (nanoseconds on the CPU).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from worker.engine.process_tree import StoppedTree, descendants
from worker.engine.sandbox import IsolationConfig, ResourceLimits, SandboxProcess, SandboxSpec
from worker.engine.sandbox import identity as identity_module
from worker.engine.sandbox.identity import CGROUP_PARENT, IsolationError, acquire
from worker.engine.sandbox.process import KILL_WAIT_S

BUSY = r"""
import json, os, sys
def spin():
    while True:
        pass
pids = []
for setsid in (False, False, True):
    pid = os.fork()
    if pid == 0:
        if setsid:
            os.setsid()
        spin()
    pids.append(pid)
# A daemon: double-forked, so that its parent is gone and it is reparented to the namespace's init.
reader, writer = os.pipe()
if os.fork() == 0:
    grandchild = os.fork()
    if grandchild == 0:
        spin()
    os.write(writer, str(grandchild).encode())
    os._exit(0)
pids.append(int(os.read(reader, 32)))
os.write(int(os.environ["KJ_MSG_FD"]), (json.dumps({"event": "started", "pids": pids}) + "\n").encode())
sys.stdin.readline()
"""
OBSERVE_S = 0.3  # how long a paused tree is watched for any CPU time at all


def _cpu_ns(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/schedstat") as handle:
            return int(handle.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def _tree_cpu_ns(root: int) -> dict[int, int]:
    return {pid: _cpu_ns(pid) for pid in descendants(root)}


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as handle:
        return handle.read().rsplit(")", 1)[1].split()[0]


def _spins_again(before: dict[int, int], deadline_s: float = 30.0) -> bool:
    """True once each of these busy processes has been on the CPU beyond `before` (busy-polling /proc)."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if all(_cpu_ns(pid) > spent for pid, spent in before.items()):
            return True
        os.sched_yield()
    return False


@pytest.fixture(params=["freezer", "signal"])
def mode(request, monkeypatch):
    if request.param == "freezer":
        if os.geteuid() != 0:
            pytest.skip("freezer cgroups are for a root-run service; this run is not root")
    else:  # as for a service that is not root, or a host without a freezer
        monkeypatch.setattr(identity_module, "_add_freezer", lambda identity: None)
    return request.param


@pytest.fixture
def busy(mode):
    spec = SandboxSpec(env={"PATH": "/usr/bin:/bin"}, limits=ResourceLimits(extra_processes=64))
    process = SandboxProcess(spec, [sys.executable, "-I", "-c", BUSY], name="busy")
    process.start()
    try:
        started = process.receive(60)
        assert started["event"] == "started", started
        yield process, started["pids"]
    finally:
        process.close(grace_s=0)


def _host_pids(root: int, namespace_pids: list[int]) -> list[int]:
    """The host's pids of the tree's processes with these pids in their own PID namespace (NSpid's last)."""
    found = {}
    for pid in descendants(root):
        try:
            with open(f"/proc/{pid}/status") as handle:
                nspid = next(line for line in handle if line.startswith("NSpid:")).split()
        except (OSError, StopIteration):
            continue
        found[int(nspid[-1])] = pid
    return [found[pid] for pid in namespace_pids]


def _spinners(process: SandboxProcess, namespace_pids: list[int]) -> list[int]:
    """The busy processes' host pids, once every one has been on the CPU."""
    spinning = _host_pids(process.pid, namespace_pids)
    assert len(spinning) == len(namespace_pids) and _spins_again({pid: 0 for pid in spinning})
    return spinning


def test_no_process_of_a_paused_sandbox_runs_and_all_run_again_after(busy, mode):
    process, pids = busy
    assert len(pids) == 4
    spinning = _spinners(process, pids)
    with process.paused() as how:
        paused_at = _tree_cpu_ns(process.pid)
        assert set(paused_at) >= set(spinning), "a process of the sandbox escaped the tree"
        watched_until = time.monotonic() + OBSERVE_S
        while time.monotonic() < watched_until:
            assert _tree_cpu_ns(process.pid) == paused_at, "a process of the paused sandbox ran"
        if mode == "freezer":
            assert how.startswith("frozen (cgroup")
            group = process.identity.freezer_cgroup
            state = group / ("cgroup.events" if process.identity.freezer_unified else "freezer.state")
            assert ("frozen 1" in state.read_text()) if process.identity.freezer_unified \
                else state.read_text().strip() == "FROZEN"
        else:
            assert how == f"stopped by signal ({len(paused_at)} processes)"
            # (a zombie: the daemon's first parent, left for the stopped init to reap)
            assert {_state(pid) for pid in paused_at} - {"Z"} == {"T"}
    # Resumed: the busy ones spin again, nothing is left stopped.
    assert _spins_again({pid: paused_at[pid] for pid in spinning})
    assert "T" not in {_state(pid) for pid in descendants(process.pid)}


def test_a_sandbox_is_resumed_when_the_paused_block_raises(busy):
    process, pids = busy
    spinning = _spinners(process, pids)
    with pytest.raises(TimeoutError), process.paused():
        paused_at = {pid: _cpu_ns(pid) for pid in spinning}
        raise TimeoutError("the reference's block ran past its deadline")
    assert _spins_again(paused_at)


def test_a_paused_sandbox_is_killed_at_once(busy):
    process, _ = busy
    tree = descendants(process.pid)
    started = time.monotonic()
    with process.paused():
        process.kill()
    assert time.monotonic() - started < KILL_WAIT_S / 3, "kill waited for a frozen sandbox"
    assert not process.running
    deadline = time.monotonic() + 30
    while any(os.path.exists(f"/proc/{pid}") and _state(pid) != "Z" for pid in tree) and time.monotonic() < deadline:
        os.sched_yield()
    assert not any(os.path.exists(f"/proc/{pid}") and _state(pid) != "Z" for pid in tree)


def test_stopping_a_tree_leaves_every_other_process_alone():
    # The test's own busy child beside the tree: stopped trees are found from /proc, so a neighbour must not
    # be taken for a member.
    neighbour = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    tree_root = subprocess.Popen([sys.executable, "-c", BUSY], stdin=subprocess.PIPE,
                                 env={**os.environ, "KJ_MSG_FD": "1"}, stdout=subprocess.PIPE)
    try:
        started = json.loads(tree_root.stdout.readline())
        stopped = StoppedTree(tree_root.pid)
        try:
            # (the daemon left the tree: without a PID namespace of its own it is the host init's child now)
            assert {_state(pid) for pid in [tree_root.pid, *started["pids"][:3]]} == {"T"}
            assert stopped.count == len(descendants(tree_root.pid))
            assert _state(neighbour.pid) != "T"
        finally:
            stopped.resume()
        assert _state(tree_root.pid) != "T" and stopped.count == 0
    finally:
        for child in (neighbour, tree_root):
            child.kill()
            child.wait()
        for pid in started["pids"]:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass


@pytest.mark.parametrize("isolation", ["uid", "cgroup"])
def test_each_sandbox_of_a_root_service_gets_a_freezer_group_it_joins_and_gives_back(isolation, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("sandbox identities of their own are for a root-run service; this run is not root")
    try:
        identity = acquire(IsolationConfig(mode=isolation, lock_dir=tmp_path / "uids"), [], 12, memory_bytes=None)
    except IsolationError as exc:
        pytest.skip(f"no {isolation} identity on this host: {exc}")
    try:
        group = identity.freezer_cgroup
        assert group is not None and group / "cgroup.procs" in identity.cgroup_procs_files()
        if identity.freezer_unified:  # v2: a process is in one cgroup there, the sandbox's own where it has one
            assert (group / "cgroup.freeze").exists() and group in [identity.cgroup, *identity.cgroups()]
        else:
            assert (group / "freezer.state").read_text().strip() == "THAWED"
            assert group.parent.name == CGROUP_PARENT and group.name.startswith(f"{os.getpid()}-")
    finally:
        identity.release()
    assert not group.exists() and identity.freezer_cgroup is None


def test_a_real_sandbox_registered_as_a_neighbour_of_the_device_runs_nothing_while_another_thread_times(busy):
    """GpuSchedule.neighbour with a real SandboxProcess: frozen (or stopped) for another thread's exclusive
    hold, running again after it; a sandbox not started yet says so in the words the schedule reads."""
    import threading

    from worker.engine.gpu_schedule import NOT_PAUSED, GpuSchedule

    process, pids = busy
    spinning = _spinners(process, pids)
    schedule = GpuSchedule("gpu0")
    ran_while_timed = []

    def timing():
        with schedule.exclusive():
            paused_at = _tree_cpu_ns(process.pid)
            watched_until = time.monotonic() + OBSERVE_S
            while time.monotonic() < watched_until:
                ran_while_timed.append(_tree_cpu_ns(process.pid) != paused_at)
            ran_while_timed.append(paused_at)

    with schedule.neighbour(process):
        thread = threading.Thread(target=timing)
        thread.start()
        thread.join()
        paused_at = ran_while_timed.pop()
        assert ran_while_timed and not any(ran_while_timed), "a process of the paused neighbour ran"
        assert schedule.neighbour_pauses == 1
        assert _spins_again({pid: paused_at[pid] for pid in spinning})
    unstarted = SandboxProcess(SandboxSpec(env={}, limits=ResourceLimits()), [sys.executable, "-c", "pass"],
                               name="unstarted")
    with unstarted.paused() as how:
        assert how.startswith(NOT_PAUSED)
