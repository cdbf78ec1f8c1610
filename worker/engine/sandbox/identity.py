"""Who a sandbox runs as on the host, and what caps its processes and threads.

RLIMIT_NPROC counts the tasks (processes and threads) of a real uid, and the kernel never applies
it to uid 0. A sandbox that root starts runs, through its user namespace, as host root: without
more, a root-run service has no cap on a candidate's processes or threads. So:

- **Not root.** The sandbox runs as the supervisor's uid; RLIMIT_NPROC is what that uid already
  runs plus the sandbox's allowance.
- **Root, `uid`.** Each sandbox runs as an unprivileged uid of its own, taken from a configured
  range and held for the sandbox's life with an flock on `<lock dir>/<uid>` (unique across threads
  and processes on the host; the kernel releases it when its holder dies). RLIMIT_NPROC then counts
  that sandbox's tasks only, and host files only root may read are out of its reach. bwrap mounts
  as that uid, so every folder on the way to what it mounts must be passable by others (o+x) and
  what it mounts readable (o+r).
- **Root, `cgroup`.** The sandbox runs as mapped root inside a pids cgroup of its own (pids.max).
- **Root, `auto`** (default): `uid` when everything the sandbox mounts is reachable by an
  unprivileged uid, else `cgroup` (logging which path kept it from `uid`), else an error naming both.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import itertools
import logging
import os
import random
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .spec import IsolationConfig

log = logging.getLogger(__name__)

CGROUP_PARENT = "kerneljudge-sandboxes"
_cgroup_names = itertools.count()
_warned: set[str] = set()
_warn_lock = threading.Lock()


class IsolationError(RuntimeError):
    """No way to cap this sandbox's processes was available (the caller reports it as SandboxUnavailable)."""


@dataclass
class SandboxIdentity:
    kind: str  # self | uid | cgroup
    nproc: int  # RLIMIT_NPROC for the sandbox's processes
    uid: int | None = None  # host uid (and gid) the sandbox runs as; None: the supervisor's own
    cgroup: Path | None = None
    lock_fd: int | None = None

    def popen_arguments(self) -> dict:
        """subprocess.Popen arguments that start bwrap as the sandbox's uid (none: as the supervisor)."""
        if self.uid is None:
            return {}
        return {"user": self.uid, "group": self.uid, "extra_groups": []}

    def join_cgroup(self) -> None:
        """In the child, before exec: it and everything it starts count against the cgroup's pids.max."""
        if self.cgroup is not None:
            fd = os.open(self.cgroup / "cgroup.procs", os.O_WRONLY)
            try:
                os.write(fd, str(os.getpid()).encode())
            finally:
                os.close(fd)

    def release(self) -> None:
        """After the sandbox's processes are gone: free the uid or remove the cgroup."""
        if self.lock_fd is not None:
            os.close(self.lock_fd)
            self.lock_fd = None
        if self.cgroup is not None:
            _remove_cgroup(self.cgroup)
            self.cgroup = None


def acquire(config: IsolationConfig, host_paths: list[str], allowance: int) -> SandboxIdentity:
    """The identity one sandbox starts with; `host_paths`: everything bwrap will open for it."""
    if os.geteuid() != 0:
        return SandboxIdentity("self", count_tasks_of(os.getuid()) + allowance)
    blocked = None if config.mode == "cgroup" else first_unreachable(host_paths)
    if config.mode == "uid" or (config.mode == "auto" and blocked is None):
        if blocked is not None:
            raise IsolationError(f"the sandbox cannot run as an unprivileged uid: {blocked}")
        return _take_uid(config, allowance)
    try:
        identity = _make_cgroup(allowance)
    except (OSError, IsolationError) as exc:
        reason = f"no pids cgroup could be made ({exc})"
        if blocked is not None:
            reason = f"it cannot run as an unprivileged uid ({blocked}) and {reason}"
        raise IsolationError(f"the sandbox's processes and threads cannot be capped for a root-run service: "
                             f"{reason}") from None
    if blocked is not None:
        _warn_once(blocked, "sandboxes run as mapped root inside a pids cgroup, not as unprivileged uids: "
                            f"{blocked}")
    return identity


def count_tasks_of(uid: int) -> int:
    """Processes and threads the host runs as `uid`."""
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    count += len(os.listdir(f"/proc/{entry}/task"))
            except OSError:
                continue
    return count


# -- uid ----------------------------------------------------------------------------------
def first_unreachable(paths: list[str]) -> str | None:
    """The first path a uid that owns nothing cannot reach, with the fix; None if all are reachable."""
    for path in dict.fromkeys(paths):
        for form in dict.fromkeys((path, os.path.realpath(path))):
            problem = _unreachable(form)
            if problem:
                return f"{problem} (needed for {path}); make it reachable (chmod o+x on folders, o+r on " \
                       "files) or set KERNELJUDGE_SANDBOX_ISOLATION=cgroup"
    return None


def _unreachable(path: str) -> str | None:
    current = Path("/")
    for part in Path(path).parts[1:]:
        try:
            mode = os.stat(current).st_mode
        except OSError:
            return None  # a path that does not exist is bwrap's error to report, not this one's
        if not mode & stat.S_IXOTH:
            return f"{current} is not passable by other users (mode {oct(mode & 0o7777)})"
        current = current / part
    try:
        mode = os.stat(current).st_mode
    except OSError:
        return None
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return None  # device nodes: the sandbox's own check decides what it can open
    needed = stat.S_IROTH | (stat.S_IXOTH if stat.S_ISDIR(mode) else 0)
    if mode & needed != needed:
        return f"{current} is not readable by other users (mode {oct(mode & 0o7777)})"
    return None


def _lock_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != 0 or info.st_mode & 0o022:
        raise IsolationError(f"{path} must be a folder owned by root that only root can write")
    return path


def _take_uid(config: IsolationConfig, allowance: int) -> SandboxIdentity:
    lock_dir = _lock_dir(config.lock_dir)
    busy = _uids_with_tasks()
    offset = random.randrange(config.uid_count)
    for step in range(config.uid_count):
        uid = config.uid_first + (offset + step) % config.uid_count
        if uid in busy:
            continue  # a process left from before (it would count against this sandbox's cap)
        fd = os.open(lock_dir / str(uid), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return SandboxIdentity("uid", allowance, uid=uid, lock_fd=fd)
    last = config.uid_first + config.uid_count - 1
    raise IsolationError(f"all {config.uid_count} sandbox uids ({config.uid_first}-{last}) are in use; "
                         "widen KERNELJUDGE_SANDBOX_UIDS")


def _uids_with_tasks() -> set[int]:
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                found.add(os.stat(f"/proc/{entry}").st_uid)
            except OSError:
                continue
    return found


# -- pids cgroup --------------------------------------------------------------------------
@functools.cache
def _pids_hierarchy() -> tuple[Path, bool]:
    """(mount point, unified) of the cgroup hierarchy with the pids controller."""
    unified = None
    with open("/proc/self/mounts") as mounts:
        for line in mounts:
            fields = line.split()
            if len(fields) < 4:
                continue
            mount, fstype, options = Path(fields[1]), fields[2], fields[3].split(",")
            if fstype == "cgroup" and "pids" in options:
                return mount, False
            if fstype == "cgroup2" and unified is None:
                unified = mount
    if unified is not None and "pids" in (unified / "cgroup.controllers").read_text().split():
        return unified, True
    raise IsolationError("no cgroup hierarchy with the pids controller is mounted")


def _make_cgroup(allowance: int) -> SandboxIdentity:
    root, unified = _pids_hierarchy()
    parent = root / CGROUP_PARENT
    parent.mkdir(exist_ok=True)
    if unified:
        for group in (root, parent):  # cgroup v2: children get pids.max only where the parent delegates it
            control = group / "cgroup.subtree_control"
            if "pids" not in control.read_text().split():
                control.write_text("+pids")
    _remove_stale(parent)
    group = parent / f"{os.getpid()}-{next(_cgroup_names)}"
    group.mkdir()
    try:
        (group / "pids.max").write_text(str(allowance))
    except OSError:
        group.rmdir()
        raise
    return SandboxIdentity("cgroup", count_tasks_of(os.getuid()) + allowance, cgroup=group)


@functools.cache
def _remove_stale(parent: Path) -> None:
    """Once per process: empty cgroups left by supervisors that died (their pid is in the name)."""
    for group in parent.iterdir():
        pid = group.name.split("-")[0]
        if group.is_dir() and pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            try:
                group.rmdir()
            except OSError:
                pass


def _remove_cgroup(group: Path) -> None:
    # The sandbox's processes are reaped when this runs; the kernel may still be finishing their exit.
    for _ in range(100):
        try:
            group.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY:
                break
            time.sleep(0.01)
    log.warning("could not remove the sandbox cgroup %s", group)


def _warn_once(key: str, message: str) -> None:
    with _warn_lock:
        if key in _warned:
            return
        _warned.add(key)
    log.warning(message)
