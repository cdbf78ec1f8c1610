"""The trust boundary as a folder (issue 24 item 1): a sandbox mounts the package `sandbox_side` and the contract,
and cannot import the supervisor at all (that `sandbox_side` imports nothing of the supervisor's:
tests/test_layout.py)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import sandbox_reply
from worker.engine.launch import RunnerConfig, RunnerPaths, runner_spec
from worker.engine.sandbox import ResourceLimits

# Run inside a real sandbox as launch.BOOT would: which of our packages can it import?
PROBE = r"""
import importlib, json, os, sys
sys.path.insert(0, os.environ["KJ_LIB"])
found = {}
for name in ("sandbox_side.boot", "sandbox_side.judging.judge_process", "contract.results", "worker", "app",
             "kerneljudge"):
    try:
        importlib.import_module(name)
        found[name] = True
    except ImportError:
        found[name] = False
os.write(int(os.environ["KJ_MSG_FD"]), (json.dumps(found) + "\n").encode())
"""


@pytest.mark.parametrize("role", ["reference", "candidate"])
def test_a_sandbox_imports_the_sandbox_side_and_the_contract_but_not_the_supervisor(settings, role):
    config = RunnerConfig(role=role, mode="run", device="cpu", paths=RunnerPaths())
    reply = sandbox_reply(runner_spec(config, settings, ResourceLimits()), PROBE, "import-probe")
    assert reply == {"sandbox_side.boot": True, "sandbox_side.judging.judge_process": True,
                     "contract.results": True, "worker": False, "app": False, "kerneljudge": False}, json.dumps(reply)


COVERED_PROBE = r"""
import json, os
root = os.environ["KJ_TEST_ROOT"]
seen = {name: sorted(os.listdir(os.path.join(root, name))) for name in ("worker", "torchlike")}
os.write(int(os.environ["KJ_MSG_FD"]), (json.dumps(seen) + "\n").encode())
"""


def test_a_regular_install_s_supervisor_packages_are_covered_in_the_sandbox(settings, tmp_path, monkeypatch):
    """Installed without -e, `worker` sits in site-packages beside torch, a folder every sandbox reads: the
    sandbox sees it as an empty folder, and the packages beside it as they are."""
    from worker.engine.sandbox import bwrap, python_roots

    site = tmp_path / "site-packages"
    for name in ("worker", "torchlike"):
        (site / name).mkdir(parents=True)
        (site / name / "__init__.py").write_text("SECRET = 1\n")
    site.chmod(0o755)
    tmp_path.chmod(0o755)
    real_roots = python_roots.python_roots()
    monkeypatch.setattr(bwrap, "python_roots", lambda: [*real_roots, str(site)])
    monkeypatch.setattr(python_roots, "module_location",
                        lambda name: str(site / name) if name == "worker" else None)
    config = RunnerConfig(role="candidate", mode="run", device="cpu", paths=RunnerPaths())
    spec = runner_spec(config, settings, ResourceLimits())
    spec.env["KJ_TEST_ROOT"] = str(site)
    reply = sandbox_reply(spec, COVERED_PROBE, "covered-probe")
    assert reply == {"worker": [], "torchlike": ["__init__.py"]}
