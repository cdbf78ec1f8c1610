"""Rule ids: static and runtime rules are switched off by full id or short number."""

from __future__ import annotations

from worker.engine.policy.registry import is_disabled, rule


def test_runtime_rules_are_disabled_by_full_id_or_short_number():
    assert is_disabled("KJ-R09-shape-specialised", ["KJ-R09"])
    assert is_disabled("KJ-R09-shape-specialised", ["KJ-R09-shape-specialised"])
    assert not is_disabled("KJ-R09-shape-specialised", ["KJ-R08"])
    assert not is_disabled("KJ-R03-work-outside-timed-stream", ["KJ302"])
    assert is_disabled("KJ302-background-thread", ["KJ302"])


def test_rules_are_found_by_short_number():
    assert rule("KJ302").id == "KJ302-background-thread"
    assert rule("KJ302-anything").id == "KJ302-background-thread"
