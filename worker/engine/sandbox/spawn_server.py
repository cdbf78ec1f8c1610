"""The sandbox spawner: one small single-threaded process that forks and execs every sandbox.

Why it exists: the supervisor is a process full of threads (HTTP, pipeline, readers of every
sandbox's pipes). A fork there copies whatever locks other threads hold at that instant (logging,
the import lock, allocator locks) into a child that then runs Python before it execs: on a
two-GPU host four sandbox starts hung in that child, and the service with them. This process has
one thread, so its children can safely run Python between fork and exec: join the sandbox's
cgroups, set its limits, drop to its uid, place its pipes, then exec bubblewrap.

It runs as a program of its own (`python -I -S spawn_server.py FD`): the standard library only,
an empty environment, no module of the supervisor's, no secret. It talks to the supervisor over
one SOCK_SEQPACKET socket (FD): a request per message, the child's pipe ends passed with it as
SCM_RIGHTS; replies say `spawned` (pid) or `spawn_failed` (why), and `exited` (pid, exit code as
subprocess reports it) once it reaps a child. When the supervisor goes away (end of file), it
exits, and every sandbox dies with it: each child asks for SIGKILL on its parent's death just before it execs
(bubblewrap's own --die-with-parent comes only once bwrap runs; a spawner killed in between left a sandbox
running, seen once in the suite), and exits at once if the spawner is already gone.

The message classes below are the typed contract; the supervisor's side is spawner.py.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import os
import resource
import selectors
import signal
import socket
import sys
from dataclasses import asdict, dataclass, field

MAX_MESSAGE_BYTES = 4 * 1024 * 1024
MAX_FDS = 16
SOCKET_BUFFER_BYTES = 4 * 1024 * 1024
# Received descriptors are moved at or above this number in the child before they are placed.
_HIGH_FD = 512
_PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None, use_errno=True)  # loaded once here, not in each forked child


@dataclass(frozen=True)
class SpawnRequest:
    """Start `argv` with `env`; the descriptors sent with the request become `fd_targets` in the child."""

    request_id: int
    argv: list[str]
    env: dict[str, str]
    fd_targets: list[int]
    uid: int | None = None  # drop to this uid (and gid `gid`, no supplementary groups) before exec
    gid: int | None = None
    cgroup_procs: list[str] = field(default_factory=list)  # joined first, while still privileged
    cpus: list[int] | None = None
    nice: int = 0
    rlimits: list[tuple[int, int, int]] = field(default_factory=list)  # (resource.RLIMIT_*, soft, hard)
    new_session: bool = True
    kind: str = "spawn"


@dataclass(frozen=True)
class Spawned:
    request_id: int
    pid: int
    kind: str = "spawned"


@dataclass(frozen=True)
class SpawnFailed:
    request_id: int
    error: str
    kind: str = "spawn_failed"


@dataclass(frozen=True)
class Exited:
    pid: int
    returncode: int  # as subprocess.Popen.returncode: negative for a signal
    kind: str = "exited"


Reply = Spawned | SpawnFailed | Exited
_REPLIES = {"spawned": Spawned, "spawn_failed": SpawnFailed, "exited": Exited}


def encode(message: SpawnRequest | Reply) -> bytes:
    return json.dumps(asdict(message)).encode()


def decode_request(data: bytes) -> SpawnRequest:
    fields = json.loads(data)
    if not isinstance(fields, dict) or fields.get("kind") != "spawn":
        raise ValueError("not a spawn request")
    fields["rlimits"] = [tuple(limit) for limit in fields.get("rlimits", [])]
    return SpawnRequest(**fields)


def decode_reply(data: bytes) -> Reply:
    fields = json.loads(data)
    kind = fields.get("kind") if isinstance(fields, dict) else None
    if kind not in _REPLIES:
        raise ValueError(f"unknown reply {kind!r}")
    return _REPLIES[kind](**fields)


# ---- the spawner process ------------------------------------------------------------------------

def _child(request: SpawnRequest, fds: list[int], error_fd: int, spawner_pid: int) -> None:
    """In the forked child: set up, then exec. Raises on failure (the caller reports and exits)."""
    signal.set_wakeup_fd(-1)
    for number in (signal.SIGCHLD, signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT):
        signal.signal(number, signal.SIG_DFL)  # Python ignores SIGPIPE/SIGXFSZ; an exec keeps ignored signals
    moved = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, _HIGH_FD) for fd in fds]
    for fd in fds:
        os.close(fd)
    for source, target in zip(moved, request.fd_targets, strict=True):
        os.dup2(source, target, inheritable=True)
    keep = set(request.fd_targets) | {error_fd}
    for fd in _open_fds():
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass
    if request.new_session:
        os.setsid()
    for path in request.cgroup_procs:
        with open(path, "w") as handle:
            handle.write(str(os.getpid()))
    if request.cpus:
        os.sched_setaffinity(0, request.cpus)
    if request.nice > 0:
        os.nice(request.nice)
    for limit, soft, hard in request.rlimits:
        resource.setrlimit(limit, (soft, hard))
    if request.gid is not None:
        os.setgroups([])
        os.setresgid(request.gid, request.gid, request.gid)
    if request.uid is not None:
        os.setresuid(request.uid, request.uid, request.uid)
    # Last before exec: a change of uid or gid clears the parent-death signal (prctl(2)); exec keeps it.
    if _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != spawner_pid:  # the spawner died before the signal was armed: nobody supervises this
        os._exit(0)
    if "/" in request.argv[0]:
        os.execve(request.argv[0], request.argv, request.env)
    os.execvpe(request.argv[0], request.argv, request.env)


def _open_fds() -> list[int]:
    return [int(name) for name in os.listdir("/proc/self/fd") if name.isdigit()]


def spawn(request: SpawnRequest, fds: list[int]) -> int:
    """Fork and exec one child; its pid. OSError with the child's own reason when set-up or exec failed."""
    if len(fds) != len(request.fd_targets):
        raise OSError(errno.EINVAL, f"{len(fds)} descriptors sent for {len(request.fd_targets)} targets")
    error_read, error_write = os.pipe2(os.O_CLOEXEC)
    spawner_pid = os.getpid()
    pid = os.fork()
    if pid == 0:  # the child: one thread, so running Python here is safe
        try:
            os.close(error_read)
            report_fd = fcntl.fcntl(error_write, fcntl.F_DUPFD_CLOEXEC, _HIGH_FD + MAX_FDS)
            os.close(error_write)
        except BaseException:  # noqa: BLE001
            os._exit(127)
        try:
            _child(request, fds, report_fd, spawner_pid)  # returns only by raising: on success it has exec'd
        except BaseException as exc:  # noqa: BLE001 - every failure is reported to the supervisor
            try:
                os.write(report_fd, f"{type(exc).__name__}: {exc}".encode()[:4000])
            finally:
                os._exit(127)
        os._exit(127)
    os.close(error_write)
    chunks = []
    while chunk := os.read(error_read, 4096):  # end of file: exec'd (the pipe closed on exec) or failed
        chunks.append(chunk)
    os.close(error_read)
    if chunks:
        os.waitpid(pid, 0)
        raise OSError(errno.ECHILD, b"".join(chunks).decode("utf-8", "replace"))
    return pid


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        sock.send(encode(Exited(pid, os.waitstatus_to_exitcode(status))))


def serve(sock: socket.socket) -> int:
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_read, False)
    os.set_blocking(wake_write, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so that the wake-up fd hears SIGCHLD
    signal.set_wakeup_fd(wake_write)
    selector = selectors.DefaultSelector()
    selector.register(sock, selectors.EVENT_READ)
    selector.register(wake_read, selectors.EVENT_READ)
    while True:
        for key, _ in selector.select():
            if key.fileobj is not sock:
                try:
                    while os.read(wake_read, 512):
                        pass
                except BlockingIOError:
                    pass
                _reap(sock)
                continue
            data, fds, _flags, _address = socket.recv_fds(sock, MAX_MESSAGE_BYTES, MAX_FDS)
            if not data:
                return 0  # the supervisor is gone
            request_id = -1
            try:
                request = decode_request(data)
                request_id = request.request_id
                reply: Reply = Spawned(request_id, spawn(request, fds))
            except (OSError, ValueError, TypeError) as exc:
                reply = SpawnFailed(request_id, str(exc) or type(exc).__name__)
            finally:
                for fd in fds:
                    os.close(fd)
            sock.send(encode(reply))
        _reap(sock)


def main(argv: list[str]) -> int:
    fd = int(argv[1])
    os.set_inheritable(fd, False)
    sock = socket.socket(fileno=fd)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_BUFFER_BYTES)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER_BYTES)
    try:
        return serve(sock)
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
