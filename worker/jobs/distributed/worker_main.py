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
    from worker.config.tree import load_config
    from worker.engine.sandbox.spawner import start_spawner

    # Once for this process, from the environment its parent gave it (broker, store, device, lane).
    config = load_config()
    start_spawner()  # before any thread: every sandbox of this process starts through it
    from worker.engine.engine_settings import EngineSettings

    pinned = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    if not config.sandbox.skip_selfcheck:
        # Fail at start, not on every job: the sandbox must work, and one tiny evaluation must go through
        # the judge and a candidate sandbox (worker/engine/startup_check.py) before this worker consumes.
        from contract.statuses import Device
        from worker.engine.sandbox import SandboxUnavailable
        from worker.engine.sandbox.selfcheck import require_working_sandbox
        from worker.engine.startup_check import run_startup_check

        gpu = int(pinned) if pinned.isdigit() else None
        settings = EngineSettings.from_config(config)
        require_working_sandbox(use_gpu=gpu is not None, gpu_index=gpu, isolate_network=settings.isolate_network,
                                isolation=settings.isolation)
        check = run_startup_check(settings, Device.cuda if gpu is not None else Device.cpu)
        if not check.ok:
            raise SandboxUnavailable(f"start-up check failed, this worker does not start: {check.message} "
                                     "(KERNELJUDGE_SKIP_SELFCHECK=1 skips this check)")
    from worker.engine.build.builder import start_pch_warmup

    # The precompiled header now, not on the first job's path (this process's builds wait for it).
    start_pch_warmup(EngineSettings.from_config(config), "cuda" if pinned.strip() not in ("", "-1") else "cpu")
    from worker.jobs.distributed import tasks
    from worker.jobs.distributed.celery_app import DEFAULT_BROKER_URL, QUEUE_NAME, celery_app, make_celery
    from worker.jobs.pipeline import PipelineConfig

    tasks.use_config(config)
    make_celery(config.jobs.broker_url or DEFAULT_BROKER_URL, config.jobs.job_time_limit_s, app=celery_app)
    # One task thread per job the lane holds; with prefetch multiplier 1 the broker hands this
    # process no more messages than that, so unclaimed jobs stay in the queue for other hosts.
    capacity = PipelineConfig.from_config(config).capacity
    celery_app.worker_main([
        "worker", "--pool", "threads", "--concurrency", str(capacity),
        "--queues", QUEUE_NAME, "--hostname", args.node_name, "--loglevel", args.loglevel,
        "--without-gossip", "--without-mingle",
    ])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
