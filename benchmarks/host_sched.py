"""Where the host's CPU time goes during a batch, and how long each kind of work waited for a core.

Every `every_s` the sampler reads each thread's /proc/PID/task/TID/stat (its name) and schedstat (nanoseconds
run on a core, nanoseconds runnable but waiting in a run queue) and keeps the latest. At the end, per class of
thread, CPU seconds and run-queue seconds since the sampler started. A thread's class is its sandbox's role,
read once per process from the KJ_ROLE and KJ_MODE the service puts in every sandbox's environment (inherited
by what the sandbox starts: a build's compilers are "build"): "judge", "runner" (a candidate's), "build",
"baseline" (the judge that measures a problem's torch.compile baseline in the background, KJ_PURPOSE); else
"server" (the service's own process) or "other" (the spawner, the benchmark, the system). A class whose waiting
seconds rival its CPU seconds is starved of cores.

A thread that ends between two samples loses what it ran since the last one (a compiler of a second or two
is mostly seen); the figures are lower bounds, measured the same way for every class.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

PROC = Path("/proc")


@dataclass
class ClassTotals:
    cpu_s: float = 0.0
    wait_s: float = 0.0
    threads: int = 0
    by_name: dict[str, list[float]] = field(default_factory=dict)  # thread name -> [CPU s, waiting s]

    def line(self, name: str) -> str:
        top = sorted(self.by_name.items(), key=lambda item: -item[1][0])[:6]
        names = ", ".join(f"{comm} {cpu:.0f}/{wait:.0f}" for comm, (cpu, wait) in top)
        ratio = self.wait_s / self.cpu_s if self.cpu_s > 0 else 0.0
        return (f"{name}: {self.cpu_s:.0f} CPU s, {self.wait_s:.0f} s runnable but waiting ({ratio:.2f} s a CPU s), "
                f"{self.threads} threads (CPU s / waiting s by name: {names})")


CLASSES = ("build", "judge", "runner", "baseline", "server", "other")
ROLES = {("reference", "run"): "judge", ("candidate", "run"): "runner", ("candidate", "build"): "build"}


def read_thread(task: Path) -> tuple[str, int, int] | None:
    """(name, run ns, wait ns) of one thread; None if it is gone or unreadable."""
    try:
        stat = (task / "stat").read_text()
        sched = (task / "schedstat").read_text().split()
    except OSError:
        return None
    try:
        return stat[stat.index("(") + 1:stat.rindex(")")], int(sched[0]), int(sched[1])
    except (ValueError, IndexError):
        return None


def sandbox_role(process: Path) -> str | None:
    """The role the service gave the sandbox this process runs in (KJ_ROLE, KJ_MODE); None outside one."""
    try:
        variables = dict(item.split("=", 1) for item in (process / "environ").read_text(errors="replace")
                         .split("\0") if "=" in item)
    except OSError:
        return None
    if "KJ_ROLE" not in variables:
        return None
    if variables.get("KJ_PURPOSE") == "compile-baseline":  # worker/engine/timing/baseline_worker.py
        return "baseline"
    return ROLES.get((variables["KJ_ROLE"], variables.get("KJ_MODE", "run")), "other")


class SchedSampler:
    """Samples every thread of the host in a background thread while entered (see the module's docstring)."""

    def __init__(self, server_pid: int | None = None, every_s: float = 2.0):
        self.server_pid, self.every_s = server_pid, every_s
        self._start: dict[tuple[str, str], tuple[int, int]] = {}  # (pid, tid) -> run, wait ns at the start
        self._last: dict[tuple[str, str], tuple[str, str, int, int]] = {}  # -> class, name, run, wait ns
        self._roles: dict[str, str | None] = {}  # pid -> its sandbox's role, read once
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="sched-sampler")
        self.available = (PROC / "self" / "schedstat").exists()

    def __enter__(self) -> SchedSampler:
        if self.available:
            for key, (_, _, run, wait) in self._sample().items():
                self._start[key] = (run, wait)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(30)

    def _class(self, process: Path) -> str:
        if self.server_pid is not None and process.name == str(self.server_pid):
            return "server"
        if process.name not in self._roles:
            self._roles[process.name] = sandbox_role(process)
        return self._roles[process.name] or "other"

    def _sample(self) -> dict[tuple[str, str], tuple[str, str, int, int]]:
        seen: dict[tuple[str, str], tuple[str, str, int, int]] = {}
        for process in PROC.iterdir():
            if not process.name.isdigit():
                continue
            try:
                tasks = list((process / "task").iterdir())
            except OSError:
                continue
            klass = self._class(process)
            for task in tasks:
                read = read_thread(task)
                if read is not None:
                    name, run, wait = read
                    seen[(process.name, task.name)] = (klass, name, run, wait)
        return seen

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            self._last.update(self._sample())
        self._last.update(self._sample())

    def totals(self) -> dict[str, ClassTotals]:
        out: dict[str, ClassTotals] = {}
        for key, (klass, name, run, wait) in self._last.items():
            run0, wait0 = self._start.get(key, (0, 0))
            cpu_s, wait_s = (run - run0) / 1e9, (wait - wait0) / 1e9
            if cpu_s <= 0 and wait_s <= 0:
                continue
            entry = out.setdefault(klass, ClassTotals())
            entry.cpu_s += cpu_s
            entry.wait_s += wait_s
            entry.threads += 1
            by_name = entry.by_name.setdefault(name, [0.0, 0.0])
            by_name[0] += cpu_s
            by_name[1] += wait_s
        return out

    def process(self, pid: int) -> tuple[str, float] | None:
        """(class, CPU seconds since the start) of one process's threads as last seen; None if never seen."""
        seen = [(klass, run - self._start.get(key, (0, 0))[0]) for key, (klass, _, run, _) in self._last.items()
                if key[0] == str(pid)]
        return (seen[0][0], sum(ns for _, ns in seen) / 1e9) if seen else None

    def summary(self) -> str:
        """One line per class; empty where the kernel keeps no schedstat."""
        if not self.available:
            return ""
        totals = self.totals()
        return "\n".join(f"- {totals[klass].line(klass)}" for klass in CLASSES if klass in totals)
