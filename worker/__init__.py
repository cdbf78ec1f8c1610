"""kerneljudge worker: the evaluation engine and the GPU workers that run it.

Importing this package (and `worker.models`) never imports torch: the supervising side
loads torch only where it compares outputs, and never initialises CUDA.
"""
