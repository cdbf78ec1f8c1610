"""Builds, as the supervisor runs them: the sandboxed CUDA build and its cache (builder.py), build slots (pool.py),
the Triton cache a candidate's kernels compile into (triton_cache.py), and `kerneljudge build` (build_cli.py)."""
