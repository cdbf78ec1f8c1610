"""The sandbox spawner (worker/engine/sandbox/spawner.py, spawn_server.py): what a start reports when it
fails, how a child's exit reaches its supervisor, and what happens when the spawner itself dies."""

from __future__ import annotations

import os
import signal
import sys

import pytest

from worker.engine.sandbox import ResourceLimits, SandboxExited, SandboxProcess, SandboxSpec
from worker.engine.sandbox import spawner as spawner_module
from worker.engine.sandbox.spawn_server import (
    Exited,
    Spawned,
    SpawnFailed,
    SpawnRequest,
    decode_reply,
    decode_request,
    encode,
)
from worker.engine.sandbox.spawner import kill_cgroups

WAIT_FOR_INPUT = "import sys; sys.stdin.readline()"


def sandbox(command: list[str], name: str = "spawned") -> SandboxProcess:
    spec = SandboxSpec(env={"PATH": "/usr/bin:/bin"}, limits=ResourceLimits(extra_processes=64))
    return SandboxProcess(spec, command, name=name)


def test_messages_round_trip():
    request = SpawnRequest(7, ["/bin/true"], {"A": "b"}, [0, 1, 2, 3], uid=610001, gid=610001,
                           cgroup_procs=["/x/cgroup.procs"], cpus=[0, 1], nice=5, rlimits=[(7, 64, 64)])
    assert decode_request(encode(request)) == request
    for reply in (Spawned(7, 1234), SpawnFailed(7, "no such file"), Exited(1234, -9)):
        assert decode_reply(encode(reply)) == reply
    with pytest.raises(ValueError):
        decode_request(encode(Spawned(1, 2)))


def test_a_start_whose_program_is_missing_ends_with_the_reason():
    process = sandbox(["/nonexistent/kj-program"])
    process.start()  # bwrap itself starts; it reports the missing program as its exit
    with pytest.raises(SandboxExited) as exited:
        process.receive(60)
    assert exited.value.returncode == 1 and "No such file" in exited.value.detail
    process.close(grace_s=0)


def test_the_spawners_own_exec_failure_is_reported():
    child = spawner_module.spawner()
    read_end, write_end = os.pipe()
    try:
        with pytest.raises(spawner_module.SpawnError, match="FileNotFoundError"):
            child.spawn({"argv": ["/nonexistent/kj-program"], "env": {}, "fd_targets": [1]}, [write_end])
    finally:
        os.close(read_end)
        os.close(write_end)


def test_a_childs_exit_code_reaches_its_supervisor():
    process = sandbox([sys.executable, "-I", "-S", "-c", "import sys; sys.exit(3)"])
    process.start()
    with pytest.raises(SandboxExited) as exited:
        process.receive(60)
    assert exited.value.returncode == 3
    process.close(grace_s=0)


def test_when_the_spawner_dies_its_sandboxes_end_and_the_next_start_gets_a_new_one():
    first = spawner_module.spawner()
    process = sandbox([sys.executable, "-I", "-S", "-c", WAIT_FOR_INPUT], name="orphan")
    process.start()
    assert process.running
    first.process.send_signal(signal.SIGKILL)
    first.process.wait(30)
    with pytest.raises(SandboxExited):
        process.receive(60)
    assert not process.running
    process.close(grace_s=0)

    again = sandbox([sys.executable, "-I", "-S", "-c", "import sys; sys.exit(0)"], name="after")
    again.start()
    with pytest.raises(SandboxExited) as exited:
        again.receive(60)
    assert exited.value.returncode == 0
    assert spawner_module.spawner() is not first and spawner_module.spawner().alive


def test_killing_a_sandboxs_cgroups_ends_its_whole_tree():
    # What the spawner's loss relies on: bwrap's namespace init leaves bwrap's process group (--new-session), and
    # one started as the spawner died could miss its parent-death signal (seen under load); its cgroups reach it.
    process = sandbox([sys.executable, "-I", "-S", "-c", WAIT_FOR_INPUT], name="in-cgroups")
    process.start()
    files = [str(path) for path in process.identity.cgroup_procs_files()] if process.identity else []
    if not files:
        process.close(grace_s=0)
        pytest.skip("this host gives sandboxes no cgroup (the service does not run as root)")
    kill_cgroups(files)
    with pytest.raises(SandboxExited):
        process.receive(60)
    process.close(grace_s=0)
