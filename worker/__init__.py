"""kerneljudge worker: the evaluation engine (`worker.engine`) and the job plumbing that feeds it
on every GPU (`worker.jobs`: store, pipeline, Celery); `contract.results` is the public contract.

Importing this package (and `contract.results`) never imports torch: the supervising side never
touches a tensor (the judge compares, in its own sandboxed process) and never initialises CUDA.
"""
