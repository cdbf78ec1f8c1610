"""On the GPU: the per-candidate Triton cache is published and reused, judges' device memory is measured,
and the persisted compile baseline is measured once and scales the job's own speedup."""

from __future__ import annotations

import math

import pytest

from contract.requests import EvalOptions, EvalRequest
from contract.statuses import EvalStatus
from tests.engine.conftest import HONEST_SILU, SILU_REFERENCE
from worker.engine import evaluate
from worker.engine.build import triton_cache
from worker.engine.reference.judge_start import key_of
from worker.engine.reference.reference_cache import cache_for
from worker.engine.timing.baselines import COMPILE_BASELINE, BaselineKey

pytestmark = pytest.mark.gpu

OPTIONS = {"device": "cuda", "trials": 2, "timing_budget_s": 0.5}


def _request(**options) -> EvalRequest:
    return EvalRequest(reference=SILU_REFERENCE, candidate=HONEST_SILU, options=EvalOptions(**OPTIONS, **options))


def test_a_candidates_triton_kernels_are_kept_for_its_next_run(settings):
    first = evaluate(_request(seed=1), settings=settings)
    assert first.status == EvalStatus.ok, first.error
    assert first.extra.triton_cache == "published"  # the runner sent what it compiled before it closed
    folder = triton_cache.folder_for(settings.triton_cache, HONEST_SILU) / triton_cache.CACHE_DIR_NAME
    assert any(path.suffix == ".cubin" for path in folder.rglob("*")), sorted(folder.rglob("*"))
    second = evaluate(_request(seed=1), settings=settings)
    assert second.status == EvalStatus.ok, second.error
    assert second.extra.triton_cache is None  # started from the kept kernels: nothing new to send


def test_a_judges_device_memory_is_measured_for_the_cache(settings):
    result = evaluate(_request(seed=2, compile_baseline=False), settings=settings)
    assert result.status == EvalStatus.ok, result.error
    (entry,) = cache_for(settings).entries_of(key_of(_request(seed=2, compile_baseline=False), settings))
    assert entry.held.device_bytes > 100 * 1024**2  # at least a CUDA context
    assert entry.held.host_bytes > 0 and entry.miss_cost_s > 0


def test_the_compile_baseline_is_measured_once_and_scales_the_jobs_speedup(settings):
    first = evaluate(_request(seed=3, reward_baseline="compile"), settings=settings)
    assert first.status == EvalStatus.ok, first.error
    assert first.extra.compile_baseline["state"] == "waited"
    key = BaselineKey.of(SILU_REFERENCE, "cuda", first.environment.gpu_name)
    record = settings.baseline_book().get(key, COMPILE_BASELINE)
    assert record is not None and record.available, record
    timing = first.timing
    assert math.isclose(timing.compile_speedup, timing.speedup * record.eager_median_ms / record.compiled_median_ms)
    second = evaluate(_request(seed=3), settings=settings)
    assert second.extra.compile_baseline["state"] == "attached"
