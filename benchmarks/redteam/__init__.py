"""Red-team corpus for the reward-hacking defences: attack cases, honest kernels, and a runner.

    python -m benchmarks.redteam --only static          # static policy only (no engine, no GPU)
    python -m benchmarks.redteam --device cpu           # whole engine; GPU-only cases are not run
    python -m benchmarks.redteam --device cuda --write  # on the GPU machine; table to benchmarks/results/
"""
