"""The job plumbing around the engine: the job store (store/), the pipeline that feeds each GPU
(pipeline.py, gpu_schedule.py) and the Celery workers (distributed/, celery_cli.py).

A job goes: app (HTTP) -> store (queued) -> pipeline (claim, prepare on CPU threads, execute on
the device lane) -> worker.engine -> store (result) -> app.
"""
