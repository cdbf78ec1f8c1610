"""What one device lane's engine works with: the engine and sandbox sections of the configuration tree
(worker/config/), flattened, with the folders under the data directory and what the lane sets at run time
(its GPU, its place on the host, its schedule and baseline book).

Made once per lane by `EngineSettings.from_config`; `EngineSettings()` has the tree's defaults. What each
configured field means is said where its variable is read (engine_section.py, sandbox_section.py).
"""

from __future__ import annotations

import dataclasses
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from worker.config.engine_section import EngineSection
from worker.config.sandbox_section import SandboxSection
from worker.engine.cpu_plan import CpuPlan, plan_cpus
from worker.engine.sandbox.spec import MIB, IsolationConfig

if TYPE_CHECKING:
    from worker.config.tree import KernelJudgeConfig
    from worker.engine.gpu_schedule import GpuSchedule
    from worker.engine.timing.baselines import BaselineBook

_ENGINE = EngineSection.from_values()
_SANDBOX = SandboxSection.from_values()
_TEMP = Path(tempfile.gettempdir()) / "kerneljudge"


@dataclass
class EngineSettings:
    # Per-job working directories (sources, inputs, outputs); removed after each job.
    work_root: Path = _TEMP / "work"
    # Built CUDA extensions, keyed by candidate source hash, reused by the GPU stage.
    build_cache: Path = _TEMP / "build-cache"
    # Per-candidate Triton caches (keyed by the candidate source's hash; worker/engine/build/triton_cache.py).
    triton_cache: Path = _TEMP / "triton-cache"
    keep_workdirs: bool = _ENGINE.keep_workdirs
    gpu_index: int | None = _ENGINE.gpu_index
    cuda_arch_list: str | None = _ENGINE.cuda_arch_list  # read once from nvidia-smi when None (cuda_arch)
    isolate_network: bool = _SANDBOX.isolate_network
    isolation: IsolationConfig = field(default_factory=_SANDBOX.isolation)
    sandbox_tmp_bytes: int = _SANDBOX.tmp_mb * MIB
    sandbox_shm_bytes: int = _SANDBOX.shm_mb * MIB
    sandbox_ext_bytes: int = _SANDBOX.ext_mb * MIB
    sandbox_memory_bytes: int = _SANDBOX.memory_bytes
    cpu_threads: int = _ENGINE.cpu_threads
    cuda_sync_wait: str = _ENGINE.cuda_sync_wait  # auto | blocking (a GPU sandbox's waits for the device)
    peak_bandwidth_gbps: float = _ENGINE.peak_bandwidth_gbps
    timing_pool_size: int = _ENGINE.timing_pool_size
    timing_variants: int = _ENGINE.timing_variants
    timing_variant_max_bytes: int = _ENGINE.timing_variant_max_bytes
    timed_checks: int = _ENGINE.timed_checks
    shape_trial_max_bytes: int = _ENGINE.shape_trial_max_bytes
    probe_trial_max_bytes: int = _ENGINE.probe_trial_max_bytes
    trial_bytes_budget: int = _ENGINE.trial_bytes_budget
    # None: sized by the service's pipeline to its lane (pool_size).
    warm_sandboxes: int | None = _ENGINE.warm_sandboxes
    reference_cache_entries: int = _ENGINE.reference_cache_entries
    reference_cache_gpu_fraction: float = _ENGINE.reference_cache_gpu_fraction
    reference_cache_host_fraction: float = _ENGINE.reference_cache_host_fraction
    reference_max_age_s: float = _ENGINE.reference_max_age_s
    reference_max_uses: int = _ENGINE.reference_max_uses
    compile_baseline: bool = _ENGINE.compile_baseline
    compile_baseline_timeout_s: float = 600.0
    baseline_retime_s: float = _ENGINE.baseline_retime_s
    # Where baselines are kept: the job store's book for the service (set by the pipeline); None: this
    # process's memory.
    baselines: BaselineBook | None = None
    reserved_cpus: str = _ENGINE.reserved_cpus
    lane_cpus_count: int = _ENGINE.lane_cpus_count
    lane_index: int = _ENGINE.lane_index  # this lane's number on its host (set by the pipeline too)
    lanes_on_host: int = _ENGINE.lanes_on_host
    build_nice: int = _ENGINE.build_nice
    build_path: str = _ENGINE.build_path  # auto (fast, falling back to full) or full
    build_slots: int | None = _ENGINE.build_slots  # None: from the cores no lane reserves (build/pool.py)
    build_memory_bytes: int = int(_ENGINE.build_memory_gb * 1024**3)
    # Set by the service's pipeline: this device's shared/exclusive schedule. The pipeline already
    # holds it exclusively during a job's "timing" stage; engine code that times on the device
    # outside a job's stages takes `gpu_schedule.exclusive()` itself (None: nothing to share with).
    gpu_schedule: GpuSchedule | None = None

    @classmethod
    def from_config(cls, config: KernelJudgeConfig) -> EngineSettings:
        """The engine and sandbox sections as one lane's settings; the folders under KERNELJUDGE_DATA_DIR
        when it is set, else under the system's temporary folder."""
        engine, sandbox, data_dir = config.engine, config.sandbox, config.jobs.data_dir
        # Every field named as a section's field is that field; the others are converted below. (A field
        # added to both can no longer be forgotten here: tests/engine/test_engine_settings.py.)
        named = {f.name: getattr(section, f.name) for f in dataclasses.fields(cls)
                 for section in (engine, sandbox) if f.name in type(section).model_fields}
        settings = cls(**named, isolation=sandbox.isolation(), sandbox_tmp_bytes=sandbox.tmp_mb * MIB,
                       sandbox_shm_bytes=sandbox.shm_mb * MIB, sandbox_ext_bytes=sandbox.ext_mb * MIB,
                       sandbox_memory_bytes=sandbox.memory_bytes, build_memory_bytes=int(engine.build_memory_gb * 1024**3))
        if data_dir:
            settings.work_root = data_dir / "work"
            settings.build_cache = data_dir / "build-cache"
            settings.triton_cache = data_dir / "triton-cache"
        return settings

    @classmethod
    def configured(cls) -> EngineSettings:
        """From the environment's configuration (load_config): the default of a caller given no settings
        (the engine used as a library, tests, benchmarks); entry points load the tree and pass it."""
        from worker.config.tree import load_config

        return cls.from_config(load_config())

    def cuda_arch(self) -> str | None:
        """TORCH_CUDA_ARCH_LIST for this worker's GPU: configured, or read once from nvidia-smi."""
        if self.cuda_arch_list is None:
            from worker.engine.gpu_arch import detect_cuda_arch

            self.cuda_arch_list = detect_cuda_arch(self.gpu_index)
        return self.cuda_arch_list

    def cpu_plan(self) -> CpuPlan:
        """This lane's reserved cores and the build cores (see cpu_plan)."""
        return plan_cpus(self.reserved_cpus, lane=self.lane_index, lanes=self.lanes_on_host,
                         per_lane=self.lane_cpus_count)

    def pool_size(self) -> int:
        """Warm candidate runners to keep: configured, else 1 (the pipeline sizes it to its lane)."""
        return max(self.warm_sandboxes, 0) if self.warm_sandboxes is not None else 1

    def baseline_book(self) -> BaselineBook:
        if self.baselines is None:
            from worker.engine.timing.baselines import MemoryBaselineBook

            self.baselines = MemoryBaselineBook()
        return self.baselines
