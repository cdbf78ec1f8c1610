"""Rules an operator requires (issue 23, section 3): a submitter could switch KJ-R01/KJ-R05/KJ-R20 off in
`options.policy.disabled_rules`, and a clock forgery then earned 0.95. The server's KERNELJUDGE_REQUIRED_RULES,
or a key's own `required_rules=` item, name rules its jobs may not switch off: such a job is refused at
submission with a 422 naming the entry and the rule."""

from __future__ import annotations

import pytest

from service.helpers import ADMIN_KEY, KEYS, OTHER_KEY, USER_KEY
from service.sources import REFERENCE, TRITON_CANDIDATE
from worker.config.api_keys import parse_keys, parse_rules
from worker.config.tree import load_config


def _submit(client, disabled: list[str]):
    body = {"reference": REFERENCE, "candidate": TRITON_CANDIDATE, "options": {"policy": {"disabled_rules": disabled}}}
    return client.post("/v1/evaluations", json=body)


def test_a_key_may_not_switch_off_a_rule_its_operator_requires(serve):
    live = serve(api_keys=parse_keys(f"{KEYS},{USER_KEY}-strict required_rules=KJ-R01+KJ-R20"))
    with live.client(f"{USER_KEY}-strict") as client:
        reply = _submit(client, ["KJ308", "KJ-R20-timing-disagrees-with-supervisor-clock", "KJ-R01"])
        assert reply.status_code == 422, reply.text
        errors = reply.json()["detail"]
        assert [error["loc"] for error in errors] == [["body", "options", "policy", "disabled_rules", 1],
                                                      ["body", "options", "policy", "disabled_rules", 2]]
        assert all(error["type"] == "rule_required" for error in errors)
        assert "switches off KJ-R20, which this API key may not disable" in errors[0]["msg"]
        assert "'KJ-R01' switches off KJ-R01" in errors[1]["msg"]
        # The rules it does not require stay the submitter's to switch off.
        assert _submit(client, ["KJ308", "KJ-R05"]).status_code == 202
    with live.client(USER_KEY) as client:  # the other keys keep the server's list (empty here)
        assert _submit(client, ["KJ-R20"]).status_code == 202


def test_the_servers_list_holds_for_every_key_without_its_own(serve):
    keys = parse_keys(f"{KEYS},{OTHER_KEY}-free required_rules=none")
    live = serve(api_keys=keys, required_rules=parse_rules("KJ-R01,KJ-R05 KJ-R20", "test"))
    for key in (USER_KEY, ADMIN_KEY):
        with live.client(key) as client:
            reply = _submit(client, ["KJ-R05"])
            assert reply.status_code == 422 and "KJ-R05" in reply.json()["detail"][0]["msg"], reply.text
    with live.client(f"{OTHER_KEY}-free") as client:  # its own list: none
        assert _submit(client, ["KJ-R05", "KJ-R20"]).status_code == 202


def test_a_batch_item_that_switches_off_a_required_rule_gets_its_own_error(serve):
    live = serve(required_rules=frozenset({"KJ-R20"}))
    items = [{"reference": REFERENCE, "candidate": TRITON_CANDIDATE},
             {"reference": REFERENCE, "candidate": TRITON_CANDIDATE,
              "options": {"policy": {"disabled_rules": ["KJ-R20"]}}}]
    with live.client(USER_KEY) as client:
        reply = client.post("/v1/evaluations:batch", json={"items": items}).json()
    assert (reply["accepted"], reply["rejected"]) == (1, 1)
    error = reply["items"][1]["error"]
    assert error["status"] == 422
    assert error["detail"][0]["loc"] == ["body", "items", 1, "options", "policy", "disabled_rules", 0]


def test_rule_lists_are_read_once_and_a_typo_is_refused(monkeypatch):
    assert parse_rules("KJ-R01+KJ-R20-timing-disagrees-with-supervisor-clock, KJ308", "X") == {
        "KJ-R01", "KJ-R20", "KJ308"}
    assert parse_rules("none", "X") == parse_rules("", "X") == frozenset()
    with pytest.raises(ValueError, match="'R20' is not a rule id"):
        parse_rules("KJ-R01 R20", "X")
    with pytest.raises(ValueError, match="required rules of key"):
        parse_keys("k1 required_rules=KJ-R1")
    monkeypatch.setenv("KERNELJUDGE_REQUIRED_RULES", "KJ-R01,KJ-R20")
    assert load_config().api.required_rules == {"KJ-R01", "KJ-R20"}
    monkeypatch.setenv("KERNELJUDGE_REQUIRED_RULES", "KJ-R1")
    with pytest.raises(ValueError, match="KERNELJUDGE_REQUIRED_RULES"):
        load_config()
