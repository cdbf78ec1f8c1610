"""POST /v1/problems:batch and `kerneljudge serve --problems` against the real app."""

from __future__ import annotations

import argparse

import pytest
import uvicorn

from app import serve_cli
from problem_library.catalog import get_problem, select


def _item(name: str) -> dict:
    problem = get_problem(name)
    return {"reference": problem.reference, "name": problem.name, "profile": problem.profile}


def test_batch_registers_a_set_with_per_item_results(live_server):
    with live_server.client() as http:
        body = {"items": [_item("giou_varlen"), {"reference": "x = 1", "profile": "everything"}, _item("lstm_cell")]}
        response = http.post("/v1/problems:batch", json=body)
        assert response.status_code == 200, response.text
        result = response.json()
        assert (result["registered"], result["created"], result["rejected"]) == (2, 2, 1)
        first, bad, third = result["items"]
        assert first["problem"]["id"] == get_problem("giou_varlen").problem_id and first["created"] is True
        assert third["problem"]["profile"] == "partial" and third["problem"]["name"] == "lstm_cell"
        assert bad["problem"] is None and bad["error"]["status"] == 422
        assert bad["error"]["detail"][0]["loc"][:3] == ["body", "items", 1]

        again = http.post("/v1/problems:batch", json={"items": [_item("giou_varlen")]}).json()
        assert (again["registered"], again["created"]) == (1, 0) and again["items"][0]["created"] is False
        stored = http.get(f"/v1/problems/{get_problem('lstm_cell').problem_id}").json()
        assert stored["name"] == "lstm_cell" and stored["profile"] == "partial"


def test_batch_over_the_size_limit_or_without_a_key_is_refused(live_server):
    with live_server.client() as http:
        response = http.post("/v1/problems:batch", json={"items": [_item("silu")] * 5})
        assert response.status_code == 422 and "at most 4 items" in response.text
        assert http.post("/v1/problems:batch", json={"items": []}).status_code == 422
    with live_server.client(key=None) as anonymous:
        assert anonymous.post("/v1/problems:batch", json={"items": [_item("silu")]}).status_code == 401


def _serve_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    serve_cli.add_arguments(parser)
    return parser.parse_args(["--device", "cpu", "--workers", "0", *argv])


@pytest.fixture
def serve_env(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELJUDGE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("KERNELJUDGE_API_KEYS", "serve-test-key")
    monkeypatch.delenv("KERNELJUDGE_DATABASE_URL", raising=False)
    monkeypatch.delenv("KERNELJUDGE_BROKER_URL", raising=False)
    monkeypatch.setenv("KERNELJUDGE_SKIP_SELFCHECK", "1")
    served = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: served.append(app))
    return served


def test_serve_with_problems_registers_the_set_before_serving(serve_env):
    assert serve_cli.run(_serve_args("--problems", "loss", "--problems", "silu")) == 0
    [app] = serve_env
    store = app.state.store
    for problem in select(["loss", "silu"]):
        stored = store.get_problem(problem.problem_id)
        assert stored is not None and stored.name == problem.name and stored.profile == problem.profile
    assert store.get_problem(get_problem("matmul").problem_id) is None
    store.close()
    # Starting again over the same database registers nothing twice and still serves.
    assert serve_cli.run(_serve_args("--problems", "all")) == 0
    serve_env[1].state.store.close()


def test_serve_with_an_unknown_set_stops_and_names_the_sets(serve_env, capsys):
    assert serve_cli.run(_serve_args("--problems", "sorting")) == 2
    assert "neither a problem nor a set" in capsys.readouterr().err and not serve_env
