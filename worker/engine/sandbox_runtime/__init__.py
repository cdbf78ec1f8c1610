"""Code that runs INSIDE the sandbox, next to untrusted user code.

Nothing here is trusted by the supervisor: it only loads a module, runs a model, writes
outputs to files and reports timings. Every verdict is made outside, from those files.
Standard library and torch only; imported by path inside the sandbox (see worker.engine.sandbox).
"""
