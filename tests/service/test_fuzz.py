"""Schemathesis fuzzing of the OpenAPI spec: no input may produce a server error (5xx; a
documented 503 such as /v1/ready without workers is an answer, not an error).

Runs each operation's generated cases through Hypothesis directly (schemathesis' pytest plugin
does not load under pytest 9), against the real server over loopback.
"""

from __future__ import annotations

import json

import pytest

schemathesis = pytest.importorskip("schemathesis", reason="schemathesis is a dev dependency (pip install -e .[dev])")

import httpx  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from service.helpers import USER_KEY, make_config, start_server  # noqa: E402

MAX_EXAMPLES = 30  # per operation: bounded so the suite stays fast


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory):
    # No workers (nothing is evaluated); waits capped short so generated ?wait= values cannot stall.
    live = start_server(make_config(tmp_path_factory.mktemp("fuzz"), local_workers=0, max_wait_s=0.2,
                                      reward_wait_s=0.2, rate_limit_per_s=0))
    yield live
    live.stop()


def test_no_server_errors(fuzz_server):
    schema = schemathesis.openapi.from_url(f"{fuzz_server.base_url}/openapi.json")
    headers = {"Authorization": f"Bearer {USER_KEY}"}
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 10, [op.label for op in operations]
    statuses: list[int] = []
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def fuzz(case):
            response = case.call(base_url=fuzz_server.base_url, headers=headers)
            statuses.append(response.status_code)
            documented = {str(code) for code in (case.operation.definition.raw.get("responses") or {})}
            # 503 is an answer, not an error, where documented (queue full, not ready): never a 500.
            allowed = response.status_code < 500 or (response.status_code == 503 and "503" in documented)
            assert allowed, f"{case.method} {case.formatted_path} -> {response.status_code}: {response.text[:500]}"

        fuzz()
    # Generated inputs really reached the handlers (not only auth or validation answers).
    assert len(statuses) >= 5 * len(operations)
    assert {200, 202, 422} <= set(statuses), sorted(set(statuses))


# What no JSON request may carry (app/body_checks.py): a lone surrogate, numbers that are not finite.
BAD_VALUES = ['"text \\ud800 more"', '"\\udfff"', "1e999", "-1e400", "NaN", "Infinity", "-Infinity"]
_SENTINEL = "__kerneljudge_bad_value__"


def _leaves(value, path=()):
    """Paths to every scalar in a JSON value (dict keys and list indexes)."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _leaves(item, (*path, index))
    else:
        yield path


def _with_bad_value(body, path, bad: str) -> str:
    """`body` as JSON text with the scalar at `path` (or a new member, when path is empty) replaced by `bad`."""
    if path:
        container = body
        for part in path[:-1]:
            container = container[part]
        container[path[-1]] = _SENTINEL
    elif isinstance(body, dict):
        body["kj"] = _SENTINEL
    else:
        body = [body, _SENTINEL]
    return json.dumps(body).replace(f'"{_SENTINEL}"', bad)


def test_invalid_unicode_and_non_finite_numbers_are_422_anywhere(fuzz_server):
    """Generated bodies of every JSON operation, with one value anywhere replaced by a bad one:
    always 422, never a server error, whatever else the body holds."""
    schema = schemathesis.openapi.from_url(f"{fuzz_server.base_url}/openapi.json")
    operations = [op for op in (result.ok() for result in schema.get_all_operations())
                  if op.method.upper() == "POST" and op.body]
    assert len(operations) >= 5, [op.label for op in operations]
    statuses: list[int] = []
    with httpx.Client(base_url=fuzz_server.base_url, headers={"Authorization": f"Bearer {USER_KEY}"},
                      timeout=60) as client:
        for operation in operations:

            @given(case=operation.as_strategy(), data=st.data())
            @settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck),
                      database=None)
            def fuzz(case, data):
                body = case.body if isinstance(case.body, (dict, list)) else {}
                paths = list(_leaves(body))
                path = data.draw(st.sampled_from(paths)) if paths else ()
                raw = _with_bad_value(body, path, data.draw(st.sampled_from(BAD_VALUES)))
                response = client.post(case.formatted_path, params=case.query, content=raw,
                                       headers={"Content-Type": "application/json"})
                statuses.append(response.status_code)
                assert response.status_code == 422, f"{case.formatted_path} {raw[:300]} -> {response.text[:300]}"

            fuzz()
    assert len(statuses) >= MAX_EXAMPLES * len(operations) // 2
