"""The sandbox's wall-clock kill takes every process the child started with it."""

from __future__ import annotations

import os
import sys
import time

import pytest

from worker.engine.process_tree import descendants
from worker.engine.sandbox import ResourceLimits, SandboxExited, SandboxProcess, SandboxSpec, SandboxTimeout
from worker.engine.sandbox.process import CappedLog

SPAWNER = r"""
import os, subprocess, time
children = [subprocess.Popen(["sleep", "1000"]) for _ in range(3)]
# A grandchild that tries to escape into its own session.
escaper = subprocess.Popen(["setsid", "sleep", "1000"])
# Popen returns once `setsid` is exec'd; report only after it has exec'd `sleep` in turn.
while not open(f"/proc/{escaper.pid}/cmdline", "rb").read().startswith(b"sleep"):
    time.sleep(0.01)
os.write(int(os.environ["KJ_MSG_FD"]), b'{"event": "started"}\n')
while True:
    time.sleep(1)
"""


def _descendants(pid: int) -> set[int]:
    return set(descendants(pid)) - {pid}


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _spec(**limits) -> SandboxSpec:
    return SandboxSpec(env={"PATH": "/usr/bin:/bin"}, limits=ResourceLimits(**limits))


def test_timeout_kills_the_whole_process_tree():
    process = SandboxProcess(_spec(), [sys.executable, "-c", SPAWNER], name="spawner")
    process.start()
    try:
        assert process.receive(60) == {"event": "started"}
        tree = _descendants(process.pid)
        sleepers = [p for p in tree if open(f"/proc/{p}/cmdline", "rb").read().startswith(b"sleep")]
        assert len(sleepers) == 4, tree
        with pytest.raises(SandboxTimeout):
            process.receive(0.5)  # nothing more comes: the limit passes and the tree is killed
        # PID-namespace teardown is asynchronous: poll the real condition until a generous deadline.
        deadline = time.monotonic() + 30
        while any(_alive(p) for p in tree) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not any(_alive(p) for p in tree), [p for p in tree if _alive(p)]
    finally:
        process.close(grace_s=0)


def test_cpu_time_limit_stops_a_busy_child():
    process = SandboxProcess(_spec(cpu_s=1), [sys.executable, "-c", "while True: pass"], name="busy")
    process.start()
    with pytest.raises(SandboxExited) as exited:
        process.receive(60)
    process.close(grace_s=0)
    assert "SIGKILL" in exited.value.describe() or "SIGXCPU" in exited.value.describe()


def test_file_size_limit_stops_a_runaway_writer():
    writer = "open('/tmp/big', 'wb').write(b'x' * (64 * 1024 * 1024))"
    process = SandboxProcess(_spec(file_size_bytes=1024 * 1024), [sys.executable, "-c", writer], name="writer")
    process.start()
    with pytest.raises(SandboxExited) as exited:
        process.receive(60)
    process.close(grace_s=0)
    assert exited.value.returncode != 0
    # The write itself was refused by RLIMIT_FSIZE (Python ignores SIGXFSZ, so it raises EFBIG).
    assert "File too large" in exited.value.detail


def test_capped_log_keeps_head_and_tail():
    log = CappedLog(4096)
    log.feed(b"HEAD" + b"a" * 10_000)
    log.feed(b"b" * 10_000 + b"TAIL")
    text = log.text()
    assert text.startswith("HEAD") and text.endswith("TAIL")
    assert "bytes dropped" in text
    assert len(text) < 4096 + 100


def test_the_child_runs_on_the_cores_and_at_the_priority_its_spec_gives():
    core = sorted(os.sched_getaffinity(0))[-1]
    report = ("import json, os; os.write(int(os.environ['KJ_MSG_FD']), (json.dumps({'event': 'placed', "
              "'cpus': sorted(os.sched_getaffinity(0)), 'nice': os.nice(0)}) + '\\n').encode())")
    spec = _spec()
    spec.cpus, spec.nice = (core,), 7
    process = SandboxProcess(spec, [sys.executable, "-c", report], name="placed")
    process.start()
    try:
        placed = process.receive(60)
    finally:
        process.close(grace_s=0)
    assert placed["cpus"] == [core]
    assert placed["nice"] == os.nice(0) + 7



LOOP = "x = 0\nfor i in range(4_000_000):\n    x += i\n"
# Busy in a child that ends (and is reaped), then busy itself, then alive and waiting to be let go.
PARENT = f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', {LOOP!r}])\n{LOOP}print('done', flush=True)\ninput()\n"


def test_a_trees_cpu_time_counts_its_live_and_its_reaped_processes():
    """A judge's start is measured this way (its JudgeStartNote.cpu_s): the host's cost of a judge."""
    import subprocess

    from worker.engine.process_tree import tree_cpu_s

    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert parent.stdout is not None and parent.stdout.readline().strip() == "done"
        with open(f"/proc/{parent.pid}/stat") as handle:
            own = handle.read().rsplit(")", 1)[-1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        reaped_ticks, alive_ticks = int(own[13]) + int(own[14]), int(own[11]) + int(own[12])
        measured = tree_cpu_s(parent.pid)
        assert reaped_ticks > 0.05 * ticks and alive_ticks > 0.05 * ticks  # each loop ran; the child's counted once reaped
        # Whole ticks added, then divided once, as tree_cpu_s does: 0.22 + 0.2 as floats exceeds 42 / 100.
        assert measured is not None and measured >= (reaped_ticks + alive_ticks) / ticks
    finally:
        parent.communicate("\n", timeout=30)
    assert tree_cpu_s(None) is None
