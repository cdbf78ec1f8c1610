"""The evaluation engine: one request in, one verdict out.

`prepare` (validate, static policy, build; no GPU) then `execute` (the problem's judge, one warm
candidate runner, compare, trace, time, verify, reward); `evaluate` does both. They live in
`evaluation.py` and are loaded on first use, so that importing a light module of the engine (its
settings, a stage name) does not import torch.

Where each part is: sandbox/ (bubblewrap and process supervision), build/ (builds and their cache),
reference/ (the problem's judge), timing/ (the paired protocol and baselines), verdict/ (attribution,
runtime rules, reward, the result), policy/ (static rules), sandbox_pool.py, launch.py, device_stage.py.
The code that runs inside a sandbox is the top-level package sandbox_side/.
"""

from __future__ import annotations

from typing import Any

_API = ("PreparedJob", "StageCallback", "evaluate", "execute", "prepare")


def __getattr__(name: str) -> Any:
    if name in _API:
        from worker.engine import evaluation

        return getattr(evaluation, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = list(_API)
