"""The supervisor's side of the sandbox spawner (spawn_server.py): every sandbox starts through it.

`start_spawner()` is called once at start-up, before the process starts any thread (kerneljudge
serve, kerneljudge worker, kerneljudge eval); `spawner()` returns it (starting one on first use
elsewhere: tests, library callers; the spawner is exec'd fresh, so even then nothing of this
process's state reaches it). One reader thread takes the spawner's replies: a spawn's pid or
failure for the thread that asked, and each child's exit for its `SpawnedChild`.

If the spawner dies, every child it started is dead too (bubblewrap's --die-with-parent): their
`SpawnedChild`s report SIGKILL, pending spawns fail, and the next spawn starts a new spawner.
"""

from __future__ import annotations

import itertools
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

from worker.engine.sandbox import spawn_server
from worker.engine.sandbox.spawn_server import Exited, Spawned, SpawnFailed, SpawnRequest

log = logging.getLogger(__name__)

SPAWN_REPLY_TIMEOUT_S = 60.0
_SERVER_PROGRAM = Path(spawn_server.__file__)


class SpawnError(OSError):
    """The spawner could not start a child (the reason is the child's own, or the spawner's)."""


class SpawnedChild:
    """A child started by the spawner: the parts of `subprocess.Popen` the sandbox uses."""

    def __init__(self, pid: int, cgroup_procs: list[str] | None = None):
        self.pid = pid
        self.cgroup_procs = cgroup_procs or []  # the cgroups it joined: kill_cgroups reaches all it started
        self.returncode: int | None = None
        self._exited = threading.Event()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._exited.wait(timeout):
            raise subprocess.TimeoutExpired(f"sandbox pid {self.pid}", timeout or 0.0)
        assert self.returncode is not None
        return self.returncode

    def exited(self, returncode: int) -> None:
        self.returncode = returncode
        self._exited.set()


class _PendingSpawn:
    def __init__(self, cgroup_procs: list[str]) -> None:
        self.cgroup_procs = cgroup_procs
        self.done = threading.Event()
        self.child: SpawnedChild | None = None
        self.error: str | None = None


class Spawner:
    """One spawner process and the reader of its replies."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        for end in (ours, theirs):
            end.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, spawn_server.SOCKET_BUFFER_BYTES)
            end.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, spawn_server.SOCKET_BUFFER_BYTES)
        try:
            # -I -S: no environment variable, user site or site-packages reaches it; an empty environment.
            self.process = subprocess.Popen(
                [sys.executable, "-I", "-S", str(_SERVER_PROGRAM), str(theirs.fileno())],
                pass_fds=(theirs.fileno(),), env={}, stdin=subprocess.DEVNULL, close_fds=True)
        finally:
            theirs.close()
        self._socket = ours
        self._send_lock = threading.Lock()
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._pending: dict[int, _PendingSpawn] = {}
        self._children: dict[int, SpawnedChild] = {}
        self.alive = True
        self._reader = threading.Thread(target=self._read_replies, name="kj-spawner-replies", daemon=True)
        self._reader.start()

    def spawn(self, request_fields: dict, fds: list[int]) -> SpawnedChild:
        """Start a child (`SpawnRequest` fields without request_id); `fds` become its `fd_targets`."""
        with self._lock:
            if not self.alive:
                raise SpawnError("the sandbox spawner is not running")
            request = SpawnRequest(request_id=next(self._ids), **request_fields)
            pending = self._pending[request.request_id] = _PendingSpawn(request.cgroup_procs)
        try:
            with self._send_lock:
                socket.send_fds(self._socket, [spawn_server.encode(request)], fds)
        except OSError as exc:
            with self._lock:
                self._pending.pop(request.request_id, None)
            raise SpawnError(f"the sandbox spawner did not take the request: {exc}") from exc
        if not pending.done.wait(SPAWN_REPLY_TIMEOUT_S):
            with self._lock:
                self._pending.pop(request.request_id, None)
            raise SpawnError(f"the sandbox spawner did not answer within {SPAWN_REPLY_TIMEOUT_S:.0f}s")
        if pending.child is None:
            raise SpawnError(pending.error or "the sandbox spawner failed")
        return pending.child

    def _read_replies(self) -> None:
        try:
            while True:
                data = self._socket.recv(spawn_server.MAX_MESSAGE_BYTES)
                if not data:
                    break
                self._handle(spawn_server.decode_reply(data))
        except (OSError, ValueError, TypeError):
            log.exception("the sandbox spawner's replies could not be read")
        finally:
            self._lost()

    def _handle(self, reply: Spawned | SpawnFailed | Exited) -> None:
        with self._lock:
            if isinstance(reply, Exited):
                child = self._children.pop(reply.pid, None)
                if child is not None:
                    child.exited(reply.returncode)
                return
            pending = self._pending.pop(reply.request_id, None)
            if isinstance(reply, Spawned):
                child = self._children[reply.pid] = SpawnedChild(reply.pid, pending.cgroup_procs if pending else None)
                if pending is None:  # the asker gave up waiting: nobody will supervise it
                    _kill_group(reply.pid)
                    return
                pending.child = child
            elif pending is not None:
                pending.error = reply.error
            if pending is not None:
                pending.done.set()

    def _lost(self) -> None:
        """The spawner is gone, and its children with it (--die-with-parent): say so to everyone waiting."""
        with self._lock:
            self.alive = False
            children, self._children = self._children, {}
            pending, self._pending = self._pending, {}
        for child in children.values():
            _kill_group(child.pid)  # a child that was not bwrap (debug backend) has no parent death signal
            # bwrap's namespace init leaves that group (--new-session); started as the spawner died, it may
            # have missed its parent-death signal (seen under load): its cgroups reach it.
            kill_cgroups(child.cgroup_procs)
            child.exited(-signal.SIGKILL)
        for waiter in pending.values():
            waiter.error = "the sandbox spawner exited"
            waiter.done.set()
        if self.process.poll() is None:
            log.warning("the sandbox spawner stopped answering; a new one starts with the next sandbox")

    def close(self) -> None:
        """Stop the spawner (its children die with it)."""
        self._socket.close()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._reader.join(10)


def kill_cgroups(cgroup_procs: list[str]) -> None:
    """SIGKILL every process of the cgroups whose `cgroup.procs` files these are (cgroup.kill where the kernel has
    it, else each process listed, until none is left)."""
    for procs in map(Path, cgroup_procs):
        try:
            (procs.parent / "cgroup.kill").write_text("1")
            continue
        except OSError:
            pass  # cgroup v1, or a kernel before 5.14
        for _ in range(10):  # a process forked while the list was read is in the next read
            try:
                pids = [int(pid) for pid in procs.read_text().split()]
            except (OSError, ValueError):
                break
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


_current: Spawner | None = None
_current_lock = threading.Lock()


def start_spawner() -> Spawner:
    """Start the process's spawner now (call it before the process starts threads); idempotent."""
    return spawner()


def spawner() -> Spawner:
    """The process's spawner, started (again) when there is none or it died."""
    global _current
    with _current_lock:
        if _current is None or not _current.alive:
            _current = Spawner()
            log.debug("sandbox spawner started (pid %d)", _current.process.pid)
        return _current
