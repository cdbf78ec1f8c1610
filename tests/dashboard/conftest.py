"""One real server for the dashboard tests, with a few real evaluations finished on its CPU worker."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.service.helpers import OTHER_KEY, USER_KEY, LiveServer, make_config, start_server
from tests.service.sources import NO_CODE_COMPLETION, REFERENCE, TRITON_CANDIDATE, WRONG_CANDIDATE

PROBLEM_NAME = "add_one"
# Timing on CPU with a small budget: a real speedup in about a second.
TIMED_OPTIONS = {"trials": 1, "timing": True, "timing_budget_s": 0.2, "timing_min_runs": 3, "timing_max_runs": 5}
UNTIMED_OPTIONS = {"trials": 1, "timing": False}
# Spawning a process is rejected by the static policy before anything runs.
SPAWNING_CANDIDATE = TRITON_CANDIDATE.replace("import triton\n", "import triton\nimport subprocess\n").replace(
    "out = torch.empty_like(x)", "out = torch.empty_like(x)\n        subprocess.run(['true'])")
EXPECTED_VERDICTS = {"timed_1": "ok", "timed_2": "ok", "wrong": "incorrect", "spawning": "rejected",
                     "no_code": "invalid_input"}


@dataclass
class EvaluatedServer:
    live: LiveServer
    problem_id: str
    jobs: dict[str, dict]  # USER_KEY's finished jobs by kind: timed_1, timed_2, wrong, spawning, no_code
    other_job: dict  # OTHER_KEY's only job

    def client(self, key: str | None = USER_KEY):
        return self.live.client(key)


@pytest.fixture(scope="session")
def evaluated(tmp_path_factory) -> Iterator[EvaluatedServer]:
    live = start_server(make_config(tmp_path_factory.mktemp("dashboard") / "data", local_workers=1))
    try:
        with live.client(USER_KEY) as user, live.client(OTHER_KEY) as other:
            registered = user.post("/v1/problems", json={"reference": REFERENCE, "name": PROBLEM_NAME})
            assert registered.status_code == 201, registered.text
            problem_id = registered.json()["id"]
            bodies = {
                "timed_1": {"candidate": TRITON_CANDIDATE, "options": TIMED_OPTIONS},
                "timed_2": {"candidate": TRITON_CANDIDATE, "options": {**TIMED_OPTIONS, "seed": 2}},
                "wrong": {"candidate": WRONG_CANDIDATE, "options": UNTIMED_OPTIONS},
                "spawning": {"candidate": SPAWNING_CANDIDATE, "options": UNTIMED_OPTIONS},
                "no_code": {"completion": NO_CODE_COMPLETION, "options": UNTIMED_OPTIONS},
            }
            batch = user.post("/v1/evaluations:batch?wait=110",
                              json={"items": [{"problem_id": problem_id, **body} for body in bodies.values()]})
            assert batch.status_code == 200, f"evaluations did not all finish: {batch.text[:2000]}"
            jobs = dict(zip(bodies, (item["job"] for item in batch.json()["items"]), strict=True))
            verdicts = {kind: job["result"]["status"] for kind, job in jobs.items()}
            assert verdicts == EXPECTED_VERDICTS, verdicts
            theirs = other.post("/v1/evaluations?wait=30", json={"problem_id": problem_id,
                                                                 "completion": NO_CODE_COMPLETION})
            assert theirs.status_code == 200, theirs.text
        yield EvaluatedServer(live, problem_id, jobs, theirs.json())
    finally:
        live.stop()
