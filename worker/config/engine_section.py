"""The engine section of the configuration tree: how the engine judges (trial sizes, timing, warm judges and
runners, baselines, the physics rule, builds, reserved cores). worker/engine/engine_settings.py's
EngineSettings is made from it (with the sandbox section) once per device lane.
"""

from __future__ import annotations

import os
from typing import Any

from pydantic import Field, ValidationInfo, field_validator

from worker.config.env_section import EnvSection
from worker.engine.cpu_plan import AUTO, DEFAULT_LANE_CPUS
from worker.engine.sandbox.spec import MIB

BUILD_PATHS = ("auto", "full")
# How a GPU sandbox's CUDA waits for the device (sandbox_side/runtime/cuda_sync.py): CUDA's default spins a core
# through every wait; blocking sleeps until the device is done.
CUDA_SYNC_WAITS = ("auto", "blocking")
# Settings that take one of a few names: each field's variable and its names.
CHOICES = {"build_path": ("KERNELJUDGE_BUILD_PATH", BUILD_PATHS),
           "cuda_sync_wait": ("KERNELJUDGE_CUDA_SYNC_WAIT", CUDA_SYNC_WAITS)}


class EngineSection(EnvSection):
    keep_workdirs: bool = Field(False, validation_alias="KERNELJUDGE_KEEP_WORKDIRS")
    # Which GPU this engine uses (index into /dev/nvidiaN); None: all visible (workers set it per lane).
    gpu_index: int | None = Field(None, validation_alias="KERNELJUDGE_GPU_INDEX")
    # TORCH_CUDA_ARCH_LIST for builds, e.g. "9.0"; None: read from nvidia-smi.
    cuda_arch_list: str | None = Field(None, validation_alias="KERNELJUDGE_CUDA_ARCH")
    # OMP/MKL threads and MAX_JOBS inside the sandbox.
    cpu_threads: int = Field(default_factory=lambda: min(4, os.cpu_count() or 1),
                             validation_alias="KERNELJUDGE_CPU_THREADS")
    # How judges and candidate runners on a GPU wait for it: `auto` (CUDA's default: each process spins a core
    # while it waits) or `blocking` (asleep in the driver until the device is done).
    cuda_sync_wait: str = Field("auto", validation_alias="KERNELJUDGE_CUDA_SYNC_WAIT")
    # The device's copy bandwidth (GB/s, read + written) for the physics rule KJ-R06
    # (worker/engine/verdict/physics.py); 0: measured on the device by each judge (the fastest
    # measurement per device model counts).
    peak_bandwidth_gbps: float = Field(0.0, validation_alias="KERNELJUDGE_PEAK_BANDWIDTH_GBPS")
    # Distinct input sets rotated during timing (no pointer or value repeats between calls).
    timing_pool_size: int = Field(4, validation_alias="KERNELJUDGE_TIMING_POOL_SIZE")
    # Variants of each timing input set (values changed at secret positions before each timed call, the
    # reference's outputs for each kept by the judge: sandbox_side/timing/timing_variants.py); 0: none. The
    # judge makes fewer when the reference's outputs for them would exceed timing_variant_max_bytes.
    timing_variants: int = Field(3, validation_alias="KERNELJUDGE_TIMING_VARIANTS")
    timing_variant_max_bytes: int = Field(512 * MIB, validation_alias="KERNELJUDGE_TIMING_VARIANT_MAX_BYTES")
    # Timed outputs kept for the judge to check, chosen in secret among the measured calls (beyond one
    # call per input set after the window); fewer where they would take more than timing_variant_max_bytes.
    timed_checks: int = Field(8, validation_alias="KERNELJUDGE_TIMED_CHECKS")
    # The doubled-batch trial (KJ-R09) is skipped when its inputs would exceed this.
    shape_trial_max_bytes: int = Field(4 * 1024**3, validation_alias="KERNELJUDGE_SHAPE_TRIAL_MAX_BYTES")
    # The probe trials (scaled, rounding, spikes inputs) are skipped when one input set or one trial's
    # outputs exceed this (the judge keeps three more input sets, outputs and float64 truths).
    probe_trial_max_bytes: int = Field(1024**3, validation_alias="KERNELJUDGE_PROBE_TRIAL_MAX_BYTES")
    # The problem's trials keep at most this many bytes of inputs and outputs together (at least 2 trials
    # stay): a problem with 20 GiB of outputs a trial held its lane's device for minutes with all of them.
    trial_bytes_budget: int = Field(16 * 1024**3, validation_alias="KERNELJUDGE_TRIAL_BYTES_BUDGET")
    # Candidate runners kept started and warm (torch and Triton imported), each used once; 0: none.
    # None ("auto"): sized by the service's pipeline to its lane (device concurrency + 2), else 1.
    warm_sandboxes: int | None = Field(None, validation_alias="KERNELJUDGE_WARM_SANDBOXES")
    # At most this many judges (inputs, reference outputs, reference timing) stay warm per worker; 0:
    # one per job. Within it, the cache is sized by the memory the judges hold (the fractions below).
    reference_cache_entries: int = Field(64, validation_alias="KERNELJUDGE_REFERENCE_CACHE_ENTRIES")
    # Share of the GPU's memory (cuda) and of the host's memory (split between this host's lanes)
    # the warm judges may hold together (worker/engine/memory_budget.py).
    reference_cache_gpu_fraction: float = Field(0.4,
                                                validation_alias="KERNELJUDGE_REFERENCE_CACHE_GPU_FRACTION")
    reference_cache_host_fraction: float = Field(0.25,
                                                 validation_alias="KERNELJUDGE_REFERENCE_CACHE_HOST_FRACTION")
    # A problem's judge is replaced, with fresh secret seeds, after this long or this many jobs.
    reference_max_age_s: float = Field(600.0, validation_alias="KERNELJUDGE_REFERENCE_MAX_AGE_S")
    reference_max_uses: int = Field(100, validation_alias="KERNELJUDGE_REFERENCE_MAX_USES")
    # The torch.compile baseline (measured by the judge, cached per problem); False switches it off
    # for every job on this worker whatever the job's options say.
    compile_baseline: bool = Field(True, validation_alias="KERNELJUDGE_COMPILE_BASELINE")
    # Persisted per-problem baselines (worker/engine/timing/baselines.py) older than this are measured again.
    baseline_retime_s: float = Field(86400.0, validation_alias="KERNELJUDGE_BASELINE_RETIME_S")
    # Timing isolation (worker/engine/cpu_plan.py): the lanes' reserved cores (auto, off or `0-1;2-3`), the
    # cores `auto` reserves per lane, and this process's lane on its host (set by `kerneljudge worker` for
    # each Celery worker process; embedded lanes get theirs from the pipeline).
    reserved_cpus: str = Field(AUTO, validation_alias="KERNELJUDGE_RESERVED_CPUS")
    lane_cpus_count: int = Field(DEFAULT_LANE_CPUS, validation_alias="KERNELJUDGE_LANE_CPUS")
    lane_index: int = Field(0, validation_alias="KERNELJUDGE_LANE_INDEX")
    lanes_on_host: int = Field(1, validation_alias="KERNELJUDGE_LANES_ON_HOST")
    # Builds (worker/engine/build/): the sandboxes' nice value; `full` takes the plain load_inline build
    # (no fast path); builds at once per process (None: half the cores no lane reserves, build/pool.py);
    # each build process's address-space cap.
    build_nice: int = Field(10, validation_alias="KERNELJUDGE_BUILD_NICE")
    build_path: str = Field("auto", validation_alias="KERNELJUDGE_BUILD_PATH")
    build_slots: int | None = Field(None, validation_alias="KERNELJUDGE_BUILD_SLOTS")
    build_memory_gb: float = Field(8.0, validation_alias="KERNELJUDGE_BUILD_MEMORY_GB")

    @field_validator("warm_sandboxes", mode="before")
    @classmethod
    def _warm_sandboxes(cls, value: Any) -> Any:
        return None if value == "auto" else value

    @field_validator(*CHOICES)
    @classmethod
    def _one_of(cls, value: str, info: ValidationInfo) -> str:
        variable, names = CHOICES[info.field_name or ""]
        if value not in names:
            raise ValueError(f"{variable} must be one of {', '.join(names)}, not {value!r}")
        return value
