"""The pipeline section of the configuration tree: how each worker process (embedded or Celery) feeds its
device lanes (worker/jobs/pipeline.py's PipelineConfig is made from it and the build slots).
"""

from __future__ import annotations

from pydantic import Field, field_validator

from worker.config.env_section import EnvSection

# Jobs in device stages at once per device when the configuration leaves it unset. On a GPU the
# correctness stages are mostly host work (module loads, judge and runner starts, builds: the card
# was 4-11% busy with 2 or 8 jobs on it, benchmarks/results/throughput_gpu_2026-11-26_h200.md), so many
# share it; the card's memory is admitted by measurement (gpu_schedule). A CPU worker's jobs share its cores.
DEFAULT_DEVICE_CONCURRENCY = 2
DEFAULT_GPU_CONCURRENCY = 8
# Claims in a row of one problem while other problems wait (worker/jobs/claim_policy.py).
DEFAULT_BURST = 16
# A lane with jobs and no stage transition for this long is stalled (worker/jobs/watchdog.py). Above
# any single stage a job may legitimately take with the default caps: a build (600 s), the judge's
# start (300 s) plus the reference's run (300 s), the torch.compile baseline (600 s); a deployment that
# lets keys ask for longer stages (admin caps go to 3600 s) raises it.
DEFAULT_STALL_S = 1800.0


class PipelineSection(EnvSection):
    # Jobs in device stages at once per device; None: DEFAULT_GPU_CONCURRENCY on a GPU, else
    # DEFAULT_DEVICE_CONCURRENCY (concurrency_for).
    device_concurrency: int | None = Field(None, validation_alias="KERNELJUDGE_DEVICE_CONCURRENCY")
    # Jobs per device being prepared or prepared and waiting; None: max(device concurrency, build slots).
    prepare_ahead: int | None = Field(None, validation_alias="KERNELJUDGE_PREPARE_AHEAD")
    # Prepare (validate + build) threads per process; None: build slots + 2.
    prepare_threads: int | None = Field(None, validation_alias="KERNELJUDGE_PREPARE_THREADS")
    claim_burst: int = Field(DEFAULT_BURST, validation_alias="KERNELJUDGE_CLAIM_BURST")
    # A lane with jobs and no progress this long is restarted; 0: never.
    stall_s: float = Field(DEFAULT_STALL_S, validation_alias="KERNELJUDGE_WATCHDOG_STALL_S")
    # The device of a Celery worker process: set by `kerneljudge worker` for each process it starts.
    worker_device: str = Field("cpu", validation_alias="KERNELJUDGE_WORKER_DEVICE")

    @field_validator("device_concurrency", "prepare_ahead", "prepare_threads", "claim_burst")
    @classmethod
    def _at_least_one(cls, value: int | None) -> int | None:
        return None if value is None else max(1, value)

    @field_validator("stall_s")
    @classmethod
    def _not_negative(cls, value: float) -> float:
        return max(0.0, value)

    def concurrency_for(self, device: str) -> int:
        """Jobs in device stages at once on a device of this kind ("cuda" or "cpu")."""
        if self.device_concurrency is not None:
            return self.device_concurrency
        return DEFAULT_GPU_CONCURRENCY if device == "cuda" else DEFAULT_DEVICE_CONCURRENCY
