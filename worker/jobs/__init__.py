"""The job plumbing around the engine: the job store (store/), the pipeline that feeds each GPU
(pipeline.py, with the device's shared/exclusive lock from worker.engine.gpu_schedule), the launchers
that get queued jobs to it (launchers/: embedded lanes or Celery) and the Celery workers (distributed/,
celery_cli.py). Imports go one way: jobs -> engine, never back.

A job goes: app (HTTP) -> store (queued) -> pipeline (claim, prepare on CPU threads, execute on
the device lane) -> worker.engine -> store (result) -> app.
"""
