"""Entry point of one Celery worker process (started by `kerneljudge worker`, one per GPU).

Runs `celery worker` with one pool process, pinned by the CUDA_VISIBLE_DEVICES its parent set.
"""

from __future__ import annotations

import argparse


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m worker.distributed.worker_main")
    parser.add_argument("--node-name", required=True)
    parser.add_argument("--loglevel", default="INFO")
    args = parser.parse_args(argv)
    # Imported after parsing so that KERNELJUDGE_BROKER_URL (set by the parent) is in effect.
    from . import tasks  # noqa: F401  (registers the task)
    from .celery_app import QUEUE_NAME, celery_app

    celery_app.worker_main([
        "worker", "--pool", "prefork", "--concurrency", "1", "--prefetch-multiplier", "1",
        "--queues", QUEUE_NAME, "--hostname", args.node_name, "--loglevel", args.loglevel,
        "--without-gossip", "--without-mingle",
    ])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
