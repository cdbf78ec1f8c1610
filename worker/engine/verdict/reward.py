"""Reward formulas: one scalar per evaluation, from the verdict's components.

Components (each documented, all in the result as `reward_components`):
  format    1 if a candidate was extracted from the completion (1 when source was sent directly)
  compiled  1 if the candidate built and imported
  correct   1 if every correctness trial passed
  speedup   reference median / candidate median (0 unless correct and timed), against the baseline
            chosen by `options.reward_baseline`: "eager" (the default) is the reference as written,
            "compile" is torch.compile (default mode) of it, i.e. timing.compile_speedup. With
            "compile" and no compile baseline for the job, the eager speedup is used and
            extra.reward_baseline says so and why.
  compile_speedup  compiled-reference median / candidate median (0 unless correct and measured)
  coverage  own-kernel GPU time / (own + library compute time) in one traced forward call
            (see worker/engine/verdict/attribution.py; 1 when not measured)

Presets (s = the `speedup` component, so every preset rewards either baseline; c = correct,
k = compiled, v = coverage):
  default      0 unless c; else 0.3 * v + 0.7 * clamp(log2(s), 0, 3) / 3   (0.3 at <=1x with v = 1,
               1.0 at >=8x). The correctness part is scaled by coverage: PyTorch doing the work
               plus a token kernel earns little, a fused epilogue that speeds the forward up
               earns through its speedup.
  kevin        0.3*c + s*c
  tiered       -1 if not k; -0.5 if k and not c; else 0.25 (s<1), 0.5 (1<=s<1.1), 0.75 (1.1<=s<2), 1.0 (s>=2)
  binary_fast  1 if c and s > 1 else 0
  log_speedup  0 unless c; else clamp(log2(s) + 1, 0, 4) / 4        (0.25 at 1x, 1.0 at >=8x)
  custom       sum(weight[name] * component[name]) over the request's `reward_weights`

A `rejected` evaluation gets the preset's floor (0, or -1 for tiered); a `flagged` one gets
the policy's `flagged_reward` (0 by default). A `sandbox_error` is no verdict (the harness failed,
EvalResult.judged is false): it gets NO_VERDICT_REWARD and no components whatever the preset, and is
not a score; the trainer adapters give it their fallback reward instead.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from contract.requests import RewardBaseline
from contract.results import RewardBaselineNote

NO_VERDICT_REWARD = 0.0
COMPONENT_NAMES = ("format", "compiled", "correct", "speedup", "coverage", "compile_speedup")


def _default(c: Mapping[str, float]) -> float:
    if not c["correct"]:
        return 0.0
    gain = min(max(math.log2(max(c["speedup"], 1e-12)), 0.0), 3.0) / 3.0
    return 0.3 * c["coverage"] + 0.7 * gain


def _kevin(c: Mapping[str, float]) -> float:
    return 0.3 * c["correct"] + c["speedup"] * c["correct"]


def _tiered(c: Mapping[str, float]) -> float:
    if not c["compiled"]:
        return -1.0
    if not c["correct"]:
        return -0.5
    s = c["speedup"]
    if s < 1.0:
        return 0.25
    if s < 1.1:
        return 0.5
    if s < 2.0:
        return 0.75
    return 1.0


def _binary_fast(c: Mapping[str, float]) -> float:
    return 1.0 if c["correct"] and c["speedup"] > 1.0 else 0.0


def _log_speedup(c: Mapping[str, float]) -> float:
    if not c["correct"]:
        return 0.0
    return max(0.0, min(math.log2(max(c["speedup"], 1e-12)) + 1.0, 4.0)) / 4.0


PRESETS: dict[str, Callable[[Mapping[str, float]], float]] = {
    "default": _default,
    "kevin": _kevin,
    "tiered": _tiered,
    "binary_fast": _binary_fast,
    "log_speedup": _log_speedup,
}
FLOORS = {"tiered": -1.0}
PRESET_NAMES = (*PRESETS, "custom")


class UnknownPresetError(ValueError):
    pass


def validate_preset(preset: str, weights: Mapping[str, float] | None) -> None:
    """Raise with a clear message if the preset or its custom weights are unusable."""
    if preset not in PRESET_NAMES:
        raise UnknownPresetError(f"unknown reward preset {preset!r}; choose one of {', '.join(PRESET_NAMES)}")
    if preset == "custom":
        if not weights:
            raise UnknownPresetError("reward preset 'custom' needs reward_weights, e.g. {'correct': 1.0}")
        unknown = sorted(set(weights) - set(COMPONENT_NAMES))
        if unknown:
            raise UnknownPresetError(
                f"unknown reward components {unknown}; known: {', '.join(COMPONENT_NAMES)}"
            )


def components(
    *, compiled: bool, correct: bool, speedup: float | None, coverage: float | None = None, extracted: bool = True,
    compile_speedup: float | None = None,
) -> dict[str, float]:
    """`speedup` is the one the reward uses (see `reward_speedup` for choosing the baseline)."""
    return {
        "format": 1.0 if extracted else 0.0,
        "compiled": 1.0 if compiled else 0.0,
        "correct": 1.0 if correct else 0.0,
        "speedup": float(speedup) if (correct and speedup is not None) else 0.0,
        "coverage": 1.0 if coverage is None else float(coverage),
        "compile_speedup": float(compile_speedup) if (correct and compile_speedup is not None) else 0.0,
    }


def reward_speedup(baseline: RewardBaseline, eager: float | None, compiled: float | None,
                   compile_missing: str | None = None) -> tuple[float | None, RewardBaselineNote | None]:
    """The speedup the reward uses for `baseline`, and a note when the compile baseline was asked for
    but there is none (the eager speedup stands in: a candidate is not scored down for a reference
    that torch.compile cannot handle)."""
    if baseline == "compile" and eager is not None:
        if compiled is not None:
            return compiled, None
        return eager, RewardBaselineNote(requested="compile", used="eager", why=compile_missing or "no compile baseline")
    return eager, None


def compute_reward(
    preset: str,
    comps: Mapping[str, float],
    *,
    weights: Mapping[str, float] | None = None,
    rejected: bool = False,
    flagged: bool = False,
    flagged_reward: float = 0.0,
) -> float:
    validate_preset(preset, weights)
    if rejected:
        return FLOORS.get(preset, 0.0)
    if flagged:
        return flagged_reward
    if preset == "custom":
        assert weights is not None
        return float(sum(w * comps[name] for name, w in weights.items()))
    if not comps.get("format", 1.0):
        return FLOORS.get(preset, 0.0)
    return float(PRESETS[preset](comps))
