"""Real sandboxed CPU evaluations of library problems (Triton under its interpreter)."""

from __future__ import annotations

import shutil

import pytest

from worker.engine import evaluate
from worker.engine.settings import EngineSettings
from worker.models import EvalOptions, EvalRequest, EvalResult, PolicyConfig
from worker.problem_library.catalog import LibraryProblem


@pytest.fixture
def evaluate_on_cpu(tmp_path):
    """Evaluate a candidate kind of a problem at its CPU sizes, with its profile and tolerance."""
    if shutil.which("bwrap") is None:
        pytest.fail("bubblewrap is required for the engine tests: apt-get install bubblewrap")
    settings = EngineSettings.from_env()
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
