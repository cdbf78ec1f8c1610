"""The evaluation engine: one request in, one verdict out.

`prepare` (validate, static policy, build; no GPU) then `execute` (the problem's judge, one warm
candidate runner, compare, trace, time, verify, reward); `evaluate` does both. They live in
`evaluation.py` and are loaded on first use: the judge's sandbox imports this package's comparison
modules (correctness, discrimination, ...) and must not pull the rest of the engine in with them.

Where each part is: sandbox/ (bubblewrap and process supervision), sandbox_runtime/ (the code that
runs inside the sandbox), cuda_build/ (CUDA builds), policy/ (static rules), judge.py,
reference_cache.py, sandbox_pool.py, device_stage.py, correctness.py, timing_protocol.py,
attribution.py, verification.py, reward.py.
"""

from __future__ import annotations

from typing import Any

_API = ("PreparedJob", "StageCallback", "evaluate", "execute", "prepare")


def __getattr__(name: str) -> Any:
    if name in _API:
        from . import evaluation

        return getattr(evaluation, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = list(_API)
