"""The pipes that carry a sandbox's tensors get larger kernel buffers, within what the kernel lets the
supervisor's user hold (worker/engine/sandbox/pipe_buffers.py)."""

from __future__ import annotations

import fcntl
import os
import sys

from worker.engine.sandbox import ResourceLimits, SandboxProcess, SandboxSpec
from worker.engine.sandbox import pipe_buffers as buffers_module
from worker.engine.sandbox.pipe_buffers import WANTED_BYTES, PipeBuffers, pipe_buffers

F_GETPIPE_SZ = getattr(fcntl, "F_GETPIPE_SZ", 1032)


def _size(fd: int) -> int:
    return fcntl.fcntl(fd, F_GETPIPE_SZ)


def _pipes(count: int) -> list[tuple[int, int]]:
    return [os.pipe() for _ in range(count)]


def _close(pipes: list[tuple[int, int]]) -> None:
    for read, write in pipes:
        os.close(read)
        os.close(write)


def test_pipes_are_enlarged_while_the_budget_lasts_and_keep_their_default_beyond_it():
    buffers = PipeBuffers(budget_bytes=2 * WANTED_BYTES)
    pipes = _pipes(3)
    try:
        default = _size(pipes[2][0])
        taken = buffers.enlarge([pipes[0][1], pipes[1][0], pipes[2][1]])
        assert taken == 2 * WANTED_BYTES == buffers.held_bytes
        assert [_size(read) for read, _ in pipes] == [WANTED_BYTES, WANTED_BYTES, default]
        buffers.release(taken)  # those pipes are gone: the budget is free again
        assert buffers.held_bytes == 0
        assert buffers.enlarge([pipes[2][0]]) == WANTED_BYTES and _size(pipes[2][0]) == WANTED_BYTES
    finally:
        _close(pipes)


def test_without_the_resource_capability_the_budget_is_a_quarter_of_the_users_soft_limit(monkeypatch):
    monkeypatch.setattr(buffers_module, "_soft_limit_bytes", lambda: 64 << 20)
    monkeypatch.setattr(buffers_module, "_has_sys_resource", lambda: False)
    assert PipeBuffers.for_this_process().budget_bytes == 16 << 20
    monkeypatch.setattr(buffers_module, "_has_sys_resource", lambda: True)  # the kernel's limits do not apply
    assert PipeBuffers.for_this_process().budget_bytes is None


def test_a_sandboxs_command_and_reply_pipes_are_enlarged_and_given_back_when_it_ends(monkeypatch):
    # A budget of this test's own: the process's is shared with the judges and runners other tests keep warm.
    monkeypatch.setattr(buffers_module, "_buffers", PipeBuffers(budget_bytes=4 * WANTED_BYTES))
    buffers = pipe_buffers()
    before = buffers.held_bytes
    script = ("import fcntl, os, json; fd = int(os.environ['KJ_MSG_FD']); "
              "os.write(fd, (json.dumps({'event': 'sizes', 'stdin': fcntl.fcntl(0, 1032), "
              "'messages': fcntl.fcntl(fd, 1032)}) + '\\n').encode()); input()")
    process = SandboxProcess(SandboxSpec(env={"PATH": "/usr/bin:/bin"}, limits=ResourceLimits()),
                             [sys.executable, "-c", script], name="pipes")
    process.start()
    try:
        sizes = process.receive(60)
        assert (sizes["stdin"], sizes["messages"]) == (WANTED_BYTES, WANTED_BYTES), sizes
        assert buffers.held_bytes == before + 2 * WANTED_BYTES
    finally:
        process.close(grace_s=0)
    assert buffers.held_bytes == before
