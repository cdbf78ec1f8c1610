"""Fixtures of the problem-library tests: real sandboxed CPU evaluations of library problems (Triton under its
interpreter), and a live server for the API and CLI tests."""

from __future__ import annotations

import shutil

import pytest

from contract.requests import EvalOptions, EvalRequest, PolicyConfig
from contract.results import EvalResult
from problem_library.catalog import LibraryProblem
from tests.service.helpers import make_config, start_server
from worker.engine import evaluate
from worker.engine.engine_settings import EngineSettings


@pytest.fixture
def evaluate_on_cpu(tmp_path):
    """Evaluate a candidate kind of a problem at its CPU sizes, with its profile and tolerance."""
    if shutil.which("bwrap") is None:
        pytest.fail("bubblewrap is required for the engine tests: apt-get install bubblewrap")
    settings = EngineSettings.configured()
    settings.work_root = tmp_path / "work"
    settings.build_cache = tmp_path / "cache"
    settings.cpu_threads = 1

    def run(problem: LibraryProblem, kind: str) -> EvalResult:
        options = EvalOptions(trials=2, timing=False, policy=PolicyConfig(profile=problem.profile), atol=problem.atol,
                              rtol=problem.rtol)
        request = EvalRequest(reference=problem.reference_for_cpu(), candidate=problem.candidate(kind),
                              options=options)
        return evaluate(request, settings=settings)

    return run


@pytest.fixture
def live_server(tmp_path):
    """The real app on a free port, with no workers and a batch limit of 4 items."""
    server = start_server(make_config(tmp_path / "data", local_workers=0, max_batch_items=4))
    yield server
    server.stop()
