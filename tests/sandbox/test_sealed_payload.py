"""Payloads between sandboxes are sealed memory files (sandbox_side/runtime/sealed_payload.py): a sandboxed
process cannot change one it was sent (the judge's input sets go to every candidate of the problem), and the
supervisor takes from a sandbox only a sealed file of the size its line announced."""

from __future__ import annotations

import os
import sys

import pytest

from sandbox_side.runtime.sealed_payload import SealedBuffer
from worker.engine.sandbox import ResourceLimits, SandboxProcess, SandboxSpec
from worker.engine.sandbox.process import PAYLOAD_KEY

# The child's side, with the standard library only: a command's descriptor comes over fd KJ_FD_SOCK
# before its line; replies go to KJ_MSG_FD.
CHILD = r"""
import array, fcntl, json, mmap, os, socket, sys
out = int(os.environ["KJ_MSG_FD"])
sock = socket.socket(fileno=int(os.environ["KJ_FD_SOCK"]))

def reply(message, fd=None):
    if fd is not None:
        sock.sendmsg([b"p"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))])
    os.write(out, (json.dumps(message) + "\n").encode())

def memfd(data, seals):
    fd = os.memfd_create("payload", os.MFD_ALLOW_SEALING)
    os.write(fd, data)
    if seals:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
    return fd

ALL = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
command = json.loads(sys.stdin.readline())
if command["op"] == "tamper":
    fds = array.array("i")
    _, ancillary, _, _ = sock.recvmsg(1, socket.CMSG_SPACE(fds.itemsize))
    fds.frombytes(ancillary[0][2])
    fd = fds[0]
    tries = {}
    def attempt(name, action):
        try:
            action()
            tries[name] = "done"
        except OSError as exc:
            tries[name] = exc.strerror
    attempt("write", lambda: os.pwrite(fd, b"XXXX", 0))
    attempt("shared writable map", lambda: mmap.mmap(fd, 4)[:4])
    attempt("reopened for writing", lambda: os.pwrite(os.open(f"/proc/self/fd/{fd}", os.O_RDWR), b"XXXX", 0))
    attempt("truncate", lambda: os.ftruncate(fd, 0))
    attempt("grow", lambda: os.ftruncate(fd, 8))
    private = mmap.mmap(fd, 4, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    private[:4] = b"XXXX"  # a private copy: allowed, and it reaches nobody
    reply({"event": "tried", **tries})
elif command["op"] == "unsealed":
    reply({"event": "done", "payload_bytes": 4}, memfd(b"abcd", 0))
elif command["op"] == "writable":
    reply({"event": "done", "payload_bytes": 4}, memfd(b"abcd", ALL & ~fcntl.F_SEAL_WRITE))
elif command["op"] == "larger":
    reply({"event": "done", "payload_bytes": 4}, memfd(b"abcdefgh", ALL))
elif command["op"] == "pipe":
    reply({"event": "done", "payload_bytes": 4}, os.pipe()[0])
elif command["op"] == "none":
    reply({"event": "done", "payload_bytes": 4})
elif command["op"] == "sealed":
    reply({"event": "done", "payload_bytes": 4}, memfd(b"abcd", ALL))
sys.stdin.readline()  # alive, its socket open, until the supervisor is done with it
"""


def _child(op: str, payload: SealedBuffer | None = None) -> dict:
    spec = SandboxSpec(env={"PATH": "/usr/bin:/bin"}, limits=ResourceLimits())
    process = SandboxProcess(spec, [sys.executable, "-I", "-c", CHILD], name=f"payload-{op}")
    process.start()
    try:
        process.send({"op": op}, payload=payload)
        return process.receive(60)
    finally:
        process.close(grace_s=0.0)


def test_a_sandbox_cannot_change_a_payload_it_was_sent():
    """What a candidate's runner gets is the judge's input sets, sealed once for every candidate of the
    problem: none of them may change what the next one gets."""
    inputs = SealedBuffer.from_bytes(b"abcd")
    tried = _child("tamper", inputs)
    assert tried.pop("event") == "tried"
    assert set(tried) == {"write", "shared writable map", "reopened for writing", "truncate", "grow"}
    assert all(outcome != "done" for outcome in tried.values()), tried
    assert inputs.read() == b"abcd"


@pytest.mark.parametrize("op, why", [
    ("unsealed", "not sealed against writes"),
    ("writable", "not sealed against writes"),
    ("larger", "holds 8 bytes, 4 announced"),
    ("pipe", "not a sealed memory file"),
    ("none", "no descriptor came"),
])
def test_the_supervisor_takes_only_a_sealed_file_of_the_size_announced(op, why):
    reply = _child(op)
    assert reply["event"] == "error" and reply["kind"] == "protocol", reply
    assert why in reply["message"]


def test_a_sealed_reply_arrives_with_its_bytes():
    reply = _child("sealed")
    assert reply["event"] == "done"
    assert reply[PAYLOAD_KEY].read() == b"abcd"


def test_the_supervisor_holds_no_descriptor_after_a_refused_payload():
    before = len(os.listdir("/proc/self/fd"))
    for op in ("unsealed", "larger", "pipe"):
        _child(op)
    assert len(os.listdir("/proc/self/fd")) <= before
