"""Every red-team and honest case runs through the static policy, CPU-only, in CI."""

from __future__ import annotations

import re

import pytest

from benchmarks.redteam.corpus import load_corpus
from benchmarks.redteam.runner import CAUGHT, FALSE_POSITIVE, PENDING, run_static
from worker.engine.policy import RULES
from worker.engine.policy.registry import short_id

CASES = load_corpus()
RUNTIME_RULE = re.compile(r"^KJ-R\d{2}$")


def test_corpus_covers_every_threat_class_both_layers_and_honest_kernels():
    classes = {c.threat_class for c in CASES}
    assert classes == {1, 2, 3, 4, None}
    for threat_class in (1, 2, 3, 4):
        layers = {c.layer for c in CASES if c.threat_class == threat_class}
        assert layers == {"static", "runtime"}, threat_class
    honest = [c for c in CASES if c.honest]
    assert any("triton" in c.id for c in honest) and any("cuda" in c.id for c in honest)
    assert any("multistream" in c.id for c in honest)


def test_expected_rules_exist_in_the_layer_that_catches_the_case():
    static_numbers = {rule.number for rule in RULES}
    for case in CASES:
        if case.expected_rule and case.layer == "static":
            assert case.expected_rule in static_numbers, case.id
        elif case.expected_rule:
            assert RUNTIME_RULE.match(case.expected_rule), case.id
        for disabled in case.disabled_rules:
            assert short_id(disabled) in static_numbers or RUNTIME_RULE.match(short_id(disabled)), case.id


def test_library_compute_is_an_attack_only_under_the_full_profile():
    """Under `partial`, PyTorch and library kernels may do part of the work; KJ-R11 rejects only under `full`."""
    library_compute = [c for c in CASES if c.expected_rule == "KJ-R11"]
    assert library_compute
    assert all(c.profile == "full" for c in library_compute), [c.id for c in library_compute]


@pytest.mark.parametrize("case", [c for c in CASES if c.layer == "static"], ids=lambda c: c.id)
def test_static_case_meets_its_expectation(case):
    outcome = run_static(case, [])
    assert outcome.as_expected, f"{case.id}: expected {case.expected}, got {outcome.got} ({outcome.rules})"
    if case.honest:
        assert outcome.outcome != FALSE_POSITIVE
    else:
        assert outcome.outcome == CAUGHT


@pytest.mark.parametrize("case", [c for c in CASES if c.layer == "runtime"], ids=lambda c: c.id)
def test_runtime_case_is_left_to_the_runtime_layer(case):
    """Tagged `runtime`: the static policy (minus the case's disabled rules) must not catch it."""
    outcome = run_static(case, [])
    assert outcome.got == "accepted", f"{case.id} is caught statically: {outcome.rules}"
    assert outcome.outcome in (PENDING, "passed")
