"""Invalid Unicode, non-finite numbers and bodies nested too deep are refused (422, naming where),
never stored; what the store holds is valid JSON; and the dashboard answers whatever older versions
stored."""

from __future__ import annotations

import json
import math
import uuid

import pytest
from pydantic import ValidationError

from app.body_checks import MAX_DEPTH, nesting_depth
from app.dashboard_stats import JobStats
from contract.requests import EvalOptions
from service.helpers import ADMIN_KEY, USER_KEY, make_config, start_server
from service.sources import REFERENCE, TRITON_CANDIDATE
from worker.config.api_keys import key_id_for
from worker.jobs.store import JobStore, NewJob, store_url
from worker.jobs.store.json_text import to_json_text
from worker.jobs.store.schema import JobRow, StoreMetaRow

LONE_SURROGATE = "\\ud800"  # as it is written inside a JSON string


def _post(client, path: str, raw: str | bytes):
    return client.post(path, content=raw, headers={"Content-Type": "application/json"})


def _evaluation(options: str = "{}", reference: str = json.dumps(REFERENCE)) -> str:
    return f'{{"reference": {reference}, "candidate": {json.dumps(TRITON_CANDIDATE)}, "options": {options}}}'


@pytest.mark.parametrize(("path", "raw", "loc"), [
    ("/v1/evaluations", _evaluation(reference=json.dumps(REFERENCE)[:-1] + LONE_SURROGATE + '"'),
     ["body", "reference"]),
    ("/v1/evaluations", f'{{"reference": {json.dumps(REFERENCE)}, "completion": "code {LONE_SURROGATE}"}}',
     ["body", "completion"]),
    ("/v1/problems", f'{{"reference": {json.dumps(REFERENCE)}, "name": "x{LONE_SURROGATE}"}}', ["body", "name"]),
    ("/v1/evaluations:batch", '{"items": [{"candidate": "\\udc00 low"}]}', ["body", "items", 0, "candidate"]),
    ("/get_reward", f'{{"query": ["{LONE_SURROGATE}"], "labels": ["x"]}}', ["body", "query", 0]),
])
def test_a_lone_surrogate_anywhere_is_422_naming_where(queued_server, path, raw, loc):
    with queued_server.client(USER_KEY) as client:
        reply = _post(client, path, raw)
        assert reply.status_code == 422, reply.text
        (error,) = reply.json()["detail"]
        assert error["loc"] == loc and "surrogate" in error["msg"], error
        # The server is still there and still takes proper text (an escaped pair is a real character).
        fine = _post(client, "/v1/evaluations", _evaluation(reference=json.dumps(REFERENCE + "# \U0001f600\n")))
        assert fine.status_code == 202, fine.text


def test_a_body_that_is_not_utf8_is_422(queued_server):
    with queued_server.client(USER_KEY) as client:
        reply = _post(client, "/v1/evaluations", b'{"reference": "\xff\xfe", "candidate": "x"}')
    assert reply.status_code == 422 and "UTF-8" in reply.json()["detail"][0]["msg"], reply.text


DEEP_ROUTES = ["/v1/evaluations", "/v1/problems", "/get_reward"]


def _nested(shape: str, depth: int) -> bytes:
    if shape == "array":
        return b"[" * depth + b"]" * depth
    return b'{"a": ' * depth + b"1" + b"}" * depth


def _assert_too_deep(reply, depth: int) -> None:
    assert reply.status_code == 422, reply.text[:300]
    (error,) = reply.json()["detail"]
    assert error["type"] == "json_too_deep" and error["loc"] == ["body"], error
    assert f"{depth} levels deep" in error["msg"] and f"limit of {MAX_DEPTH}" in error["msg"], error


@pytest.mark.parametrize("shape", ["array", "object"])
@pytest.mark.parametrize("path", DEEP_ROUTES)
def test_a_body_nested_too_deep_is_422_at_any_depth_with_or_without_a_key(queued_server, path, shape):
    """Parsing recurses once a level: 1200 levels were a RecursionError and a 500, even unauthenticated."""
    for key in (USER_KEY, None):
        with queued_server.client(key) as client:
            for depth in (900, 1200, 10_000, 1_000_000):
                _assert_too_deep(_post(client, path, _nested(shape, depth)), depth)
            assert client.get("/v1/health").status_code == 200


@pytest.mark.parametrize("content_type", [
    "APPLICATION/JSON; charset=utf-8", "application/problem+json", "application/json\xa0", None])
def test_the_depth_is_checked_for_every_body_the_route_may_read_as_json(queued_server, content_type):
    headers = {"Content-Type": content_type.encode("latin-1")} if content_type else {}
    with queued_server.client(None) as client:
        reply = client.post("/get_reward", content=_nested("array", 5000), headers=headers)
    _assert_too_deep(reply, 5000)


def test_a_body_in_utf16_is_422_before_anything_parses_it(queued_server):
    """json.loads(bytes) reads UTF-16 too, where escapes hide from a byte scan: such bodies are refused."""
    deep = '["\\"", ' + "[" * 5000 + "]" * 5000 + "]"
    with queued_server.client(None) as client:
        reply = _post(client, "/get_reward", deep.encode("utf-16-le"))
    assert reply.status_code == 422, reply.text
    (error,) = reply.json()["detail"]
    assert error["type"] == "unicode_error" and "UTF-8" in error["msg"], error


def test_the_depth_limit_is_exact(queued_server):
    def problem(depth: int) -> str:  # the object itself is one level
        return f'{{"reference": {json.dumps(REFERENCE)}, "junk": {"[" * (depth - 1)}{"]" * (depth - 1)}}}'

    with queued_server.client(USER_KEY) as client:
        at_limit = _post(client, "/v1/problems", problem(MAX_DEPTH))
        assert at_limit.status_code == 422, at_limit.text
        assert [e["type"] for e in at_limit.json()["detail"]] == ["extra_forbidden"], at_limit.text  # the model's
        _assert_too_deep(_post(client, "/v1/problems", problem(MAX_DEPTH + 1)), MAX_DEPTH + 1)


def test_brackets_inside_strings_do_not_count(queued_server):
    """Brackets, escaped quotes and backslashes inside strings are text: a normal request goes through."""
    comment = "# " + "[{" * 20_000 + ' "quoted [" \\" \\ ' + "]}" * 3 + "\\"  # ends in a backslash
    reference = REFERENCE + comment
    with queued_server.client(USER_KEY) as client:
        created = _post(client, "/v1/problems", f'{{"reference": {json.dumps(reference)}, "name": "[[{{\\\\"}}')
        assert created.status_code == 201, created.text[:300]
        assert client.get(f"/v1/problems/{created.json()['id']}").json()["reference"] == reference
        queued = _post(client, "/v1/evaluations", _evaluation(reference=json.dumps(reference)))
        assert queued.status_code == 202, queued.text[:300]
        assert _post(client, "/v1/evaluations", _evaluation()).status_code == 202


@pytest.mark.parametrize(("raw", "depth"), [
    (b"", 0), (b"1", 0), (b"{}", 1), (b'[[], {"a": [1, {}]}]', 4),
    (b'"[[[{{{"', 0), (rb'{"a\"[[": "\\", "b": [[1]]}', 3), (rb'["\\\"[[[", []]', 2),
    (rb'["\\\\", [[]]]', 3), ('["é[{", ["ü"]]'.encode(), 2), (b'["open [[[[', 1),
    (b"[" * 1_000_000, 1_000_000),
])
def test_nesting_depth_reads_strings_and_escapes_as_json_does(raw, depth):
    assert nesting_depth(raw) == depth
    if raw and raw[-1:] in b"]}01":  # the valid ones: the same depth as parsed
        assert depth == _parsed_depth(json.loads(raw))


def _parsed_depth(value) -> int:
    children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else None
    return 0 if children is None else 1 + max(map(_parsed_depth, children), default=0)


@pytest.mark.parametrize(("options", "loc"), [
    ('{"atol": 1e999}', ["options", "atol"]),
    ('{"rtol": -1e999}', ["options", "rtol"]),
    ('{"atol": NaN}', ["options", "atol"]),
    ('{"timing_budget_s": Infinity}', ["options", "timing_budget_s"]),
    ('{"limits": {"run_s": 1e400}}', ["options", "limits", "run_s"]),
    ('{"reward_preset": "custom", "reward_weights": {"correct": -Infinity}}', ["options", "reward_weights", "correct"]),
    ('{"policy": {"flagged_reward": 1e999}}', ["options", "policy", "flagged_reward"]),
])
def test_a_non_finite_number_anywhere_is_422_naming_where(queued_server, options, loc):
    with queued_server.client(USER_KEY) as client:
        reply = _post(client, "/v1/evaluations", _evaluation(options))
    assert reply.status_code == 422, reply.text
    (error,) = reply.json()["detail"]
    assert error["loc"] == ["body", *loc] and "not a finite number" in error["msg"], error


def test_reward_weights_that_would_overflow_are_refused(queued_server):
    options = '{"reward_preset": "custom", "reward_weights": {"correct": 1e308, "speedup": 1e308}}'
    with queued_server.client(USER_KEY) as client:
        reply = _post(client, "/v1/evaluations", _evaluation(options))
    assert reply.status_code == 422, reply.text
    assert {tuple(e["loc"][-2:]) for e in reply.json()["detail"]} == {("reward_weights", "correct"),
                                                                      ("reward_weights", "speedup")}


def test_the_models_refuse_non_finite_numbers_built_in_python():
    for bad in (math.inf, -math.inf, math.nan):
        with pytest.raises(ValidationError):
            EvalOptions(atol=bad)
    with pytest.raises(ValidationError):
        EvalOptions(seed=2**64)


def test_stored_json_is_always_valid_json(store):
    """What the engine may produce (NaN, infinities, lone surrogates, NUL in a log) is stored as JSON
    that strict parsers and the database's JSON functions read; submissions keep NUL."""
    owner = f"key_{uuid.uuid4().hex[:16]}"  # PostgreSQL is shared across runs: aggregate this key's jobs only
    problem, _ = store.put_problem(f"class Model: pass\n# {owner}\n")
    job, _ = store.create_job(NewJob(problem_id=problem.id, api_key_id=owner,
                                     submission={"candidate": "a\x00b", "options": {"atol": math.inf}}))
    store.claim(job.id, "w", None)
    result = {"status": "ok", "speedup": math.nan, "reward": math.inf, "stages": {"run": -math.inf},
              "candidate_log": "bad \ud800 and nul \x00"}
    assert store.finish(job.id, 1, result, "ok")
    with store.engine.connect() as conn:
        submission, stored = conn.execute(
            JobRow.__table__.select().with_only_columns(JobRow.submission, JobRow.result)
            .where(JobRow.id == job.id)).one()
    strict = json.loads(stored, parse_constant=lambda token: pytest.fail(f"{token} in stored JSON"))
    assert strict["speedup"] == "NaN" and strict["reward"] == "Infinity" and strict["stages"]["run"] == "-Infinity"
    assert "\x00" not in strict["candidate_log"] and "\ud800" not in strict["candidate_log"]
    assert json.loads(submission)["candidate"] == "a\x00b"
    assert JobStats(store).stages(owner, 0.0) == []  # no numeric stage time: nothing to aggregate, no error


def test_json_text_keeps_real_characters_and_plain_values():
    value = {"text": "caf\u00e9 \U0001f600", "n": 1.5, "i": 10**30, "none": None}
    assert json.loads(to_json_text(value)) == value


# Rows as versions before this one could write them (json.dumps: NaN/Infinity tokens, "\ud800",
# "\u0000"), planted straight into the store; then rows no version wrote (fields of the wrong JSON
# type, text that is not JSON), as if someone edited the store.
OLD_VERSION_RESULTS = [
    '{"status": "ok", "correct": true, "speedup": NaN, "reward": Infinity, "stages": {"run": NaN}, "rules": []}',
    '{"status": "ok", "speedup": 2.0, "reward": 0.5, "stages": {"run": 1.0}, "candidate_log": "\\ud800 \\u0000",'
    ' "rules": [{"rule": "KJ-X", "severity": "flag", "message": "m", "line": -Infinity}]}',
]
WRONG_TYPES = [
    '{"status": "ok", "speedup": "fast", "stages": [1, 2], "rules": {"rule": "not a list"}}',
    '{"status": "ok", "stages": {"run": "slow"}, "rules": ["just text", 5]}',
]
# PostgreSQL cannot read around text that is not JSON inside a query (no version writes such text).
NOT_JSON = "not json at all"
DASHBOARD = ["live", "outcomes", "speedups", "rules", "stages", "jobs", "jobs?outcome=ok"]


def _plant(store: JobStore, owner: str) -> list[str]:
    problem, _ = store.put_problem(f"class Model: pass\n# planted {owner}\n", name="planted")
    ids = []
    sqlite = store.engine.dialect.name == "sqlite"
    for raw in [*OLD_VERSION_RESULTS, *WRONG_TYPES, *([NOT_JSON] if sqlite else [])]:
        job, _ = store.create_job(NewJob(problem_id=problem.id, api_key_id=owner,
                                         submission={"candidate": "x", "options": {}}))
        store.claim(job.id, "w", None)
        store.finish(job.id, 1, {"status": "ok"}, "ok")
        with store.engine.begin() as conn:
            conn.execute(JobRow.__table__.update().where(JobRow.id == job.id).values(result=raw))
        ids.append(job.id)
    return ids


def _forget_the_repair(store: JobStore) -> None:
    with store.engine.begin() as conn:
        conn.execute(StoreMetaRow.__table__.delete())


def _dashboard_answers(live, planted: list[str]) -> None:
    for key in (USER_KEY, ADMIN_KEY):
        with live.client(key) as client:
            for path in DASHBOARD:
                reply = client.get(f"/v1/dashboard/{path}")
                assert reply.status_code == 200, (key, path, reply.text)
            for job_id in planted:
                assert client.get(f"/v1/dashboard/jobs/{job_id}").status_code == 200
                job = client.get(f"/v1/evaluations/{job_id}")
                assert job.status_code == 200, job.text
            unreadable = client.get(f"/v1/evaluations/{planted[-1]}").json()
            assert unreadable["result"] is None and "cannot be read" in unreadable["error"]


def test_the_dashboard_answers_on_rows_an_older_version_stored(tmp_path):
    data_dir = tmp_path / "data"
    config = make_config(data_dir)
    store = JobStore(store_url(config.jobs))
    planted = _plant(store, key_id_for(USER_KEY))
    _forget_the_repair(store)  # the database an older version left has no record of it
    store.close()
    live = start_server(config)  # opening the store repairs what it can, once
    try:
        _dashboard_answers(live, planted)
        stored = live.server.config.app.state.store.get(planted[0]).result
        assert stored["speedup"] == "NaN"  # re-encoded: valid JSON now
        # Rows planted while it runs (SQLite reads around them) do not break it either.
        more = _plant(live.server.config.app.state.store, key_id_for(USER_KEY))
        _dashboard_answers(live, more)
        with live.client(USER_KEY) as client:
            export = client.get("/v1/evaluations:export")
        assert export.status_code == 200
        lines = [line for line in export.text.splitlines() if line]
        for line in lines:
            json.loads(line, parse_constant=lambda token: pytest.fail(f"{token} in the export"))
    finally:
        live.stop()


def test_the_repair_makes_old_rows_readable_by_the_databases_json_functions(store):
    owner = f"key_{uuid.uuid4().hex[:16]}"
    planted = _plant(store, owner)
    _forget_the_repair(store)
    reopened = JobStore(store.url)  # as the next version opening this database
    try:
        stats = JobStats(reopened)
        assert stats.speedups(owner, 0.0, 10) is not None
        assert [r.rule for r in stats.rules(owner, 0.0, 10)] == ["KJ-X"]
        assert {s.stage for s in stats.stages(owner, 0.0)} == {"run"}
        assert len(stats.recent_jobs(owner, 10)) == len(planted)
        first = reopened.get(planted[0]).result
        assert first["speedup"] == "NaN" and first["reward"] == "Infinity"
    finally:
        reopened.close()
