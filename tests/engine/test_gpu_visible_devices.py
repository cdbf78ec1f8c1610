"""Which GPU a sandboxed runner of a lane sees. In a sandbox given only its lane's device node, CUDA numbers
that GPU 0: naming it by its host index failed every judge of the second GPU of a two-GPU H100 host with
"No CUDA GPUs are available" (2026-11-25)."""

from __future__ import annotations

from contract.statuses import SandboxKind
from worker.engine import gpu_arch
from worker.engine.launch import RunnerConfig, RunnerPaths, runner_spec
from worker.engine.sandbox import ResourceLimits


def test_a_lane_names_its_gpu_by_uuid_when_known_else_as_the_sandboxs_only_gpu(monkeypatch, settings):
    settings.gpu_index = 1
    config = RunnerConfig(role="reference", mode="run", device="cuda", paths=RunnerPaths(), sandbox=SandboxKind.bwrap)
    monkeypatch.setattr(gpu_arch, "gpu_uuid", lambda index: None)  # no nvidia-smi to ask
    assert runner_spec(config, settings, ResourceLimits()).env["CUDA_VISIBLE_DEVICES"] == "0"
    unsandboxed = RunnerConfig(role="reference", mode="run", device="cuda", paths=RunnerPaths(),
                               sandbox=SandboxKind.none)
    assert runner_spec(unsandboxed, settings, ResourceLimits()).env["CUDA_VISIBLE_DEVICES"] == "1"  # every node
    monkeypatch.setattr(gpu_arch, "gpu_uuid", lambda index: f"GPU-uuid-of-{index}")
    for chosen in (config, unsandboxed):
        assert runner_spec(chosen, settings, ResourceLimits()).env["CUDA_VISIBLE_DEVICES"] == "GPU-uuid-of-1"
