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

Memory: RLIMIT_AS caps one process's address space, and not memory that outlives a mapping (a memfd,
tmpfs or shm pages written by a child that lowered its own limit). So, for a root-run service with a
memory controller (cgroup v1 `memory` hierarchy, or v2 with `memory` in cgroup.controllers), every
sandbox of either root mode also gets a memory cgroup of its own with a hard cap on everything it and
its descendants are charged for (v1: memory.limit_in_bytes and memory.memsw.limit_in_bytes, swappiness
0; v2: memory.max, memory.swap.max 0, memory.oom.group 1). Over the cap the kernel OOM-kills inside that
cgroup only. On cgroup v2 (one hierarchy) a `cgroup` sandbox's pids and memory caps are one folder; on
v1 they are a folder in each hierarchy. Not root, or no memory controller: logged once, not capped.

Pausing: a root-run service also gives every sandbox a cgroup it can freeze whole (v1: a folder in the
`freezer` hierarchy, `freezer.state`; v2: the sandbox's own cgroup, or one made for it, `cgroup.freeze`),
so that none of a candidate's processes runs while the reference is timed (`freeze`, `thaw`;
SandboxProcess.paused). Without one (not root, no freezer) the sandbox's processes are stopped by signal.
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

from worker.engine.sandbox.spec import IsolationConfig

log = logging.getLogger(__name__)

CGROUP_PARENT = "kerneljudge-sandboxes"
MEMORY_WARNING = "memory-not-capped"  # the _warn_once key of every reason a sandbox's memory is not capped
FREEZER_WARNING = "not-freezable"
_cgroup_names = itertools.count()
_warned: set[str] = set()
_warn_lock = threading.Lock()


@dataclass(frozen=True)
class MemoryOutcome:
    """A sandbox's memory cgroup at its end: the kernel's OOM kills inside it and its peak, against its cap."""

    cap_bytes: int
    oom_kills: int
    peak_bytes: int | None  # None where the kernel keeps no peak (cgroup v2 before Linux 5.19)

    def describe(self) -> str:
        peak = f", peak {_size(self.peak_bytes)}" if self.peak_bytes is not None else ""
        return (f"it went over the sandbox's memory cap of {_size(self.cap_bytes)} (the kernel's OOM killer{peak}; "
                f"KERNELJUDGE_SANDBOX_MEMORY sets the cap)")


def _size(nbytes: int) -> str:
    return f"{nbytes / 1024**3:.1f} GiB" if nbytes >= 1024**3 else f"{nbytes / 1024**2:.0f} MiB"


def read_memory_outcome(group: Path, cap_bytes: int) -> MemoryOutcome:
    """OOM kills (v2 memory.events, v1 memory.oom_control: `oom_kill N`) and the peak (v2 memory.peak, v1
    memory.max_usage_in_bytes) of a memory cgroup; what the kernel does not offer reads as 0 or None."""
    kills = 0
    for name in ("memory.events", "memory.oom_control"):
        try:
            lines = (group / name).read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                kills = int(value)
        break
    peak = None
    for name in ("memory.peak", "memory.max_usage_in_bytes"):
        try:
            peak = int((group / name).read_text().split()[0])
            break
        except (OSError, ValueError, IndexError):
            continue
    return MemoryOutcome(cap_bytes, kills, peak)


class IsolationError(RuntimeError):
    """No way to cap this sandbox's processes was available (the caller reports it as SandboxUnavailable)."""


@dataclass
class SandboxIdentity:
    kind: str  # self | uid | cgroup
    nproc: int  # RLIMIT_NPROC for the sandbox's processes
    uid: int | None = None  # host uid (and gid) the sandbox runs as; None: the supervisor's own
    cgroup: Path | None = None  # its pids cgroup (kind `cgroup`)
    lock_fd: int | None = None
    # Its memory cgroup (root with a memory controller, kinds `uid` and `cgroup`); on cgroup v2 a
    # `cgroup` sandbox's memory cgroup is its pids cgroup.
    memory_cgroup: Path | None = None
    # The cgroup that freezes it whole (root with a freezer; on v2 possibly one of the above) and its kind.
    freezer_cgroup: Path | None = None
    freezer_unified: bool = False
    memory_cap_bytes: int | None = None  # the memory cgroup's cap (memory_cgroup set)

    def memory_outcome(self) -> MemoryOutcome | None:
        """What the memory cgroup saw (read while it still exists, before `release`); None without one."""
        if self.memory_cgroup is None or self.memory_cap_bytes is None:
            return None
        return read_memory_outcome(self.memory_cgroup, self.memory_cap_bytes)

    def cgroups(self) -> list[Path]:
        """Every cgroup of the sandbox, each once."""
        return list(dict.fromkeys(group for group in (self.cgroup, self.memory_cgroup, self.freezer_cgroup)
                                  if group is not None))

    def cgroup_procs_files(self) -> list[Path]:
        """`cgroup.procs` files the sandbox's first process joins before exec (as root, before it drops to
        `uid`): it and everything it starts are counted and capped there (one per hierarchy)."""
        return [group / "cgroup.procs" for group in self.cgroups()]

    def release(self) -> None:
        """After the sandbox's processes are gone: free the uid and remove the cgroups."""
        if self.lock_fd is not None:
            os.close(self.lock_fd)
            self.lock_fd = None
        for group in self.cgroups():
            _remove_cgroup(group)
        self.cgroup = self.memory_cgroup = self.freezer_cgroup = None


def acquire(config: IsolationConfig, host_paths: list[str], allowance: int,
            memory_bytes: int | None = None) -> SandboxIdentity:
    """The identity one sandbox starts with; `host_paths`: everything bwrap will open for it;
    `memory_bytes`: the cap on everything the sandbox's processes are charged for (None: none)."""
    if os.geteuid() != 0:
        if memory_bytes is not None:
            _warn_once(MEMORY_WARNING, "sandbox memory is not capped: the service does not run as root (a "
                                       "memory cgroup per sandbox needs root); only RLIMIT_AS and the tmpfs "
                                       "sizes hold")
        return SandboxIdentity("self", count_tasks_of(os.getuid()) + allowance)
    blocked = None if config.mode == "cgroup" else first_unreachable(host_paths)
    if config.mode == "uid" or (config.mode == "auto" and blocked is None):
        if blocked is not None:
            raise IsolationError(f"the sandbox cannot run as an unprivileged uid: {blocked}")
        identity = _take_uid(config, allowance)
    else:
        try:
            identity = _make_cgroup(allowance)
        except (OSError, IsolationError) as exc:
            reason = f"no pids cgroup could be made ({exc})"
            if blocked is not None:
                reason = f"it cannot run as an unprivileged uid ({blocked}) and {reason}"
            raise IsolationError(f"the sandbox's processes and threads cannot be capped for a root-run "
                                 f"service: {reason}") from None
        if blocked is not None:
            _warn_once(blocked, "sandboxes run as mapped root inside a pids cgroup, not as unprivileged uids: "
                                f"{blocked}")
    try:
        if memory_bytes is not None:
            _cap_memory(identity, memory_bytes)
        _add_freezer(identity)
    except BaseException:
        identity.release()
        raise
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


# -- cgroups ------------------------------------------------------------------------------
@functools.cache
def _hierarchy(controller: str) -> tuple[Path, bool]:
    """(mount point, unified) of the cgroup hierarchy with `controller` (a v1 one first, else v2)."""
    unified = None
    with open("/proc/self/mounts") as mounts:
        for line in mounts:
            fields = line.split()
            if len(fields) < 4:
                continue
            mount, fstype, options = Path(fields[1]), fields[2], fields[3].split(",")
            if fstype == "cgroup" and controller in options:
                return mount, False
            if fstype == "cgroup2" and unified is None:
                unified = mount
    if unified is not None and controller in (unified / "cgroup.controllers").read_text().split():
        return unified, True
    raise IsolationError(f"no cgroup hierarchy with the {controller} controller is mounted")


def _sandbox_parent(controller: str) -> tuple[Path, bool]:
    """`<hierarchy>/kerneljudge-sandboxes`, where sandbox cgroups with `controller` are made, and whether
    the hierarchy is cgroup v2; stale groups of dead supervisors in it are removed (once per process)."""
    root, unified = _hierarchy(controller)
    parent = root / CGROUP_PARENT
    parent.mkdir(exist_ok=True)
    if unified:  # cgroup v2: children get a controller's files only where their parent delegates it
        for group in (root, parent):
            control = group / "cgroup.subtree_control"
            if controller not in control.read_text().split():
                control.write_text(f"+{controller}")
    _remove_stale(parent)
    return parent, unified


def _group_name() -> str:
    """`<supervisor pid>-<n>`: unique on the host, and names the supervisor for stale-group cleanup."""
    return f"{os.getpid()}-{next(_cgroup_names)}"


# -- pids cgroup --------------------------------------------------------------------------
def _make_cgroup(allowance: int) -> SandboxIdentity:
    parent, _ = _sandbox_parent("pids")
    group = parent / _group_name()
    group.mkdir()
    try:
        (group / "pids.max").write_text(str(allowance))
    except OSError:
        group.rmdir()
        raise
    return SandboxIdentity("cgroup", count_tasks_of(os.getuid()) + allowance, cgroup=group)


# -- memory cgroup ------------------------------------------------------------------------
def memory_limit_files(unified: bool, memory_bytes: int) -> list[tuple[str, str, bool]]:
    """(file, value, required) written into a sandbox's memory cgroup, in order. An optional file the
    kernel does not offer (no swap accounting) is skipped."""
    if unified:
        return [("memory.max", str(memory_bytes), True),
                ("memory.swap.max", "0", False),  # no swap: the cap is the sandbox's memory, all of it
                ("memory.oom.group", "1", False)]  # over the cap, the whole sandbox is killed together
    # v1: memsw (memory + swap) must be set after, and be at least, the memory limit; equal, swap
    # cannot extend the cap; swappiness 0 keeps the group's memory out of swap.
    return [("memory.limit_in_bytes", str(memory_bytes), True),
            ("memory.memsw.limit_in_bytes", str(memory_bytes), False),
            ("memory.swappiness", "0", False)]


def _cap_memory(identity: SandboxIdentity, memory_bytes: int) -> None:
    """Give the sandbox a memory cgroup capped at `memory_bytes`; where none can be made, log once and
    leave its memory uncapped."""
    try:
        parent, unified = _sandbox_parent("memory")
    except (OSError, IsolationError) as exc:
        _warn_once(MEMORY_WARNING, f"sandbox memory is not capped: {exc}")
        return
    # One hierarchy (cgroup v2, or v1 with pids and memory mounted together): one cgroup for both caps,
    # since a process is in one cgroup per hierarchy.
    shared = identity.cgroup is not None and identity.cgroup.parent == parent
    group = identity.cgroup if identity.cgroup is not None and shared else parent / _group_name()
    made = False
    try:
        if not shared:
            group.mkdir()
            made = True
        for name, value, required in memory_limit_files(unified, memory_bytes):
            if not required and not (group / name).exists():
                continue
            try:
                (group / name).write_text(value)
            except OSError as exc:
                if required:
                    raise
                _warn_once(f"memory-{name}", f"sandbox memory cgroups: {name} could not be set to {value} "
                                             f"({exc}); the cap holds without it")
    except OSError as exc:
        if made:
            _remove_cgroup(group)
        _warn_once(MEMORY_WARNING, f"sandbox memory is not capped: no memory cgroup could be made in {parent} "
                                   f"({exc})")
        return
    identity.memory_cgroup = group
    identity.memory_cap_bytes = memory_bytes


@functools.cache
def _remove_stale(parent: Path) -> None:
    """Once per process: empty cgroups left by supervisors that died (their pid is in the name); a frozen
    one is thawed first, so that what is left in it can die."""
    for group in parent.iterdir():
        pid = group.name.split("-")[0]
        if group.is_dir() and pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            for name, value in (("freezer.state", "THAWED"), ("cgroup.freeze", "0")):
                try:
                    (group / name).write_text(value)
                except OSError:
                    pass
            try:
                group.rmdir()
            except OSError:
                pass


# -- freezer --------------------------------------------------------------------------------
@functools.cache
def _freezer_hierarchy() -> tuple[Path, bool]:
    """(mount point, unified): the v1 `freezer` hierarchy, else the v2 one (every non-root v2 cgroup
    has `cgroup.freeze`)."""
    unified = None
    with open("/proc/self/mounts") as mounts:
        for line in mounts:
            fields = line.split()
            if len(fields) < 4:
                continue
            if fields[2] == "cgroup" and "freezer" in fields[3].split(","):
                return Path(fields[1]), False
            if fields[2] == "cgroup2" and unified is None:
                unified = Path(fields[1])
    if unified is None:
        raise IsolationError("no cgroup freezer (v1) and no cgroup v2 hierarchy is mounted")
    return unified, True


def _freeze_file(unified: bool) -> str:
    return "cgroup.freeze" if unified else "freezer.state"


def _add_freezer(identity: SandboxIdentity) -> None:
    """Give the sandbox a cgroup that freezes it whole; where none can be had, log once (its processes
    are then paused by signal)."""
    try:
        root, unified = _freezer_hierarchy()
    except (OSError, IsolationError) as exc:
        _warn_once(FREEZER_WARNING, f"sandboxes have no freezer cgroup ({exc}); a candidate's processes are "
                                    "stopped by signal while the reference is timed")
        return
    # On v2 a process is in one cgroup: the sandbox's own, where it has one, is the one to freeze.
    own = [group for group in identity.cgroups() if unified and group.is_relative_to(root)]
    if own:
        if (own[0] / "cgroup.freeze").exists():
            identity.freezer_cgroup, identity.freezer_unified = own[0], True
        else:
            _warn_once(FREEZER_WARNING, f"sandboxes have no freezer cgroup ({own[0]} has no cgroup.freeze: a "
                                        "kernel before 5.2); a candidate's processes are stopped by signal "
                                        "while the reference is timed")
        return
    group = None
    try:
        parent = root / CGROUP_PARENT
        parent.mkdir(exist_ok=True)
        _remove_stale(parent)
        group = parent / _group_name()
        group.mkdir()
        if not (group / _freeze_file(unified)).exists():
            raise OSError(f"{group} has no {_freeze_file(unified)}")
    except OSError as exc:
        if group is not None and group.exists():
            _remove_cgroup(group)
        _warn_once(FREEZER_WARNING, f"sandboxes have no freezer cgroup ({exc}); a candidate's processes are "
                                    "stopped by signal while the reference is timed")
        return
    identity.freezer_cgroup, identity.freezer_unified = group, unified


def freeze(group: Path, unified: bool, wait_s: float) -> bool:
    """Freeze every process of the cgroup; True once the kernel says all are frozen (within `wait_s`)."""
    (group / _freeze_file(unified)).write_text("1" if unified else "FROZEN")
    deadline = time.monotonic() + wait_s
    while True:
        if unified:
            done = "frozen 1" in (group / "cgroup.events").read_text().splitlines()
        else:
            done = (group / "freezer.state").read_text().strip() == "FROZEN"
        if done:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.0002)  # the kernel's own transition (v1 FREEZING), not a wait for another thread


def thaw(group: Path, unified: bool) -> None:
    """Let the cgroup's processes run again (a removed cgroup has none left: nothing to do)."""
    try:
        (group / _freeze_file(unified)).write_text("0" if unified else "THAWED")
    except FileNotFoundError:
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
