"""kerneljudge worker: the evaluation engine (`worker.engine`) and the job plumbing that feeds it
on every GPU (`worker.jobs`: store, pipeline, Celery); `worker.models` is the public contract.

Importing this package (and `worker.models`) never imports torch: the supervising side never
touches a tensor (the judge compares, in its own sandboxed process) and never initialises CUDA.
"""
