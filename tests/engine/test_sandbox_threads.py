"""How a sandbox's torch threads wait. On a GPU lane its OpenMP threads sleep as soon as a host op ends
(OMP_WAIT_POLICY=PASSIVE): libgomp's default spinning took 2-3x the CPU time of a loop of host ops with host
work between them (benchmarks/omp_wait.py), on a two-GPU host whose judges and runners waited for cores.
On a CPU device, where those threads are the timed work, the default stays."""

from __future__ import annotations

import subprocess
import sys

import pytest

from contract.statuses import SandboxKind
from worker.engine.launch import RunnerConfig, RunnerPaths, runner_spec
from worker.engine.sandbox import ResourceLimits


@pytest.mark.parametrize(("role", "mode"), [("reference", "run"), ("candidate", "run"), ("candidate", "build")])
def test_every_sandbox_of_a_gpu_lane_lets_its_idle_threads_sleep(settings, role, mode):
    config = RunnerConfig(role=role, mode=mode, device="cuda", paths=RunnerPaths(), sandbox=SandboxKind.bwrap)
    assert runner_spec(config, settings, ResourceLimits()).env["OMP_WAIT_POLICY"] == "PASSIVE"


@pytest.mark.parametrize("role", ["reference", "candidate"])
def test_a_cpu_device_s_sandboxes_keep_the_default_wait(settings, role):
    config = RunnerConfig(role=role, mode="run", device="cpu", paths=RunnerPaths())
    assert "OMP_WAIT_POLICY" not in runner_spec(config, settings, ResourceLimits()).env


def test_torch_s_openmp_runtime_accepts_the_policy_the_sandbox_gets(settings):
    """Torch's host ops run on OpenMP here, and its runtime takes the value (libgomp warns of one it cannot read
    and spins as before)."""
    config = RunnerConfig(role="reference", mode="run", device="cuda", paths=RunnerPaths(), sandbox=SandboxKind.bwrap)
    policy = runner_spec(config, settings, ResourceLimits()).env["OMP_WAIT_POLICY"]
    probe = "import torch; torch.ones(1 << 20).sum(); print(torch.__config__.parallel_info())"
    for value, warned in ((policy, False), ("sometimes", True)):
        out = subprocess.run([sys.executable, "-c", probe], env={"OMP_WAIT_POLICY": value, "OMP_NUM_THREADS": "2"},
                             capture_output=True, text=True, check=True)
        assert "OpenMP" in out.stdout
        assert ("Invalid value for environment variable OMP_WAIT_POLICY" in out.stderr) is warned, out.stderr
