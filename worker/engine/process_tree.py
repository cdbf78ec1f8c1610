"""A process and everything below it, read from /proc (a sandbox's tree: bwrap, its init, the runner)."""

from __future__ import annotations

import os
import signal
import time


def descendants(root: int) -> list[int]:
    """`root` and every process below it (by each process's parent in /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                stat = handle.read()
        except OSError:
            continue
        # The command name may hold spaces and parentheses: the fields after its last ')' are fixed.
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def tree_cpu_s(root: int | None) -> float | None:
    """CPU seconds a process tree has used so far (each process's own, user and system, and its reaped
    children's); None without a root or where /proc shows none of it."""
    if root is None:
        return None
    ticks, total, seen = os.sysconf("SC_CLK_TCK"), 0, False
    for pid in descendants(root):
        fields = _stat_fields(pid)
        if len(fields) > 14:  # utime, stime, cutime, cstime: the 14th-17th fields, after the name's ')'
            total += sum(int(value) for value in fields[11:15])
            seen = True
    return total / ticks if seen else None


# Rounds of "find the tree's processes not stopped yet, stop them": one a process forked before its parent
# stopped shows up in the next; a tree still growing after this many is left as stopped as it got.
STOP_ROUNDS = 64
# A signalled process stops when the kernel next has it (on another core: within microseconds; in a driver
# call: when the call returns). How long the stop waits for each to say so.
STOP_WAIT_S = 1.0


def _stat_fields(pid: int) -> list[str]:
    """The fields of /proc/<pid>/stat after the command name (state, parent, ...); [] when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[-1].split()
    except OSError:
        return []


def _parent_of(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[1]) if len(fields) > 1 else None


def _stopped(pid: int) -> bool:
    fields = _stat_fields(pid)
    return not fields or fields[0] in ("T", "t", "Z", "X")


class StoppedTree:
    """`root` and every process below it stopped with SIGSTOP until `resume` (SIGCONT).

    Each process is held by a pidfd opened before it is signalled, and signalled only when its parent is
    `root` or one already held: a pid that was reused by another process between the listing and the
    pidfd is never signalled, and one reused after it cannot be (the pidfd names the process, not the number)."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.fds: dict[int, int] = {}
        try:
            self._stop()
        except BaseException:
            self.resume()
            raise

    def _stop(self) -> None:
        for _ in range(STOP_ROUNDS):
            new = [pid for pid in descendants(self.root) if pid not in self.fds]
            if not new:
                break
            for pid in new:
                try:
                    fd = os.pidfd_open(pid)
                except OSError:
                    continue  # gone already
                if pid != self.root and _parent_of(pid) not in self.fds:
                    os.close(fd)
                    continue
                self.fds[pid] = fd
                try:
                    signal.pidfd_send_signal(fd, signal.SIGSTOP)
                except OSError:
                    pass  # exited meanwhile
        deadline = time.monotonic() + STOP_WAIT_S
        waiting = list(self.fds)
        while waiting and time.monotonic() < deadline:
            waiting = [pid for pid in waiting if not _stopped(pid)]
            if waiting:
                os.sched_yield()  # the kernel's own transition, not another thread's work

    @property
    def count(self) -> int:
        return len(self.fds)

    def resume(self) -> None:
        fds, self.fds = self.fds, {}
        for fd in fds.values():
            try:
                signal.pidfd_send_signal(fd, signal.SIGCONT)
            except OSError:
                pass
            finally:
                os.close(fd)
