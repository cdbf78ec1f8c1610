"""Engine settings, read from the environment once per worker."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from worker.engine.cpu_plan import CpuPlan, plan_cpus
from worker.engine.sandbox.spec import MIB, SANDBOX_MEMORY_BYTES, IsolationConfig

if TYPE_CHECKING:
    from worker.engine.gpu_schedule import GpuSchedule
    from worker.engine.timing.baselines import BaselineBook


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
    # How a root-run worker caps each sandbox's processes and threads (sandbox/identity.py).
    isolation: IsolationConfig = field(default_factory=IsolationConfig)
    # Size caps of what a sandbox can write (each a tmpfs in memory): /tmp, /dev/shm and the
    # extension folder (/kj/ext: a build's output, a run's private copy of the built extension).
    sandbox_tmp_bytes: int = 4096 * MIB
    sandbox_shm_bytes: int = 256 * MIB
    sandbox_ext_bytes: int = 1024 * MIB
    # Cap on each sandbox's memory as a whole (its processes and the tmpfs pages above; a memory cgroup
    # per sandbox for a root-run worker, sandbox/identity.py): judges, candidate runners and builds.
    sandbox_memory_bytes: int = SANDBOX_MEMORY_BYTES
    cpu_threads: int = 2
    # The device's copy bandwidth (GB/s, read + written) for the physics rule KJ-R06 (worker/engine/verdict/physics.py);
    # 0: measured on the device by each judge (the fastest measurement per device model counts).
    peak_bandwidth_gbps: float = 0.0
    # Distinct input sets rotated during timing (no pointer or value repeats between calls).
    timing_pool_size: int = 4
    # Variants of each timing input set (values changed at secret positions before each timed call, the
    # reference's outputs for each kept by the judge: sandbox_side/timing/timing_variants.py); 0: none. The
    # judge makes fewer when the reference's outputs for them would exceed timing_variant_max_bytes.
    timing_variants: int = 3
    timing_variant_max_bytes: int = 512 * MIB
    # Timed outputs kept for the judge to check, chosen in secret among the measured calls (beyond one
    # call per input set after the window); fewer where they would take more than timing_variant_max_bytes.
    timed_checks: int = 8
    # The doubled-batch trial (KJ-R09) is skipped when its inputs would exceed this.
    shape_trial_max_bytes: int = 4 * 1024**3
    # Per-candidate Triton caches (keyed by the candidate source's hash; worker/engine/build/triton_cache.py).
    triton_cache: Path = field(default_factory=lambda: Path(tempfile.gettempdir()) / "kerneljudge" / "triton-cache")

    # The probe trials (scaled, rounding, spikes inputs) are skipped when one input set or one trial's
    # outputs exceed this (the judge keeps three more input sets, outputs and float64 truths).
    probe_trial_max_bytes: int = 1024**3
    # The problem's trials keep at most this many bytes of inputs and outputs together (at least 2 trials
    # stay): a problem with 20 GiB of outputs a trial held its lane's device for minutes with all of them.
    trial_bytes_budget: int = 16 * 1024**3
    # Candidate runners kept started and warm (torch and Triton imported), each used once; 0: none.
    # None: sized by the service's pipeline to its lane (device concurrency + 2), else 1.
    warm_sandboxes: int | None = None
    # At most this many judges (inputs, reference outputs, reference timing) stay warm per worker; 0:
    # one per job. Within it, the cache is sized by the memory the judges hold (the fractions below).
    reference_cache_entries: int = 64
    # Share of the GPU's memory (cuda) and of the host's memory (split between this host's lanes)
    # the warm judges may hold together (worker/engine/memory_budget.py).
    reference_cache_gpu_fraction: float = 0.4
    reference_cache_host_fraction: float = 0.25
    # A problem's judge is replaced, with fresh secret seeds, after this long or this many jobs.
    reference_max_age_s: float = 600.0
    reference_max_uses: int = 100
    # The torch.compile baseline (measured by the judge, cached per problem); False switches it off
    # for every job on this worker whatever the job's options say.
    compile_baseline: bool = True
    compile_baseline_timeout_s: float = 600.0
    # Persisted per-problem baselines (worker/engine/timing/baselines.py) older than this are measured again.
    baseline_retime_s: float = 86400.0
    # Where baselines are kept: the job store's book for the service (set by the pipeline); None: this
    # process's memory.
    baselines: BaselineBook | None = None
    # Timing isolation (worker/engine/cpu_plan.py): this lane's reserved cores, the rest for builds.
    reserved_cpus: str = "auto"
    lane_cpus_count: int = 2
    lane_index: int = 0  # this lane's number on its host (set by the pipeline / `kerneljudge worker`)
    lanes_on_host: int = 1
    build_nice: int = 10
    # Set by the service's pipeline: this device's shared/exclusive schedule. The pipeline already
    # holds it exclusively during a job's "timing" stage; engine code that times on the device
    # outside a job's stages takes `gpu_schedule.exclusive()` itself (None: nothing to share with).
    gpu_schedule: GpuSchedule | None = None

    def cuda_arch(self) -> str | None:
        """TORCH_CUDA_ARCH_LIST for this worker's GPU: configured, or read once from nvidia-smi."""
        if self.cuda_arch_list is None:
            from worker.engine.gpu_arch import detect_cuda_arch

            self.cuda_arch_list = detect_cuda_arch(self.gpu_index)
        return self.cuda_arch_list

    @classmethod
    def from_env(cls) -> EngineSettings:
        data_dir = os.environ.get("KERNELJUDGE_DATA_DIR")
        settings = cls()
        if data_dir:
            settings.work_root = Path(data_dir) / "work"
            settings.build_cache = Path(data_dir) / "build-cache"
            settings.triton_cache = Path(data_dir) / "triton-cache"
        settings.keep_workdirs = _env_bool("KERNELJUDGE_KEEP_WORKDIRS", False)
        gpu = os.environ.get("KERNELJUDGE_GPU_INDEX")
        settings.gpu_index = int(gpu) if gpu not in (None, "") else None
        settings.cuda_arch_list = os.environ.get("KERNELJUDGE_CUDA_ARCH") or None
        settings.isolate_network = _env_bool("KERNELJUDGE_SANDBOX_ISOLATE_NETWORK", True)
        settings.isolation = _isolation_from_env()
        for variable, attribute in (("KERNELJUDGE_SANDBOX_TMP_MB", "sandbox_tmp_bytes"),
                                    ("KERNELJUDGE_SANDBOX_SHM_MB", "sandbox_shm_bytes"),
                                    ("KERNELJUDGE_SANDBOX_EXT_MB", "sandbox_ext_bytes")):
            megabytes = os.environ.get(variable)
            if megabytes:
                setattr(settings, attribute, int(megabytes) * MIB)
        memory = os.environ.get("KERNELJUDGE_SANDBOX_MEMORY")
        if memory:
            settings.sandbox_memory_bytes = parse_memory_size("KERNELJUDGE_SANDBOX_MEMORY", memory)
        settings.cpu_threads = int(os.environ.get("KERNELJUDGE_CPU_THREADS", str(min(4, os.cpu_count() or 1))))
        settings.timing_pool_size = int(os.environ.get("KERNELJUDGE_TIMING_POOL_SIZE", settings.timing_pool_size))
        settings.timing_variants = int(os.environ.get("KERNELJUDGE_TIMING_VARIANTS", settings.timing_variants))
        settings.timing_variant_max_bytes = int(os.environ.get("KERNELJUDGE_TIMING_VARIANT_MAX_BYTES",
                                                               settings.timing_variant_max_bytes))
        settings.timed_checks = int(os.environ.get("KERNELJUDGE_TIMED_CHECKS", settings.timed_checks))
        settings.shape_trial_max_bytes = int(os.environ.get("KERNELJUDGE_SHAPE_TRIAL_MAX_BYTES",
                                                            settings.shape_trial_max_bytes))
        settings.probe_trial_max_bytes = int(os.environ.get("KERNELJUDGE_PROBE_TRIAL_MAX_BYTES",
                                                            settings.probe_trial_max_bytes))
        settings.trial_bytes_budget = int(os.environ.get("KERNELJUDGE_TRIAL_BYTES_BUDGET",
                                                         settings.trial_bytes_budget))
        settings.peak_bandwidth_gbps = float(os.environ.get("KERNELJUDGE_PEAK_BANDWIDTH_GBPS") or 0)
        warm = os.environ.get("KERNELJUDGE_WARM_SANDBOXES")
        settings.warm_sandboxes = int(warm) if warm not in (None, "", "auto") else None
        settings.reference_cache_entries = int(os.environ.get("KERNELJUDGE_REFERENCE_CACHE_ENTRIES",
                                                              settings.reference_cache_entries))
        settings.reference_max_age_s = float(os.environ.get("KERNELJUDGE_REFERENCE_MAX_AGE_S",
                                                            settings.reference_max_age_s))
        settings.reference_max_uses = int(os.environ.get("KERNELJUDGE_REFERENCE_MAX_USES",
                                                         settings.reference_max_uses))
        settings.compile_baseline = _env_bool("KERNELJUDGE_COMPILE_BASELINE", settings.compile_baseline)
        settings.reference_cache_gpu_fraction = float(os.environ.get("KERNELJUDGE_REFERENCE_CACHE_GPU_FRACTION",
                                                                     settings.reference_cache_gpu_fraction))
        settings.reference_cache_host_fraction = float(os.environ.get("KERNELJUDGE_REFERENCE_CACHE_HOST_FRACTION",
                                                                      settings.reference_cache_host_fraction))
        settings.baseline_retime_s = float(os.environ.get("KERNELJUDGE_BASELINE_RETIME_S", settings.baseline_retime_s))
        settings.reserved_cpus = os.environ.get("KERNELJUDGE_RESERVED_CPUS", settings.reserved_cpus)
        settings.lane_cpus_count = int(os.environ.get("KERNELJUDGE_LANE_CPUS", settings.lane_cpus_count))
        settings.build_nice = int(os.environ.get("KERNELJUDGE_BUILD_NICE", settings.build_nice))
        # Set by `kerneljudge worker` for each Celery worker process (one lane each); embedded lanes get
        # theirs from the pipeline.
        settings.lane_index = int(os.environ.get("KERNELJUDGE_LANE_INDEX", settings.lane_index))
        settings.lanes_on_host = int(os.environ.get("KERNELJUDGE_LANES_ON_HOST", settings.lanes_on_host))
        return settings

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


_SIZE_UNITS = {"": 1, "K": 1024, "M": MIB, "G": 1024**3, "T": 1024**4}
# Less than this cannot start an interpreter with torch: a cap this low is a typo, not a choice.
MIN_SANDBOX_MEMORY_BYTES = 256 * MIB


def parse_memory_size(variable: str, text: str) -> int:
    """A size in bytes, or with a binary unit: `16G`, `16GiB`, `12288M`, `17179869184`."""
    value = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = value[-1:] if value[-1:] in _SIZE_UNITS else ""
    number = value[:len(value) - len(unit)].strip()
    try:
        size = int(float(number) * _SIZE_UNITS[unit])
    except (ValueError, OverflowError):
        raise ValueError(f"{variable} must be a size such as 16G, 12288M or a number of bytes, not {text!r}") from None
    if size < MIN_SANDBOX_MEMORY_BYTES:
        raise ValueError(f"{variable}={text!r} is under {MIN_SANDBOX_MEMORY_BYTES // MIB} MiB: no sandbox "
                         "could start under it")
    return size


def _isolation_from_env() -> IsolationConfig:
    default = IsolationConfig()
    mode = os.environ.get("KERNELJUDGE_SANDBOX_ISOLATION", default.mode).strip().lower()
    if mode not in IsolationConfig.MODES:
        raise ValueError(f"KERNELJUDGE_SANDBOX_ISOLATION must be one of {', '.join(IsolationConfig.MODES)}, "
                         f"not {mode!r}")
    uids = os.environ.get("KERNELJUDGE_SANDBOX_UIDS")
    first, count = IsolationConfig.parse_uid_range(uids) if uids else (default.uid_first, default.uid_count)
    lock_dir = os.environ.get("KERNELJUDGE_SANDBOX_UID_LOCK_DIR")
    return IsolationConfig(mode=mode, uid_first=first, uid_count=count,
                           lock_dir=Path(lock_dir) if lock_dir else default.lock_dir)
