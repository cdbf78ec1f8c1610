"""Per-sandbox identities of a root-run supervisor: uids unique across processes on the host and given
back when the sandbox ends, a pids cgroup of its own, and a clear reason when neither can work."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from worker.engine.sandbox.identity import IsolationError, acquire, first_unreachable
from worker.engine.sandbox.spec import IsolationConfig

REPO = Path(__file__).resolve().parents[2]
HOLD_ONE = """
import sys
from pathlib import Path
from worker.engine.sandbox.identity import acquire
from worker.engine.sandbox.spec import IsolationConfig
identity = acquire(IsolationConfig(mode="uid", uid_first={first}, uid_count=2, lock_dir=Path({lock_dir!r})), [], 8)
print(identity.uid, flush=True)
sys.stdin.read()  # held until the test closes our stdin
"""

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="per-sandbox identities are for a root-run supervisor")


@root_only
def test_sandbox_uids_are_unique_across_processes_and_given_back(tmp_path):
    first, lock_dir = 611900, tmp_path / "uids"
    config = IsolationConfig(mode="uid", uid_first=first, uid_count=2, lock_dir=lock_dir)
    other = subprocess.Popen([sys.executable, "-c", HOLD_ONE.format(first=first, lock_dir=str(lock_dir))],
                             cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        held = int(other.stdout.readline())
        mine = acquire(config, [], 8)
        assert {held, mine.uid} == {first, first + 1}
        assert mine.nproc == 8 and mine.kind == "uid"
        with pytest.raises(IsolationError, match="in use"):
            acquire(config, [], 8)
        mine.release()
        again = acquire(config, [], 8)
        assert again.uid == mine.uid
        again.release()
    finally:
        other.stdin.close()
        other.wait(timeout=30)
    # The other process is gone, and the kernel dropped its lock with it.
    taken = [acquire(config, [], 8) for _ in range(2)]
    assert {identity.uid for identity in taken} == {first, first + 1}
    for identity in taken:
        identity.release()


def test_an_unreachable_folder_is_named_with_its_mode():
    base = Path(tempfile.mkdtemp(prefix="kj-reach-"))  # under /tmp: every folder above it is passable
    try:
        base.chmod(0o755)
        inside = base / "closed" / "inside"
        inside.mkdir(parents=True)
        (base / "closed").chmod(0o700)
        problem = first_unreachable([str(inside)])
        assert problem is not None and f"{base / 'closed'} is not passable by other users (mode 0o700)" in problem
        (base / "closed").chmod(0o755)
        assert first_unreachable([str(inside)]) is None
    finally:
        shutil.rmtree(base)


@root_only
def test_forcing_uids_with_an_unreachable_mount_says_which_path(tmp_path):
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    config = IsolationConfig(mode="uid", lock_dir=tmp_path / "uids")
    with pytest.raises(IsolationError, match="cannot run as an unprivileged uid.*closed"):
        acquire(config, [str(closed)], 8)


@root_only
def test_a_sandbox_cgroup_caps_pids_and_is_removed_after(tmp_path):
    try:
        identity = acquire(IsolationConfig(mode="cgroup", lock_dir=tmp_path / "uids"), [], 12)
    except IsolationError as exc:
        pytest.skip(f"this host has no writable pids cgroup: {exc}")
    assert identity.kind == "cgroup" and identity.uid is None
    group = identity.cgroup
    assert (group / "pids.max").read_text().strip() == "12"
    identity.release()
    assert not group.exists()
