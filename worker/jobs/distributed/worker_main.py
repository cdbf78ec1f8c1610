"""Entry point of one Celery worker process (started by `kerneljudge worker`, one per GPU).

Runs `celery worker` with a thread pool sized to the pipeline's lane (jobs on the device plus
jobs built ahead), pinned by the CUDA_VISIBLE_DEVICES its parent set. The pipeline
(worker/jobs/pipeline.py) lives in this process; the task threads only wait for their jobs.
"""

from __future__ import annotations

import argparse
import os


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m worker.jobs.distributed.worker_main")
    parser.add_argument("--node-name", required=True)
    parser.add_argument("--loglevel", default="INFO")
    args = parser.parse_args(argv)
    from worker.engine.sandbox.spawner import start_spawner

    start_spawner()  # before any thread: every sandbox of this process starts through it
    if os.environ.get("KERNELJUDGE_SKIP_SELFCHECK") != "1":
        # Fail at start, not on every job: the sandbox must work, and one tiny evaluation must go through
        # the judge and a candidate sandbox (worker/engine/startup_check.py) before this worker consumes.
        from contract.statuses import Device
        from worker.engine.sandbox import SandboxUnavailable
        from worker.engine.sandbox.selfcheck import require_working_sandbox
        from worker.engine.settings import EngineSettings
        from worker.engine.startup_check import run_startup_check

        pinned = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        gpu = int(pinned) if pinned.isdigit() else None
        settings = EngineSettings.from_env()
        require_working_sandbox(use_gpu=gpu is not None, gpu_index=gpu, isolate_network=settings.isolate_network,
                                isolation=settings.isolation)
        check = run_startup_check(settings, Device.cuda if gpu is not None else Device.cpu)
        if not check.ok:
            raise SandboxUnavailable(f"start-up check failed, this worker does not start: {check.message} "
                                     "(KERNELJUDGE_SKIP_SELFCHECK=1 skips this check)")
    from worker.engine.build.builder import start_pch_warmup
    from worker.engine.settings import EngineSettings

    # The precompiled header now, not on the first job's path (this process's builds wait for it).
    pinned = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    start_pch_warmup(EngineSettings.from_env(), "cuda" if pinned.strip() not in ("", "-1") else "cpu")
    # Imported after parsing so that KERNELJUDGE_BROKER_URL (set by the parent) is in effect.
    from worker.jobs.distributed import tasks  # noqa: F401  (registers the task)
    from worker.jobs.distributed.celery_app import QUEUE_NAME, celery_app
    from worker.jobs.pipeline import PipelineConfig

    # One task thread per job the lane holds; with prefetch multiplier 1 the broker hands this
    # process no more messages than that, so unclaimed jobs stay in the queue for other hosts.
    capacity = PipelineConfig.from_env().capacity
    celery_app.worker_main([
        "worker", "--pool", "threads", "--concurrency", str(capacity),
        "--queues", QUEUE_NAME, "--hostname", args.node_name, "--loglevel", args.loglevel,
        "--without-gossip", "--without-mingle",
    ])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
