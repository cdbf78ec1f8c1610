"""What a sandboxed child can reach and use (issue 15): no variable of the server in any process it
can see, a read-only /dev, size-capped /dev/shm and scratch folders, and processes and threads capped
per sandbox, also when the supervisor is root (this machine's tests run as root).

Each probe runs once as the host resolves `auto` isolation and once forced to run as an
unprivileged uid of its own (root only; from an interpreter every folder of which that uid can
reach, see `uid_python`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from tests.sandbox.venvs import remove, system_venv
from worker.engine.sandbox import (
    IsolationConfig,
    ResourceLimits,
    SandboxProcess,
    SandboxSpec,
    SandboxUnavailable,
    Scratch,
)
from worker.engine.sandbox.identity import first_unreachable
from worker.engine.sandbox.selfcheck import check_sandbox
from worker.engine.sandbox.spec import MIB

REPO = Path(__file__).resolve().parents[2]
SECRET = "kj-planted-secret-4f1c9a"

REPLY = 'os.write(int(os.environ["KJ_MSG_FD"]), (json.dumps(report) + "\\n").encode())\n'

# Every process the sandbox can see: its environment, command line, open files (their targets and,
# for regular files, their contents), memory maps, working and root folders.
SCAN = r'''
import json, os
secret = os.environ["KJ_LOOK_FOR"][::-1]  # given reversed: this process's own environment holds it too
report = {"found": [], "env_names": {}, "pids": []}
def look(where, data):
    if secret.encode() in data:
        report["found"].append(where)
for pid in (p for p in os.listdir("/proc") if p.isdigit()):
    report["pids"].append(pid)
    for name in ("environ", "cmdline", "maps"):
        try:
            data = open(f"/proc/{pid}/{name}", "rb").read()
        except OSError:
            continue
        look(f"{pid}/{name}", data)
        if name == "environ":
            report["env_names"][pid] = sorted(e.split(b"=")[0].decode() for e in data.split(b"\0") if e)
    for name in ("cwd", "root"):
        try:
            look(f"{pid}/{name}", os.readlink(f"/proc/{pid}/{name}").encode())
        except OSError:
            pass
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        fds = []
    for fd in fds:
        path = f"/proc/{pid}/fd/{fd}"
        try:
            look(path, os.readlink(path).encode())
            if os.path.isfile(path):
                with open(path, "rb") as handle:
                    look(path + " (contents)", handle.read(1 << 20))
        except OSError:
            pass
''' + REPLY

FLOOD = r'''
import json, os, threading
stop = threading.Event()
threads, thread_error = [], None
try:
    while len(threads) < 500:
        thread = threading.Thread(target=stop.wait)
        thread.start()
        threads.append(thread)
except RuntimeError as exc:
    thread_error = str(exc)
stop.set()
for thread in threads:
    thread.join()
children, process_error = [], None
try:
    while len(children) < 500:
        children.append(os.posix_spawn("/bin/sleep", ["sleep", "60"], {}))
except OSError as exc:
    process_error = str(exc)
report = {"threads": len(threads), "thread_error": thread_error, "processes": len(children),
          "process_error": process_error}
''' + REPLY

FILL = r'''
import errno, json, os
def fill(path, limit):
    written, block = 0, b"x" * (1 << 20)
    try:
        with open(path, "wb") as handle:
            while written < limit:
                handle.write(block)
                handle.flush()
                written += len(block)
    except OSError as exc:
        return written, errno.errorcode.get(exc.errno, str(exc.errno))
    return written, None
def try_write(path):
    try:
        open(path, "wb").write(b"x")
        return None
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))
report = {"shm": fill("/dev/shm/fill", 64 << 20), "ext": fill("/kj/ext/fill", 64 << 20),
          "dev": try_write("/dev/kj-new-node"), "root": try_write("/kj-new-file"), "null": try_write("/dev/null")}
''' + REPLY


def probe(script: str, *, isolation: dict | None = None, extra_processes: int = 1024,
          env: dict | None = None) -> dict:
    """Run `script` in a sandbox with small caps and return its report."""
    spec = SandboxSpec(env={"PATH": "/usr/bin:/bin", **(env or {})}, shm_size_bytes=16 * MIB,
                       scratch=[Scratch("/kj/ext", 16 * MIB)], limits=ResourceLimits(extra_processes=extra_processes))
    if isolation is not None:
        spec.isolation = IsolationConfig(**{**isolation, "lock_dir": Path(isolation["lock_dir"])})
    process = SandboxProcess(spec, [sys.executable, "-I", "-c", script], name="probe")
    process.start()
    try:
        report = process.receive(120)
    finally:
        process.close(grace_s=0)
    report["_identity"] = process.identity.kind if process.identity else None
    return report


def main() -> None:
    """`python -c 'from tests.sandbox.test_containment import main; main()' ARGS_JSON` (for uid_python)."""
    arguments = json.loads(sys.argv[1])
    os.environ.update(arguments.pop("supervisor_env", {}))
    print(json.dumps(probe(globals()[arguments.pop("script")], **arguments)))


@pytest.fixture(scope="module")
def uid_python():
    """An interpreter from which a root-run sandbox can run as an unprivileged uid: every folder it
    imports from must be passable by others. This one's may not be (a pyenv Python under /root)."""
    if os.geteuid() != 0:
        pytest.skip("per-sandbox uids are how a root-run service caps processes; this run is not root")
    blocked = first_unreachable([str(REPO / "worker")])
    if blocked:
        pytest.skip(f"this checkout cannot be mounted into a sandbox that runs as an unprivileged uid: {blocked}")
    folder = system_venv(sees_packages=True)
    yield folder / "venv" / "bin" / "python"
    remove(folder)


@pytest.fixture
def uid_isolation(tmp_path) -> dict:
    config = IsolationConfig(mode="uid", lock_dir=tmp_path / "uids")
    return {**asdict(config), "lock_dir": str(config.lock_dir)}


def probe_as_uid(python: Path, script: str, isolation: dict, **arguments) -> dict:
    payload = json.dumps({"script": script, "isolation": isolation, **arguments})
    done = subprocess.run([str(python), "-c", "from tests.sandbox.test_containment import main; main()", payload],
                          cwd=REPO, env={"PYTHONPATH": str(REPO), "PATH": os.environ.get("PATH", "")},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def assert_no_secret(report: dict) -> None:
    assert report["found"] == [], report["found"]
    assert len(report["pids"]) >= 2  # bwrap's process and the child itself: the scan saw them
    allowed = {"PATH", "KJ_MSG_FD", "KJ_FD_SOCK", "PWD", "KJ_LOOK_FOR"}
    for pid, names in report["env_names"].items():
        assert set(names) <= allowed, (pid, names)


def test_no_variable_of_the_server_is_in_any_process_the_sandbox_sees(monkeypatch):
    monkeypatch.setenv("KERNELJUDGE_API_KEYS", f"{SECRET}:admin")
    monkeypatch.setenv("SOME_SERVICE_TOKEN", SECRET)
    report = probe(SCAN, env={"KJ_LOOK_FOR": SECRET[::-1]})
    assert_no_secret(report)


def test_no_variable_of_the_server_reaches_a_sandbox_running_as_its_own_uid(uid_python, uid_isolation):
    report = probe_as_uid(uid_python, "SCAN", uid_isolation, env={"KJ_LOOK_FOR": SECRET[::-1]},
                          supervisor_env={"KERNELJUDGE_API_KEYS": f"{SECRET}:admin", "SOME_SERVICE_TOKEN": SECRET})
    assert report["_identity"] == "uid"
    assert_no_secret(report)


def assert_capped(report: dict, cap: int) -> None:
    # The cap counts every task of the sandbox (bwrap's two processes, the interpreter and its threads).
    assert report["threads"] < cap and report["thread_error"], report
    assert report["processes"] < cap and report["process_error"], report


def test_threads_and_processes_stop_at_the_sandbox_cap():
    report = probe(FLOOD, extra_processes=64)
    assert_capped(report, 64)
    if os.geteuid() == 0:
        # Root is exempt from RLIMIT_NPROC: the cap held because the sandbox had an identity of its own.
        assert report["_identity"] in ("uid", "cgroup"), report


def test_threads_and_processes_stop_at_the_cap_of_a_sandbox_cgroup(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("a pids cgroup per sandbox is for a root-run service; this run is not root")
    isolation = {**asdict(IsolationConfig(mode="cgroup")), "lock_dir": str(tmp_path / "uids")}
    try:
        report = probe(FLOOD, isolation=isolation, extra_processes=64)
    except SandboxUnavailable as exc:
        pytest.skip(f"this host has no writable pids cgroup: {exc}")
    assert report["_identity"] == "cgroup"
    assert_capped(report, 64)


def test_threads_and_processes_stop_at_the_cap_of_a_sandbox_uid(uid_python, uid_isolation):
    report = probe_as_uid(uid_python, "FLOOD", uid_isolation, extra_processes=64)
    assert report["_identity"] == "uid"
    assert_capped(report, 64)


def assert_writes_contained(report: dict) -> None:
    for place in ("shm", "ext"):
        written, error = report[place]
        assert error == "ENOSPC" and written <= 16 * MIB, (place, report[place])
    assert report["dev"] == "EROFS" and report["root"] == "EROFS", report
    assert report["null"] is None, report


def test_dev_is_read_only_and_shm_and_scratch_folders_are_capped():
    assert_writes_contained(probe(FILL))


def test_writes_are_capped_for_a_sandbox_uid(uid_python, uid_isolation):
    report = probe_as_uid(uid_python, "FILL", uid_isolation)
    assert report["_identity"] == "uid"
    assert_writes_contained(report)


def test_the_startup_probe_sees_only_the_sandbox_variables(monkeypatch):
    monkeypatch.setenv("KERNELJUDGE_API_KEYS", f"{SECRET}:admin")
    check = check_sandbox(gpu_nodes=[], isolate_network=True)
    assert check.ok, check.message
    assert "PATH" in check.report["variables"] and "KERNELJUDGE_API_KEYS" not in check.report["variables"]
    assert check.report["identity"] in ("self", "uid", "cgroup")
