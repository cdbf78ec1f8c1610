"""Engine settings, read from the environment once per worker."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .gpu_schedule import GpuSchedule


def _env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in ("1", "true", "yes", "on")


@dataclass
class EngineSettings:
    # Per-job working directories (sources, inputs, outputs); removed after each job.
    work_root: Path = field(default_factory=lambda: Path(tempfile.gettempdir()) / "kerneljudge" / "work")
    # Built CUDA extensions, keyed by candidate source hash, reused by the GPU stage.
    build_cache: Path = field(default_factory=lambda: Path(tempfile.gettempdir()) / "kerneljudge" / "build-cache")
    keep_workdirs: bool = False
    # Which GPU this worker owns (index into /dev/nvidiaN); None: all visible.
    gpu_index: int | None = None
    # TORCH_CUDA_ARCH_LIST for builds done without a GPU, e.g. "9.0".
    cuda_arch_list: str | None = None
    isolate_network: bool = True
    cpu_threads: int = 2
    # Memory bandwidth (GB/s) used for the roofline plausibility bound; 0 disables it.
    peak_bandwidth_gbps: float = 0.0
    # Distinct input sets rotated during timing (no pointer or value repeats between calls).
    timing_pool_size: int = 4
    # The doubled-batch trial (KJ-R09) is skipped when its inputs would exceed this.
    shape_trial_max_bytes: int = 4 * 1024**3
    # The probe trials (scaled, rounding, spikes inputs) are skipped when one input set or one trial's
    # outputs exceed this (the judge keeps three more input sets, outputs and float64 truths).
    probe_trial_max_bytes: int = 1024**3
    # Candidate runners kept started and warm (torch and Triton imported), each used once; 0: none.
    warm_sandboxes: int = 1
    # Problems whose judge (inputs, reference outputs, reference timing) stays warm; 0: one per job.
    reference_cache_entries: int = 4
    # A problem's judge is replaced, with fresh secret seeds, after this long or this many jobs.
    reference_max_age_s: float = 600.0
    reference_max_uses: int = 100
    # Reference timing older than this is measured again before it is used.
    reference_retime_s: float = 120.0
    # The torch.compile baseline (measured by the judge, cached per problem); False switches it off
    # for every job on this worker whatever the job's options say.
    compile_baseline: bool = True
    compile_baseline_timeout_s: float = 600.0
    # Set by the service's pipeline: this device's shared/exclusive schedule. The pipeline already
    # holds it exclusively during a job's "timing" stage; engine code that times on the device
    # outside a job's stages takes `gpu_schedule.exclusive()` itself (None: nothing to share with).
    gpu_schedule: GpuSchedule | None = None

    def cuda_arch(self) -> str | None:
        """TORCH_CUDA_ARCH_LIST for this worker's GPU: configured, or read once from nvidia-smi."""
        if self.cuda_arch_list is None:
            from .gpu_arch import detect_cuda_arch

            self.cuda_arch_list = detect_cuda_arch(self.gpu_index)
        return self.cuda_arch_list

    @classmethod
    def from_env(cls) -> EngineSettings:
        data_dir = os.environ.get("KERNELJUDGE_DATA_DIR")
        settings = cls()
        if data_dir:
            settings.work_root = Path(data_dir) / "work"
            settings.build_cache = Path(data_dir) / "build-cache"
        settings.keep_workdirs = _env_bool("KERNELJUDGE_KEEP_WORKDIRS", False)
        gpu = os.environ.get("KERNELJUDGE_GPU_INDEX")
        settings.gpu_index = int(gpu) if gpu not in (None, "") else None
        settings.cuda_arch_list = os.environ.get("KERNELJUDGE_CUDA_ARCH") or None
        settings.isolate_network = _env_bool("KERNELJUDGE_SANDBOX_ISOLATE_NETWORK", True)
        settings.cpu_threads = int(os.environ.get("KERNELJUDGE_CPU_THREADS", str(min(4, os.cpu_count() or 1))))
        settings.timing_pool_size = int(os.environ.get("KERNELJUDGE_TIMING_POOL_SIZE", settings.timing_pool_size))
        settings.shape_trial_max_bytes = int(os.environ.get("KERNELJUDGE_SHAPE_TRIAL_MAX_BYTES",
                                                            settings.shape_trial_max_bytes))
        settings.probe_trial_max_bytes = int(os.environ.get("KERNELJUDGE_PROBE_TRIAL_MAX_BYTES",
                                                            settings.probe_trial_max_bytes))
        settings.peak_bandwidth_gbps = float(os.environ.get("KERNELJUDGE_PEAK_BANDWIDTH_GBPS") or 0)
        settings.warm_sandboxes = int(os.environ.get("KERNELJUDGE_WARM_SANDBOXES", settings.warm_sandboxes))
        settings.reference_cache_entries = int(os.environ.get("KERNELJUDGE_REFERENCE_CACHE_ENTRIES",
                                                              settings.reference_cache_entries))
        settings.reference_max_age_s = float(os.environ.get("KERNELJUDGE_REFERENCE_MAX_AGE_S",
                                                            settings.reference_max_age_s))
        settings.reference_max_uses = int(os.environ.get("KERNELJUDGE_REFERENCE_MAX_USES",
                                                         settings.reference_max_uses))
        settings.reference_retime_s = float(os.environ.get("KERNELJUDGE_REFERENCE_RETIME_S",
                                                           settings.reference_retime_s))
        settings.compile_baseline = _env_bool("KERNELJUDGE_COMPILE_BASELINE", settings.compile_baseline)
        return settings
