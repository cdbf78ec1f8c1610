"""Server-side caps on what one job may ask for, per API key: one job must not hold the device lane.

A job over a cap is refused (422 naming the field, the value and the cap), never clamped: a
clamped job would silently measure something other than what was asked. Caps come from
KERNELJUDGE_JOB_CAPS (every key), KERNELJUDGE_ADMIN_JOB_CAPS (admin keys) and, per key, the key's
entry in KERNELJUDGE_API_KEYS / the keys file (api_keys.py), all as `name=value` items, read by the API
section of the configuration tree (api_section.py); the API applies them (app/service.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any

from contract.requests import EvalOptions, StageLimits

# Where each capped value is in a submission (below `options`, except priority).
CAPPED = {
    "run_s": ("options", "limits", "run_s"),
    "timing_s": ("options", "limits", "timing_s"),
    "build_s": ("options", "limits", "build_s"),
    "timing_budget_s": ("options", "timing_budget_s"),
    "trials": ("options", "trials"),
    "timing_max_runs": ("options", "timing_max_runs"),
    "priority": ("priority",),
}


@dataclass(frozen=True)
class JobCaps:
    """The largest value a key's jobs may ask for. The defaults protect a shared device lane; each
    is at least the value a job gets when it does not ask (checked by `validated`)."""

    run_s: float = 300.0
    timing_s: float = 120.0
    build_s: float = 600.0
    timing_budget_s: float = 10.0
    trials: int = 20
    timing_max_runs: int = 5000
    priority: int = 10  # the highest priority; lower (down to the model's -100) is always allowed

    @classmethod
    def model_maxima(cls) -> JobCaps:
        """No cap beyond the request models' own bounds (the default for admin keys)."""
        def bound(model, name: str) -> Any:
            return next(m.le for m in model.model_fields[name].metadata if getattr(m, "le", None) is not None)

        return cls(run_s=bound(StageLimits, "run_s"), timing_s=bound(StageLimits, "timing_s"),
                   build_s=bound(StageLimits, "build_s"), timing_budget_s=bound(EvalOptions, "timing_budget_s"),
                   trials=bound(EvalOptions, "trials"), timing_max_runs=bound(EvalOptions, "timing_max_runs"),
                   priority=100)

    def with_items(self, text: str, where: str) -> JobCaps:
        """These caps with `name=value` items (separated by spaces or commas) applied."""
        kinds = {f.name: f.type for f in fields(self)}
        changes: dict[str, Any] = {}
        for item in text.replace(",", " ").split():
            name, _, value = item.partition("=")
            if name not in kinds or not value:
                raise ValueError(f"{where}: {item!r} is not a cap; write name=value with name one of "
                                 f"{', '.join(kinds)}")
            try:
                changes[name] = int(value) if kinds[name] == "int" else float(value)
            except ValueError:
                raise ValueError(f"{where}: {item!r}: {value!r} is not a number") from None
        return replace(self, **changes).validated(where) if changes else self

    def validated(self, where: str) -> JobCaps:
        """These caps, or ValueError when one would refuse the jobs that do not ask for anything."""
        defaults = _values(EvalOptions().model_dump(), {"priority": 0})
        for name, default in defaults.items():
            cap = getattr(self, name)
            if not math.isfinite(cap) or cap < default:
                raise ValueError(f"{where}: cap {name}={cap} is below {default}, the value of every job that "
                                 "does not set it")
        return self

    def violations(self, submission: dict[str, Any], loc_prefix: tuple) -> list[dict]:
        """422 detail items for every capped value of `submission` (options and priority) over its cap."""
        errors = []
        for name, value in _values(submission["options"], {"priority": submission["priority"]}).items():
            cap = getattr(self, name)
            if value > cap:
                loc = [*loc_prefix, *CAPPED[name]]
                errors.append({"type": "cap_exceeded", "loc": loc,
                               "msg": f"{'.'.join(map(str, CAPPED[name]))} = {value} is over this API key's cap "
                                      f"of {cap}; ask for at most {cap} (caps protect the shared device)"})
        return errors


def _values(options: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """The capped values out of dumped options (and the top-level ones given in `top`)."""
    found = {}
    for name, path in CAPPED.items():
        if path[0] != "options":
            found[name] = top[name]
            continue
        value: Any = options
        for part in path[1:]:
            value = value[part]
        found[name] = value
    return found
