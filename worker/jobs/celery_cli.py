"""`kerneljudge worker`: run Celery workers against a Redis broker, one per GPU.

Each worker is its own process with CUDA_VISIBLE_DEVICES set to one GPU, running the job
pipeline for it (worker/jobs/pipeline.py: builds ahead, device stages shared, timing alone). With no
GPU (or --device cpu) one CPU worker runs. This supervisor never imports torch; it restarts a
worker process that exits unexpectedly, after requeueing (and sending again) the jobs that
process held in any pipeline stage, so they do not wait for the broker's visibility timeout.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import subprocess
import sys
import time

log = logging.getLogger("kerneljudge.worker")

RESTART_DELAY_S = 2.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--broker", default=None,
                        help="Redis URL, e.g. redis://10.0.0.5:6379/0 (env KERNELJUDGE_BROKER_URL)")
    parser.add_argument("--database-url", default=None,
                        help="job store shared with the API, e.g. postgresql://user@host/kerneljudge "
                             "(env KERNELJUDGE_DATABASE_URL; default: SQLite in KERNELJUDGE_DATA_DIR)")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                        help="auto: one worker per visible GPU, or one CPU worker when there is none")
    parser.add_argument("--gpus", default=None, help="comma-separated GPU indices to use (default: all visible)")
    parser.add_argument("--loglevel", default="INFO")


def plan_workers(device: str, gpus_arg: str | None) -> list[tuple[str, dict[str, str]]]:
    """(node name, extra environment) for each worker process to start."""
    from worker.jobs.distributed.devices import visible_gpus

    host = socket.gethostname()
    gpus = [g.strip() for g in gpus_arg.split(",") if g.strip()] if gpus_arg else visible_gpus()
    if device == "cpu" or (device == "auto" and not gpus):
        return [(f"kj-cpu@{host}", {"KERNELJUDGE_WORKER_DEVICE": "cpu", "CUDA_VISIBLE_DEVICES": ""})]
    if not gpus:
        raise SystemExit("kerneljudge worker: --device cuda but no GPU is visible (nvidia-smi -L lists none)")
    # One lane per GPU, each its own process; its number on the host picks its reserved cores (cpu_plan).
    return [(f"kj-gpu{g}@{host}", {"KERNELJUDGE_WORKER_DEVICE": "cuda", "CUDA_VISIBLE_DEVICES": g,
                                   "KERNELJUDGE_LANE_INDEX": str(index), "KERNELJUDGE_LANES_ON_HOST": str(len(gpus))})
            for index, g in enumerate(gpus)]


def run(args: argparse.Namespace) -> int:
    from worker.config.tree import load_config
    from worker.jobs.store import store_url

    logging.basicConfig(level=args.loglevel.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        config = load_config()
    except (OSError, ValueError) as exc:
        print(f"kerneljudge worker: bad configuration: {exc}", file=sys.stderr)
        return 2
    broker = args.broker or config.jobs.broker_url
    database_url = args.database_url or config.jobs.database_url
    if not broker:
        print("kerneljudge worker: give --broker redis://HOST:PORT/DB (or set KERNELJUDGE_BROKER_URL)",
              file=sys.stderr)
        return 2
    # Each worker process loads its own configuration from this environment, with the flags in it.
    base_env = dict(os.environ, KERNELJUDGE_BROKER_URL=broker)
    if database_url:
        base_env["KERNELJUDGE_DATABASE_URL"] = database_url
    plan = plan_workers(args.device, args.gpus)
    jobs = config.jobs.model_copy(update={"database_url": database_url})
    resender = JobResender(broker, store_url(jobs), jobs.job_time_limit_s)
    resender.recover_host()  # jobs of worker processes a previous supervisor on this host left
    children: dict[str, subprocess.Popen] = {}
    stopping = False

    def start(name: str, extra_env: dict[str, str]) -> None:
        cmd = [sys.executable, "-m", "worker.jobs.distributed.worker_main", "--node-name", name,
               "--loglevel", args.loglevel]
        children[name] = subprocess.Popen(cmd, env={**base_env, **extra_env})
        log.info("started %s (pid %d, CUDA_VISIBLE_DEVICES=%r)", name, children[name].pid,
                 extra_env.get("CUDA_VISIBLE_DEVICES"))

    def stop(signum, _frame) -> None:
        nonlocal stopping
        stopping = True
        for child in children.values():
            if child.poll() is None:
                child.send_signal(signum)  # Celery's warm shutdown: finish the current job first

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    for name, extra_env in plan:
        start(name, extra_env)
    env_by_name = dict(plan)
    while children:
        time.sleep(0.5)
        for name, child in list(children.items()):
            code = child.poll()
            if code is None:
                continue
            del children[name]
            resender.recover_process(child.pid)
            if not stopping:
                log.error("%s exited with code %s; restarting in %.0fs", name, code, RESTART_DELAY_S)
                time.sleep(RESTART_DELAY_S)
                start(name, env_by_name[name])
    return 0


class JobResender:
    """Requeue the jobs of stopped worker processes of this host and send them to the broker again."""

    def __init__(self, broker_url: str, database_url: str, job_time_limit_s: float):
        from worker.jobs.distributed.celery_app import make_celery
        from worker.jobs.store import JobStore

        self.store = JobStore(database_url)
        self.celery = make_celery(broker_url, job_time_limit_s)
        self.prefix = f"celery@{socket.gethostname()}:"

    def recover_host(self) -> None:
        self._send(self.store.recover_orphans(self.prefix)[0])

    def recover_process(self, pid: int) -> None:
        self._send(self.store.recover_worker(f"{self.prefix}{pid}")[0])

    def _send(self, job_ids: list[str]) -> None:
        from worker.jobs.distributed.celery_app import TASK_NAME

        for job_id in job_ids:
            try:
                self.celery.send_task(TASK_NAME, args=[job_id])
            except Exception:  # the broker's own redelivery (visibility timeout) remains
                log.exception("could not send requeued job %s to the broker", job_id)
