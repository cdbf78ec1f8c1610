"""Reward presets: each formula at its documented points."""

from __future__ import annotations

import math

import pytest

from worker.engine.verdict.reward import (
    PRESET_NAMES,
    UnknownPresetError,
    components,
    compute_reward,
    validate_preset,
)


def comps(compiled=True, correct=True, speedup=1.0, extracted=True):
    return components(compiled=compiled, correct=correct, speedup=speedup, extracted=extracted)


@pytest.mark.parametrize("speedup, expected", [(0.5, 0.3), (1.0, 0.3), (2.0, 0.3 + 0.7 / 3), (8.0, 1.0), (64.0, 1.0)])
def test_default(speedup, expected):
    assert compute_reward("default", comps(speedup=speedup)) == pytest.approx(expected)
    assert compute_reward("default", comps(correct=False, speedup=speedup)) == 0.0


def test_kevin():
    assert compute_reward("kevin", comps(speedup=2.5)) == pytest.approx(0.3 + 2.5)
    assert compute_reward("kevin", comps(correct=False, speedup=2.5)) == 0.0


@pytest.mark.parametrize("compiled, correct, speedup, expected", [
    (False, False, None, -1.0), (True, False, None, -0.5), (True, True, 0.9, 0.25), (True, True, 1.0, 0.5),
    (True, True, 1.1, 0.75), (True, True, 1.99, 0.75), (True, True, 2.0, 1.0)])
def test_tiered(compiled, correct, speedup, expected):
    assert compute_reward("tiered", comps(compiled, correct, speedup)) == expected


def test_binary_fast():
    assert compute_reward("binary_fast", comps(speedup=1.01)) == 1.0
    assert compute_reward("binary_fast", comps(speedup=1.0)) == 0.0
    assert compute_reward("binary_fast", comps(correct=False, speedup=3.0)) == 0.0


@pytest.mark.parametrize("speedup, expected", [(0.25, 0.0), (1.0, 0.25), (2.0, 0.5), (8.0, 1.0), (100.0, 1.0)])
def test_log_speedup(speedup, expected):
    assert compute_reward("log_speedup", comps(speedup=speedup)) == pytest.approx(expected)


def test_custom_weights():
    weights = {"format": 0.1, "compiled": 0.2, "correct": 0.5, "speedup": 0.05}
    assert compute_reward("custom", comps(speedup=3.0), weights=weights) == pytest.approx(0.1 + 0.2 + 0.5 + 0.15)


def test_speedup_component_is_zero_unless_correct():
    assert comps(correct=False, speedup=5.0)["speedup"] == 0.0
    assert comps(speedup=None)["speedup"] == 0.0


def test_failed_extraction_gets_the_floor():
    for preset in ("default", "kevin", "binary_fast", "log_speedup"):
        assert compute_reward(preset, comps(extracted=False)) == 0.0
    assert compute_reward("tiered", comps(extracted=False)) == -1.0


def test_rejected_and_flagged():
    assert compute_reward("tiered", comps(speedup=4.0), rejected=True) == -1.0
    assert compute_reward("kevin", comps(speedup=4.0), rejected=True) == 0.0
    assert compute_reward("kevin", comps(speedup=4.0), flagged=True, flagged_reward=0.1) == 0.1


def test_validation_messages():
    with pytest.raises(UnknownPresetError, match="choose one of"):
        validate_preset("fastest", None)
    with pytest.raises(UnknownPresetError, match="needs reward_weights"):
        compute_reward("custom", comps())
    with pytest.raises(UnknownPresetError, match=r"unknown reward components \['latency'\]"):
        validate_preset("custom", {"latency": 1.0})
    assert set(PRESET_NAMES) == {"default", "kevin", "tiered", "binary_fast", "log_speedup", "custom"}
    assert all(math.isfinite(compute_reward(p, comps(speedup=1e-30))) for p in PRESET_NAMES if p != "custom")
