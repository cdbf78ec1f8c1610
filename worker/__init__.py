"""kerneljudge worker: the evaluation engine and the GPU workers that run it.

Importing this package (and `worker.models`) never imports torch: the supervising side never
touches a tensor (the judge compares, in its own sandboxed process) and never initialises CUDA.
"""
