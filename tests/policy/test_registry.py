"""Rule ids: static and runtime rules are switched off by full id or short number."""

from __future__ import annotations

from worker.engine.policy.registry import is_disabled, rule


def test_runtime_rules_are_disabled_by_full_id_or_short_number():
    assert is_disabled("KJ-R09-shape-specialised", ["KJ-R09"])
    assert is_disabled("KJ-R09-shape-specialised", ["KJ-R09-shape-specialised"])
    assert not is_disabled("KJ-R09-shape-specialised", ["KJ-R08"])
    assert not is_disabled("KJ-R03-work-outside-timed-stream", ["KJ301"])
    assert is_disabled("KJ301-side-stream", ["KJ301"])


def test_rules_are_found_by_short_number():
    assert rule("KJ301").id == "KJ301-side-stream"
    assert rule("KJ301-anything").id == "KJ301-side-stream"
