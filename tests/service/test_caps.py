"""Server-side caps per key: a job cannot ask to hold the device lane for an hour (the issue: any key
could set limits.run_s = 3600). Over a cap is 422 naming field, value and cap; nothing is clamped."""

from __future__ import annotations

import pytest

from service.helpers import ADMIN_KEY, KEYS, USER_KEY
from service.sources import REFERENCE, TRITON_CANDIDATE
from worker.config.api_keys import parse_keys
from worker.config.job_caps import JobCaps

DEFAULT = JobCaps()


def _submit(client, options: dict | None = None, priority: int | None = None):
    body: dict = {"reference": REFERENCE, "candidate": TRITON_CANDIDATE, "options": options or {}}
    if priority is not None:
        body["priority"] = priority
    return client.post("/v1/evaluations", json=body)


@pytest.mark.parametrize(("options", "priority", "loc", "value", "cap"), [
    ({"limits": {"run_s": 3600}}, None, ["options", "limits", "run_s"], 3600.0, DEFAULT.run_s),
    ({"limits": {"timing_s": 600}}, None, ["options", "limits", "timing_s"], 600.0, DEFAULT.timing_s),
    ({"limits": {"build_s": 3600}}, None, ["options", "limits", "build_s"], 3600.0, DEFAULT.build_s),
    ({"timing_budget_s": 120}, None, ["options", "timing_budget_s"], 120.0, DEFAULT.timing_budget_s),
    ({"trials": 100}, None, ["options", "trials"], 100, DEFAULT.trials),
    ({"timing_max_runs": 100000}, None, ["options", "timing_max_runs"], 100000, DEFAULT.timing_max_runs),
    ({}, 100, ["priority"], 100, DEFAULT.priority),
])
def test_a_job_over_a_cap_is_refused_naming_field_value_and_cap(queued_server, options, priority, loc, value, cap):
    with queued_server.client(USER_KEY) as client:
        reply = _submit(client, options, priority)
    assert reply.status_code == 422, reply.text
    (error,) = reply.json()["detail"]
    assert error["type"] == "cap_exceeded" and error["loc"] == ["body", *loc]
    assert f"= {value} is over this API key's cap of {cap}" in error["msg"], error


def test_a_job_at_the_caps_is_accepted_and_keeps_what_it_asked_for(queued_server):
    at_caps = {"limits": {"run_s": DEFAULT.run_s, "timing_s": DEFAULT.timing_s, "build_s": DEFAULT.build_s},
               "timing_budget_s": DEFAULT.timing_budget_s, "trials": DEFAULT.trials,
               "timing_max_runs": DEFAULT.timing_max_runs}
    with queued_server.client(USER_KEY) as client:
        reply = _submit(client, at_caps, priority=-100)
        assert reply.status_code == 202, reply.text
        stored = queued_server.server.config.app.state.store.get(reply.json()["id"])
    assert stored.submission["options"]["limits"]["run_s"] == DEFAULT.run_s and stored.priority == -100


def test_admin_keys_may_ask_for_the_models_bounds(queued_server):
    with queued_server.client(ADMIN_KEY) as admin:
        reply = _submit(admin, {"limits": {"run_s": 3600}, "trials": 100}, priority=100)
    assert reply.status_code == 202, reply.text


def test_a_keys_own_caps_from_the_keys_list(serve):
    live = serve(api_keys=parse_keys(f"{KEYS},{USER_KEY}x run_s=900 priority=50"))
    with live.client(f"{USER_KEY}x") as client:
        assert _submit(client, {"limits": {"run_s": 900}}, priority=50).status_code == 202
        over = _submit(client, {"limits": {"run_s": 901}})
        assert over.status_code == 422 and "cap of 900.0" in over.json()["detail"][0]["msg"]
    with live.client(USER_KEY) as client:  # the other keys keep the defaults
        assert _submit(client, {"limits": {"run_s": 900}}).status_code == 422


def test_batch_items_over_a_cap_get_their_own_error(queued_server):
    items = [{"reference": REFERENCE, "candidate": TRITON_CANDIDATE},
             {"reference": REFERENCE, "candidate": TRITON_CANDIDATE, "options": {"trials": 21}}]
    with queued_server.client(USER_KEY) as client:
        reply = client.post("/v1/evaluations:batch", json={"items": items}).json()
    assert (reply["accepted"], reply["rejected"]) == (1, 1)
    error = reply["items"][1]["error"]
    assert error["status"] == 422 and error["detail"][0]["loc"] == ["body", "items", 1, "options", "trials"]


def test_caps_are_read_once_and_checked_against_the_defaults():
    assert DEFAULT.with_items("run_s=600, trials=30", "X") == JobCaps(run_s=600.0, trials=30)
    with pytest.raises(ValueError, match="below 120.0"):
        DEFAULT.with_items("run_s=60", "KERNELJUDGE_JOB_CAPS")  # every default job would be refused
    with pytest.raises(ValueError, match="not a cap"):
        DEFAULT.with_items("gpu_hours=2", "KERNELJUDGE_JOB_CAPS")
    maxima = JobCaps.model_maxima()
    assert (maxima.run_s, maxima.trials, maxima.timing_budget_s, maxima.priority) == (3600, 100, 120, 100)


def test_settings_read_the_caps_from_the_environment(monkeypatch):
    from worker.config.api_keys import key_hash
    from worker.config.tree import load_config

    monkeypatch.setenv("KERNELJUDGE_API_KEYS", "plain,boss:admin,special trials=40")
    monkeypatch.setenv("KERNELJUDGE_JOB_CAPS", "run_s=200")
    monkeypatch.setenv("KERNELJUDGE_ADMIN_JOB_CAPS", "run_s=1800")
    keys = load_config().api.api_keys
    assert keys[key_hash("plain")].caps.run_s == 200
    assert keys[key_hash("special")].caps == JobCaps(run_s=200, trials=40)
    assert keys[key_hash("boss")].caps.run_s == 1800 and keys[key_hash("boss")].caps.trials == 100
