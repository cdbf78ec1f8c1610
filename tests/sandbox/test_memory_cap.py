"""Each sandbox's memory capped as a whole (issue 22, item 7): a candidate held 3 GiB of host memory through
`memfd_create` in a child that had lowered its own RLIMIT_AS, outside every cap. A root-run supervisor with a
memory controller gives every sandbox (`uid` and `cgroup` modes) a memory cgroup of its own; over its cap the
kernel kills inside that sandbox only, and the service and the other sandboxes go on.

The end-to-end tests run a memfd hog (3x the cap, its own RLIMIT_AS under what it writes) beside a
well-behaved sandbox that holds memory too and goes on working after the hog is killed.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from tests.sandbox.venvs import remove, system_venv
from worker.config.sandbox_section import parse_memory_size
from worker.engine.engine_settings import EngineSettings
from worker.engine.sandbox import (
    IsolationConfig,
    ResourceLimits,
    SandboxExited,
    SandboxProcess,
    SandboxSpec,
    SandboxUnavailable,
    Scratch,
)
from worker.engine.sandbox import identity as identity_module
from worker.engine.sandbox.identity import (
    CGROUP_PARENT,
    IsolationError,
    acquire,
    first_unreachable,
    memory_limit_files,
    read_memory_outcome,
)
from worker.engine.sandbox.spec import MIB, SANDBOX_MEMORY_BYTES

REPO = Path(__file__).resolve().parents[2]
CAP = 256 * MIB  # small enough to hit fast, large enough for an interpreter

# Lowers its own RLIMIT_AS under what it writes (it would not stop a memfd), then writes 3x the cap into a
# memfd. Says "held" only if it got there.
HOG = r'''
import json, os, resource, sys
cap = int(sys.argv[1])
out = int(os.environ.get("KJ_MSG_FD", "1"))
def say(**message):
    os.write(out, (json.dumps(message) + "\n").encode())
resource.setrlimit(resource.RLIMIT_AS, (2 * cap, 2 * cap))
memfd = os.memfd_create("hog")
block, written = b"x" * (1 << 20), 0
while written < 3 * cap:
    written += os.write(memfd, block)
say(event="held", bytes=written)
'''

# Holds 32 MiB of its own and 32 MiB in a memfd, says ready, waits for the test's go (sent once the hog is
# dead), then takes 32 MiB more and reports.
GOOD = r'''
import json, os, sys
out = int(os.environ["KJ_MSG_FD"])
def say(**message):
    os.write(out, (json.dumps(message) + "\n").encode())
held = [bytearray(b"a") * (32 << 20)]
memfd = os.memfd_create("good")
os.write(memfd, b"b" * (32 << 20))
say(event="ready")
sys.stdin.readline()
held.append(bytearray(b"c") * (32 << 20))
say(event="done", bytes=sum(len(part) for part in held) + os.fstat(memfd).st_size)
'''


def _memory_hierarchy() -> tuple[Path, bool] | None:
    try:
        return identity_module._hierarchy("memory")
    except (OSError, IsolationError):
        return None


def _needs_memory_cgroups() -> None:
    if os.geteuid() != 0:
        pytest.skip("a memory cgroup per sandbox is for a root-run service; this run is not root")
    found = _memory_hierarchy()
    if found is None:
        pytest.skip("this host has no cgroup hierarchy with the memory controller (cgroup v1 `memory`, or "
                    "`memory` in the v2 root's cgroup.controllers)")
    if not os.access(found[0], os.W_OK):
        pytest.skip(f"the memory hierarchy {found[0]} is not writable here")


def _limits_in(group: Path, unified: bool, cap: int) -> None:
    page = os.sysconf("SC_PAGE_SIZE")
    if unified:
        assert int((group / "memory.max").read_text()) == cap // page * page
        if (group / "memory.swap.max").exists():
            assert (group / "memory.swap.max").read_text().strip() == "0"
        assert (group / "memory.oom.group").read_text().strip() == "1"
    else:
        assert int((group / "memory.limit_in_bytes").read_text()) == cap // page * page
        if (group / "memory.memsw.limit_in_bytes").exists():
            assert int((group / "memory.memsw.limit_in_bytes").read_text()) == cap // page * page
        assert (group / "memory.swappiness").read_text().strip() == "0"


# -- the cgroup files ----------------------------------------------------------------------
def test_the_memory_files_are_the_cap_without_swap():
    assert memory_limit_files(True, CAP) == [("memory.max", str(CAP), True), ("memory.swap.max", "0", False),
                                             ("memory.oom.group", "1", False)]
    assert memory_limit_files(False, CAP) == [("memory.limit_in_bytes", str(CAP), True),
                                              ("memory.memsw.limit_in_bytes", str(CAP), False),
                                              ("memory.swappiness", "0", False)]
    assert ResourceLimits().memory_bytes == SANDBOX_MEMORY_BYTES == 16 * 1024**3


@pytest.mark.parametrize("mode", ["uid", "cgroup"])
def test_each_sandbox_gets_a_memory_cgroup_with_its_cap(mode, tmp_path):
    _needs_memory_cgroups()
    memory_root, unified = _memory_hierarchy()
    try:
        identity = acquire(IsolationConfig(mode=mode, lock_dir=tmp_path / "uids"), [], 12, memory_bytes=CAP)
    except IsolationError as exc:
        pytest.skip(f"no {mode} identity on this host: {exc}")
    try:
        group = identity.memory_cgroup
        assert identity.kind == mode and group is not None
        assert group.parent == memory_root / CGROUP_PARENT and group.name.startswith(f"{os.getpid()}-")
        _limits_in(group, unified, CAP)
        # (besides, on v1, its freezer group's: tests/sandbox/test_pause.py)
        freezer = identity.freezer_cgroup
        procs = [path for path in identity.cgroup_procs_files()
                 if freezer is None or path.parent != freezer or freezer in (group, identity.cgroup)]
        if mode == "uid":
            assert identity.cgroup is None and procs == [group / "cgroup.procs"]
        else:
            assert (identity.cgroup / "pids.max").read_text().strip() == "12"  # the pids cap as before
            if unified:  # one hierarchy: one folder holds both caps (a process is in one cgroup of it)
                assert identity.cgroup == group and procs == [group / "cgroup.procs"]
            else:  # v1: a folder in each hierarchy, and the sandbox joins both
                assert identity.cgroup != group
                assert procs == [identity.cgroup / "cgroup.procs", group / "cgroup.procs"]
        groups = identity.cgroups()
        assert all(path.is_dir() for path in groups)
    finally:
        identity.release()
    assert not any(path.exists() for path in groups)
    assert identity.memory_cgroup is None and identity.cgroup is None


def test_no_memory_cap_asked_gives_no_memory_cgroup(tmp_path):
    _needs_memory_cgroups()
    identity = acquire(IsolationConfig(mode="cgroup", lock_dir=tmp_path / "uids"), [], 12, memory_bytes=None)
    try:
        assert identity.memory_cgroup is None
    finally:
        identity.release()


def test_not_root_runs_uncapped_and_says_so_once(monkeypatch, caplog):
    monkeypatch.setattr(identity_module.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(identity_module, "_warned", set())
    with caplog.at_level(logging.WARNING, logger=identity_module.__name__):
        first = acquire(IsolationConfig(), [], 12, memory_bytes=CAP)
        second = acquire(IsolationConfig(), [], 12, memory_bytes=CAP)
    assert first.kind == second.kind == "self" and first.cgroups() == second.cgroups() == []
    warnings = [record.getMessage() for record in caplog.records if "memory is not capped" in record.getMessage()]
    assert len(warnings) == 1 and "not run as root" in warnings[0]


def test_no_memory_controller_runs_uncapped_and_says_so_once(monkeypatch, caplog, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("sandbox identities of their own are for a root-run service; this run is not root")
    real = identity_module._sandbox_parent

    def without_memory(controller: str):
        if controller == "memory":
            raise IsolationError("no cgroup hierarchy with the memory controller is mounted")
        return real(controller)

    monkeypatch.setattr(identity_module, "_sandbox_parent", without_memory)
    monkeypatch.setattr(identity_module, "_warned", set())
    config = IsolationConfig(mode="uid", lock_dir=tmp_path / "uids")
    with caplog.at_level(logging.WARNING, logger=identity_module.__name__):
        identities = [acquire(config, [], 12, memory_bytes=CAP) for _ in range(2)]
    try:
        assert all(item.kind == "uid" and item.memory_cgroup is None for item in identities)
    finally:
        for item in identities:
            item.release()
    warnings = [record.getMessage() for record in caplog.records if "memory is not capped" in record.getMessage()]
    assert warnings == ["sandbox memory is not capped: no cgroup hierarchy with the memory controller is mounted"]


def test_the_setting_takes_sizes_and_refuses_a_typo(monkeypatch):
    assert parse_memory_size("V", "16G") == parse_memory_size("V", "16GiB") == parse_memory_size("V", "16gb") \
        == parse_memory_size("V", "16384M") == parse_memory_size("V", "17179869184") == 16 * 1024**3
    assert parse_memory_size("V", "1.5G") == 3 * 512 * MIB
    for bad in ("16", "lots", "G", "inf", "-16G"):
        with pytest.raises(ValueError, match="V"):
            parse_memory_size("V", bad)
    assert EngineSettings().sandbox_memory_bytes == SANDBOX_MEMORY_BYTES
    monkeypatch.setenv("KERNELJUDGE_SANDBOX_MEMORY", "24G")
    assert EngineSettings.configured().sandbox_memory_bytes == 24 * 1024**3


# -- the kernel holds the cap, the identity alone ------------------------------------------
@pytest.mark.parametrize("mode", ["uid", "cgroup"])
def test_a_memfd_hog_in_the_sandbox_cgroups_is_killed_at_the_cap(mode, tmp_path):
    """What a sandbox's first process does (join every cgroup.procs before exec), without bwrap: the
    mechanism, whatever state process.py is in."""
    _needs_memory_cgroups()
    identity = acquire(IsolationConfig(mode=mode, lock_dir=tmp_path / "uids"), [], 64, memory_bytes=CAP)
    assert identity.memory_cgroup is not None
    procs = [str(path) for path in identity.cgroup_procs_files()]

    def join() -> None:
        for path in procs:
            with open(path, "w") as handle:
                handle.write(str(os.getpid()))

    try:
        done = subprocess.run([sys.executable, "-I", "-c", HOG, str(CAP)], preexec_fn=join, capture_output=True,
                              text=True, timeout=120)
        assert '"held"' not in done.stdout, done.stdout
        assert done.returncode == -9, (done.returncode, done.stderr[-2000:])
        outcome = identity.memory_outcome()
        assert outcome is not None and outcome.oom_kills >= 1  # the kernel's OOM killer, in this cgroup
        assert outcome.cap_bytes == CAP and (outcome.peak_bytes is None or outcome.peak_bytes <= CAP)
    finally:
        groups = identity.cgroups()
        identity.release()
    assert not any(path.exists() for path in groups)


# -- end to end: SandboxProcess -------------------------------------------------------------
def _spec(isolation: IsolationConfig) -> SandboxSpec:
    return SandboxSpec(env={"PATH": "/usr/bin:/bin"}, shm_size_bytes=16 * MIB, tmp_size_bytes=64 * MIB,
                       scratch=[Scratch("/kj/ext", 16 * MIB)], isolation=isolation,
                       limits=ResourceLimits(extra_processes=64, memory_bytes=CAP))


def _oom_kills(group: Path | None) -> int | None:
    """OOM kills the kernel counted in a memory cgroup (None: no cgroup, or already removed)."""
    if group is None or not group.exists():
        return None
    return read_memory_outcome(group, CAP).oom_kills


def hog_beside_good(isolation: IsolationConfig) -> dict:
    """Start a well-behaved sandbox, then a memfd hog beside it; once the hog is dead, the well-behaved one
    works on. Returns what happened (JSON-able)."""
    good = SandboxProcess(_spec(isolation), [sys.executable, "-I", "-c", GOOD], name="good")
    hog = SandboxProcess(_spec(isolation), [sys.executable, "-I", "-c", HOG, str(CAP)], name="hog")
    report: dict = {"hog_messages": []}
    groups: list[Path] = []
    try:
        good.start()
        report["good_ready"] = good.receive(120)
        report["good_identity"] = good.identity.kind
        groups += good.identity.cgroups()
        hog.start()
        report["hog_identity"] = hog.identity.kind
        report["hog_memory_cgroup"] = str(hog.identity.memory_cgroup) if hog.identity.memory_cgroup else None
        groups += hog.identity.cgroups()
        report["groups"] = [str(path) for path in groups]
        try:
            while True:
                report["hog_messages"].append(hog.receive(120))
        except SandboxExited as exc:
            report["hog_exit"] = {"returncode": exc.returncode, "describe": exc.describe()}
        report["hog_oom"] = _oom_kills(hog.identity.memory_cgroup if hog.identity else None)
        good.send({"op": "go"})
        report["good_done"] = good.receive(120)
    finally:
        hog.close(grace_s=0)
        good.close(grace_s=5)
    report["groups_left"] = [str(path) for path in groups if path.exists()]
    return report


def _assert_hog_stopped(report: dict) -> None:
    assert report["hog_memory_cgroup"], ("the hog's sandbox got no memory cgroup: SandboxProcess.start must pass "
                                         "memory_bytes=limits.memory_bytes to identity.acquire", report)
    assert report["hog_messages"] == [], report  # it never got to hold 3x the cap
    # The kernel's own count says why: the result names the cap, not "a limit or out of memory".
    assert report["hog_exit"]["describe"].startswith(
        "the process was killed by SIGKILL: it went over the sandbox's memory cap of 256 MiB (the kernel's OOM "
        "killer, peak "), report
    assert report["hog_oom"] is None or report["hog_oom"] >= 1, report  # None: released before it was read
    assert report["good_ready"] == {"event": "ready"}, report
    assert report["good_done"] == {"event": "done", "bytes": 96 * MIB}, report
    assert report["groups"] and report["groups_left"] == [], report


def main() -> None:
    """`python -c 'from tests.sandbox.test_memory_cap import main; main()' ISOLATION_JSON` (uid mode, from an
    interpreter an unprivileged uid can reach)."""
    isolation = json.loads(sys.argv[1])
    try:
        report = hog_beside_good(IsolationConfig(**{**isolation, "lock_dir": Path(isolation["lock_dir"])}))
    except SandboxUnavailable as exc:
        report = {"unavailable": str(exc)}
    print(json.dumps(report))


def test_a_memfd_hog_is_stopped_at_the_cap_and_its_neighbour_goes_on(tmp_path):
    _needs_memory_cgroups()
    try:
        report = hog_beside_good(IsolationConfig(mode="cgroup", lock_dir=tmp_path / "uids"))
    except SandboxUnavailable as exc:
        pytest.skip(f"this host cannot start a sandbox in a cgroup of its own: {exc}")
    assert report["good_identity"] == report["hog_identity"] == "cgroup"
    _assert_hog_stopped(report)


def test_a_memfd_hog_running_as_a_sandbox_uid_is_stopped_at_the_cap(tmp_path):
    """The `uid` mode had no cgroup at all before: its sandboxes get a memory cgroup too."""
    _needs_memory_cgroups()
    blocked = first_unreachable([str(REPO / "worker")])
    if blocked:
        pytest.skip(f"this checkout cannot be mounted into a sandbox that runs as an unprivileged uid: {blocked}")
    folder = system_venv(sees_packages=True)
    try:
        config = IsolationConfig(mode="uid", lock_dir=tmp_path / "uids")
        payload = json.dumps({**asdict(config), "lock_dir": str(config.lock_dir)})
        done = subprocess.run([str(folder / "venv" / "bin" / "python"), "-c",
                               "from tests.sandbox.test_memory_cap import main; main()", payload],
                              cwd=REPO, env={"PYTHONPATH": str(REPO), "PATH": os.environ.get("PATH", "")},
                              capture_output=True, text=True, timeout=300)
    finally:
        remove(folder)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    if "unavailable" in report:
        pytest.skip(f"this host cannot start a sandbox as an unprivileged uid: {report['unavailable']}")
    assert report["good_identity"] == report["hog_identity"] == "uid"
    _assert_hog_stopped(report)


# -- what the cgroup tells at a sandbox's end ----------------------------------------------
@pytest.mark.parametrize("files, kills, peak", [
    ({"memory.events": "low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\n", "memory.peak": "268435456\n"}, 1, 256 * MIB),
    ({"memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
      "memory.max_usage_in_bytes": "1048576\n"}, 2, MIB),
    ({"memory.events": "oom 0\noom_kill 0\n"}, 0, None),  # v2 before Linux 5.19 keeps no peak
])
def test_the_memory_outcome_reads_both_cgroup_versions(tmp_path, files, kills, peak):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    assert read_memory_outcome(tmp_path, CAP) == identity_module.MemoryOutcome(CAP, kills, peak)


def test_a_sigkill_names_the_memory_cap_only_when_the_kernel_counted_an_oom_kill():
    oom = identity_module.MemoryOutcome(16 * 1024**3, 1, 16 * 1024**3)
    assert SandboxExited(-9, "", oom).describe() == (
        "the process was killed by SIGKILL: it went over the sandbox's memory cap of 16.0 GiB (the kernel's OOM "
        "killer, peak 16.0 GiB; KERNELJUDGE_SANDBOX_MEMORY sets the cap)")
    for memory in (None, identity_module.MemoryOutcome(CAP, 0, MIB)):  # killed for another reason
        assert SandboxExited(-9, "", memory).describe() == \
            "the process was killed by SIGKILL (killed: limit or out of memory)"
    assert SandboxExited(128 + 9, "", oom).describe().startswith("the process was killed by SIGKILL: it went over")
