"""Run one sandboxed child: limits, wall clock, capped logs, a JSON message channel."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import logging
import os
import queue
import resource
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from sandbox_side.runtime import sealed_payload
from sandbox_side.runtime.messages import Exit
from sandbox_side.runtime.sealed_payload import FD_SOCKET, PayloadError, SealedBuffer
from worker.engine.process_tree import StoppedTree
from worker.engine.sandbox import bwrap
from worker.engine.sandbox.identity import (
    IsolationError,
    MemoryOutcome,
    SandboxIdentity,
    acquire,
    count_tasks_of,
    freeze,
    thaw,
)
from worker.engine.sandbox.spawner import SpawnedChild, kill_cgroups, spawner
from worker.engine.sandbox.spec import ResourceLimits, SandboxSpec

log = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 16 * 1024 * 1024
# A reply's payload (sandbox_side/runtime/sealed_payload.py), at most; raised per process by its user when
# larger payloads are expected (the judge's inputs, a candidate's outputs of known size).
DEFAULT_MAX_PAYLOAD_BYTES = 64 * 1024 * 1024
PAYLOAD_KEY = "_payload"
# The child's fd for its messages to the supervisor (KJ_MSG_FD): the first after stdin, stdout, stderr.
MESSAGE_FD = 3
KILL_WAIT_S = 30.0
# How long a freezer cgroup may take to report every process frozen before the sandbox is stopped by
# signal instead.
FREEZE_WAIT_S = 2.0


class SandboxUnavailable(RuntimeError):
    """The sandbox itself could not be started (not the user code's fault)."""


class SandboxTimeout(TimeoutError):
    pass


@dataclass
class SandboxExited(Exception):
    returncode: int | None
    detail: str = ""
    memory: MemoryOutcome | None = None  # its memory cgroup at the end, where it had one


    def describe(self) -> str:
        code = self.returncode
        # Negative: our direct child died by a signal; above 128: bwrap reports its child's
        # death by signal N as exit code 128 + N.
        number = -code if (code is not None and code < 0) else (code - 128 if code and code > 128 else None)
        if number is not None:
            try:
                name = signal.Signals(number).name
            except ValueError:
                name = f"signal {number}"
            if name == "SIGKILL" and self.memory is not None and self.memory.oom_kills:
                return f"the process was killed by SIGKILL: {self.memory.describe()}"
            hint = {"SIGXCPU": " (CPU time limit)", "SIGXFSZ": " (file size limit)",
                    "SIGKILL": " (killed: limit or out of memory)"}.get(name, "")
            return f"the process was killed by {name}{hint}"
        return f"the process exited with code {code} before it reported a result"


class CappedLog:
    """Keeps the head and tail of a stream and counts what was dropped in between."""

    def __init__(self, limit: int) -> None:
        self.half = max(limit // 2, 1024)
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def feed(self, chunk: bytes) -> None:
        room = self.half - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > self.half:
                cut = len(self.tail) - self.half
                self.dropped += cut
                del self.tail[:cut]

    def text(self) -> str:
        middle = f"\n[... {self.dropped} bytes dropped ...]\n" if self.dropped else ""
        return (bytes(self.head).decode("utf-8", "replace") + middle
                + bytes(self.tail).decode("utf-8", "replace"))


class MarkedLog:
    """A stream in two capped parts: what came before the first `mark` and what came after it.

    The runner writes the mark just before user code is imported, so `after_mark()` is the user's
    own output, never crowded out of the cap by the harness's start-up lines; `text()` is the whole
    stream (the mark left out), for crash diagnostics.
    """

    def __init__(self, limit: int, mark: bytes) -> None:
        self.mark = mark
        self.before = CappedLog(limit)
        self.after = CappedLog(limit)
        self.marked = False
        self._carry = b""  # the end of what came before: the start of a mark split across chunks

    def feed(self, chunk: bytes) -> None:
        if self.marked:
            self.after.feed(chunk)
            return
        data = self._carry + chunk
        at = data.find(self.mark)
        if at >= 0:
            self.marked = True
            self._carry = b""
            self.before.feed(data[:at])
            self.after.feed(data[at + len(self.mark):])
            return
        keep = min(len(data), len(self.mark) - 1)
        self.before.feed(data[:len(data) - keep])
        self._carry = data[len(data) - keep:]

    def after_mark(self) -> str:
        return self.after.text() if self.marked else ""

    def text(self) -> str:
        return self.before.text() + self._carry.decode("utf-8", "replace") + self.after.text()


def _rlimits(limits: ResourceLimits, identity: SandboxIdentity) -> list[tuple[int, int, int]]:
    """The kernel limits the sandbox's first process sets before it execs bwrap (spawn_server.py)."""
    rlimits = [(resource.RLIMIT_CPU, limits.cpu_s, limits.cpu_s + 5),
               (resource.RLIMIT_FSIZE, limits.file_size_bytes, limits.file_size_bytes),
               (resource.RLIMIT_NOFILE, limits.open_files, limits.open_files),
               (resource.RLIMIT_CORE, 0, 0),
               (resource.RLIMIT_NPROC, identity.nproc, identity.nproc)]
    if limits.address_space_bytes:
        rlimits.append((resource.RLIMIT_AS, limits.address_space_bytes, limits.address_space_bytes))
    return rlimits


class SandboxProcess:
    """One child process under bubblewrap (or, for debugging only, under nothing)."""

    def __init__(self, spec: SandboxSpec, command: list[str], *, name: str, use_bwrap: bool = True,
                 log_mark: bytes | None = None) -> None:
        """`log_mark`: the child writes it on stdout and stderr where the user's output begins
        (MarkedLog); without one the streams are kept whole."""
        self.spec = spec
        self.command = command
        self.name = name
        self.use_bwrap = use_bwrap
        limit = spec.limits.log_bytes
        self.stdout = MarkedLog(limit, log_mark) if log_mark else CappedLog(limit)
        self.stderr = MarkedLog(limit, log_mark) if log_mark else CappedLog(limit)
        # (message, when its last byte was read): the time is taken on the reader thread, so a timing
        # request's wall time (launch.RunnerSession.timed_request) leaves out the hand-over to the caller.
        self.messages: queue.Queue[tuple[dict, float] | None] = queue.Queue()
        self.received_at = 0.0  # time.monotonic() of the message `receive` returned last
        self.max_payload_bytes = DEFAULT_MAX_PAYLOAD_BYTES
        self._proc: SpawnedChild | None = None
        self._stdin: BinaryIO | None = None
        self._threads: list[threading.Thread] = []
        self.identity: SandboxIdentity | None = None
        self._scratch_dirs: dict[str, str] = {}
        self._release_lock = threading.Lock()
        self._freezer_failed = False  # its freezer cgroup failed once: pause by signal
        # Payloads' descriptors both ways (sealed_payload): ours, the child's is its FD_SOCKET.
        self._fd_socket: socket.socket | None = None

    # -- start / stop ------------------------------------------------------------------
    def start(self) -> None:
        """Start the child through the process's spawner (never a fork of this threaded process)."""
        pipes = {name: os.pipe() for name in ("stdin", "stdout", "stderr", "messages")}
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._fd_socket = ours
        # The child's ends become its fds 0, 1, 2, MESSAGE_FD and FD_SOCKET; ours stay here.
        child_ends = [pipes["stdin"][0], pipes["stdout"][1], pipes["stderr"][1], pipes["messages"][1], theirs.detach()]
        our_ends = [pipes["stdin"][1], pipes["stdout"][0], pipes["stderr"][0], pipes["messages"][0]]
        env_spec = dataclasses.replace(self.spec, env={**self.spec.env, "KJ_MSG_FD": str(MESSAGE_FD),
                                                       "KJ_FD_SOCK": str(FD_SOCKET)})
        limits = self.spec.limits
        started = False
        try:
            if self.use_bwrap:
                path = bwrap.find_bwrap(self.spec.isolation.bwrap)
                if not path:
                    raise SandboxUnavailable("bubblewrap (bwrap) is not installed; install the Debian package "
                                             "'bubblewrap' or set KERNELJUDGE_BWRAP")
                try:
                    self.identity = acquire(self.spec.isolation, bwrap.host_paths(path, env_spec),
                                            limits.extra_processes, memory_bytes=limits.memory_bytes)
                except (IsolationError, OSError) as exc:
                    raise SandboxUnavailable(f"could not start the sandbox for {self.name}: {exc}") from exc
                # bwrap gets an empty environment: the child's is exactly the spec's (--clearenv, --setenv).
                argv = bwrap.build_argv(path, env_spec, self.command, unprivileged=self.identity.uid is not None)
                env: dict[str, str] = {}
            else:
                self.identity = SandboxIdentity("self", count_tasks_of(os.getuid()) + limits.extra_processes)
                self._scratch_dirs = {s.target: tempfile.mkdtemp(prefix="kj-scratch-") for s in self.spec.scratch}
                argv, env = self.command, bwrap.host_env(env_spec, self._scratch_dirs)
            identity = self.identity
            self._proc = spawner().spawn(
                {"argv": argv, "env": env, "fd_targets": [0, 1, 2, MESSAGE_FD, FD_SOCKET], "uid": identity.uid,
                 "gid": identity.uid, "cgroup_procs": [str(p) for p in identity.cgroup_procs_files()],
                 "cpus": list(self.spec.cpus) if self.spec.cpus else None, "nice": self.spec.nice,
                 "rlimits": _rlimits(limits, identity)},
                child_ends)
            started = True
        except OSError as exc:
            raise SandboxUnavailable(f"could not start the sandbox for {self.name}: {exc}") from exc
        finally:
            for end in child_ends:
                os.close(end)
            if not started:
                self._release()
                for end in our_ends:
                    os.close(end)
                ours.close()
        self._stdin = open(pipes["stdin"][1], "wb")  # noqa: SIM115 - kept for the sandbox's life
        self._spawn(self._pump, open(pipes["stdout"][0], "rb"), self.stdout)  # noqa: SIM115
        self._spawn(self._pump, open(pipes["stderr"][0], "rb"), self.stderr)  # noqa: SIM115
        self._spawn(self._read_messages, pipes["messages"][0])

    def _release(self) -> None:
        """Give back the uid or cgroup and the scratch folders once no process of the sandbox is left."""
        with self._release_lock:
            if self.identity is not None:
                self.identity.release()
            for folder in self._scratch_dirs.values():
                shutil.rmtree(folder, ignore_errors=True)
            self._scratch_dirs = {}

    def _spawn(self, target, *args) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True, name=f"{self.name}-io")
        thread.start()
        self._threads.append(thread)

    @staticmethod
    def _pump(stream: io.BufferedReader, sink: CappedLog | MarkedLog) -> None:
        with stream:
            for chunk in iter(lambda: stream.read1(65536), b""):
                sink.feed(chunk)

    def _read_messages(self, fd: int) -> None:
        with os.fdopen(fd, "rb") as stream:
            while True:
                line = stream.readline(MAX_MESSAGE_BYTES + 1)
                if not line:
                    break
                if len(line) > MAX_MESSAGE_BYTES:
                    self.messages.put(({"event": "error", "kind": "protocol", "message": "reply too large"},
                                       time.monotonic()))
                    break
                try:
                    message = json.loads(line)
                except json.JSONDecodeError:
                    message = {"event": "error", "kind": "protocol", "message": "unreadable reply"}
                if not isinstance(message, dict):
                    message = {"event": "error", "kind": "protocol", "message": "reply is not an object"}
                message.pop(PAYLOAD_KEY, None)
                size = message.get("payload_bytes") or 0
                if size:
                    if type(size) is not int or not 0 < size <= self.max_payload_bytes:
                        self.messages.put(({"event": "error", "kind": "protocol",
                                            "message": f"reply announces {size!r} bytes of tensors, over the "
                                                       f"{self.max_payload_bytes}-byte limit for this reply"},
                                           time.monotonic()))
                        break
                    assert self._fd_socket is not None  # made with the pipes
                    try:
                        message[PAYLOAD_KEY] = sealed_payload.receive(self._fd_socket, size)
                    except PayloadError as exc:
                        self.messages.put(({"event": "error", "kind": "protocol", "message": str(exc)},
                                           time.monotonic()))
                        break
                self.messages.put((message, time.monotonic()))
        self.messages.put(None)

    # -- pausing -------------------------------------------------------------------------
    @contextlib.contextmanager
    def paused(self) -> Iterator[str]:
        """No process of the sandbox runs inside this block (while another sandbox is timed): its freezer
        cgroup is frozen, or, without one, every process of its tree is stopped by signal. Yields how; always
        resumed when the block ends, by an exception or a timeout too (kill also thaws)."""
        how, resume = self._pause()
        try:
            yield how
        finally:
            resume()

    def _pause(self):
        if self._proc is None or self._proc.poll() is not None:
            return "not paused: the sandbox is not running", lambda: None
        identity = self.identity
        group = identity.freezer_cgroup if identity is not None else None
        if identity is not None and group is not None and not self._freezer_failed:
            unified = identity.freezer_unified
            try:
                if freeze(group, unified, FREEZE_WAIT_S):
                    return f"frozen (cgroup {'v2' if unified else 'v1'} freezer)", lambda: self._thaw()
                why = f"its freezer cgroup did not freeze within {FREEZE_WAIT_S:g} s"
            except OSError as exc:
                why = f"its freezer cgroup could not be frozen ({exc})"
            self._thaw()
            self._freezer_failed = True  # its later pauses go by signal straight away
            log.warning("sandbox %s: %s; stopping its processes by signal", self.name, why)
        stopped = StoppedTree(self._proc.pid)
        return f"stopped by signal ({stopped.count} processes)", stopped.resume

    def _thaw(self) -> None:
        identity = self.identity
        if identity is not None and identity.freezer_cgroup is not None:
            try:
                thaw(identity.freezer_cgroup, identity.freezer_unified)
            except OSError as exc:
                log.warning("sandbox %s: its freezer cgroup could not be thawed: %s", self.name, exc)

    def kill(self) -> None:
        """Kill bubblewrap's whole process group; its PID namespace takes every descendant with it."""
        if self._proc is None:
            return
        cgroups = [str(path) for path in self.identity.cgroup_procs_files()] if self.identity is not None else []
        if self._proc.poll() is None:
            try:
                os.killpg(self._proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            kill_cgroups(cgroups)
            self._thaw()  # a frozen (v1) process takes its SIGKILL only once thawed
            try:
                self._proc.wait(KILL_WAIT_S)
            except subprocess.TimeoutExpired:
                log.warning("sandbox %s (pid %d) was not reported dead %.0fs after SIGKILL", self.name,
                            self._proc.pid, KILL_WAIT_S)
        else:
            kill_cgroups(cgroups)  # bwrap is gone; a namespace init that missed its parent-death signal is not
            self._thaw()  # what is left of its namespace dies once thawed
        if self._stdin is not None:
            try:
                self._stdin.close()
            except OSError:
                pass  # a flush into a pipe whose reader is gone
        if self._fd_socket is not None:
            self._fd_socket.close()
        self._release()

    def close(self, grace_s: float = 5.0) -> None:
        if self._proc is None:
            return
        if self._proc.poll() is None:
            try:
                self.send(Exit().to_message())  # a runner leaves (sandbox_side/runtime/messages.py); others ignore it
                self._proc.wait(timeout=grace_s)
            except (subprocess.TimeoutExpired, BrokenPipeError, OSError):
                log.info("sandbox %s did not exit within %.1fs; killing it", self.name, grace_s)
        self.kill()
        for thread in self._threads:
            thread.join(timeout=2.0)

    # -- messages ------------------------------------------------------------------------
    def send(self, message: dict, payload: SealedBuffer | None = None) -> None:
        """Write one command; a payload's descriptor goes first (sealed_payload), without waiting: a child
        that stops taking them gets none, and its reply deadline still applies."""
        assert self._stdin is not None and self._fd_socket is not None
        if payload is not None and payload.nbytes:
            payload.send(self._fd_socket)
        self._stdin.write((json.dumps(message) + "\n").encode())
        self._stdin.flush()

    def receive(self, timeout_s: float) -> dict:
        """Next message; SandboxTimeout after `timeout_s` (child killed), SandboxExited on EOF."""
        try:
            item = self.messages.get(timeout=max(timeout_s, 0.0))
        except queue.Empty:
            self.kill()
            raise SandboxTimeout(f"{self.name} was still running after the {timeout_s:.1f}s left to it") from None
        if item is None:
            assert self._proc is not None
            code: int | None
            try:
                code = self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
                code = self._proc.returncode
            memory = self.identity.memory_outcome() if self.identity is not None else None
            raise SandboxExited(code, self.stderr.text()[-4000:], memory)
        message, self.received_at = item
        return message

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid
