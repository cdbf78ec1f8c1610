"""Starting a problem's judge: on a job's path (a cache miss), or ahead of it while its candidate builds.

A judge starts in two steps: the sandbox and the reference's import (host work, on the build cores,
so that it never competes with a job timing on the lane's reserved cores), then `generate`, which
runs the reference on the device, holding it shared over its device steps only and letting a waiting
timing go first between steps (generate_hold). It stays on the shared cores; only a timing window moves it
to the lane's reserved cores (cpu_plan.timing_cores). What it cost and what it holds are measured for the
cache (its miss cost and its share of the memory budget).

`JudgeWarmer` starts judges ahead of their jobs: the service's pipeline asks it as soon as it
claims a job (worker/jobs/pipeline.py), so that the reference stage (10-40 s for a new judge on an
H100 under a batch) overlaps the candidate's build instead of following it. One judge starts at a time per
device slot; a job whose problem's judge is starting waits for it (reference_cache.warming).
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from contract.requests import EvalRequest
from contract.results import JudgeStartNote
from worker.engine.engine_settings import EngineSettings
from worker.engine.launch import UserFailure
from worker.engine.memory_budget import measure_judge
from worker.engine.policy.registry import is_disabled
from worker.engine.process_tree import tree_cpu_s
from worker.engine.reference.generate_hold import GenerateHold
from worker.engine.reference.judge import JudgeSession, JudgeStartFailure
from worker.engine.reference.reference_cache import (
    CachedReference,
    ProblemKey,
    ReferenceCache,
    cache_for,
    new_seeds,
)
from worker.engine.verdict.verification import SHAPE_RULE

log = logging.getLogger(__name__)

# A judge started ahead waits at most this long for its reference to start and generate.
WARM_LIMIT_S = 600.0


def shape_check_of(request: EvalRequest) -> bool:
    return not is_disabled(SHAPE_RULE, request.options.policy.disabled_rules)


def key_of(request: EvalRequest, settings: EngineSettings) -> ProblemKey:
    return ProblemKey.of(request.reference, request.options, settings, shape_check=shape_check_of(request))


def start_entry(request: EvalRequest, settings: EngineSettings, key: ProblemKey, deadline: float,
                hold: GenerateHold) -> CachedReference:
    """A new judge for `request`'s problem, generated and measured (UserFailure: the reference failed;
    the judge is closed then). `hold` holds the device over `generate`'s device steps (generate_hold)."""
    opts = request.options
    seeds = new_seeds(opts.seed, opts.trials, settings.timing_pool_size)
    if not shape_check_of(request):
        seeds["shape_seeds"] = []
    plan = settings.cpu_plan()
    judge = JudgeSession(request.reference, opts, settings)
    judge.session.process.spec.cpus = plan.build_cpus or None
    started = time.monotonic()
    try:
        judge.launch(deadline)
        launched = time.monotonic()
        launch_cpu_s = tree_cpu_s(judge.pid)
        generated = judge.generate(seeds, deadline, shape_max_bytes=settings.shape_trial_max_bytes, hold=hold)
    except BaseException:
        judge.close()
        raise
    ended = time.monotonic()
    cpu_s = tree_cpu_s(judge.pid)
    entry = CachedReference(key, judge, seeds, miss_cost_s=max(ended - started, 0.01),
                            start=JudgeStartNote(launch_s=round(launched - started, 3),
                                                 device_wait_s=round(hold.device_wait_s, 3),
                                                 generate_s=round(ended - launched - hold.device_wait_s, 3),
                                                 steps_s=dict(hold.steps_s), yields=hold.yields,
                                                 cpu_s=round(cpu_s, 2) if cpu_s is not None else None,
                                                 launch_cpu_s=round(launch_cpu_s, 2) if launch_cpu_s is not None
                                                 else None,
                                                 start_cpu_s=dict(judge.session.start_cpu_s)))
    entry.held = measure_judge(judge.pid, generated.device_bytes, on_gpu=opts.device.value == "cuda",
                               sealed_bytes=generated.input_bytes)
    return entry


class JudgeWarmer:
    """Judges started ahead of their jobs, one at a time per device (see the module docstring)."""

    def __init__(self, cache: ReferenceCache, threads: int = 1) -> None:
        self.cache = cache
        self._pool = ThreadPoolExecutor(max(1, threads), thread_name_prefix="judge-warm")

    def warm(self, request: EvalRequest, settings: EngineSettings) -> bool:
        """Start `request`'s judge in the background unless one is cached or starting; True if started."""
        if settings.reference_cache_entries <= 0:
            return False
        key = key_of(request, settings)
        if not self.cache.begin_warming(key):
            return False
        try:
            self._pool.submit(self._start, request, settings, key)
        except RuntimeError:  # shut down
            self.cache.end_warming(key)
            return False
        return True

    def _start(self, request: EvalRequest, settings: EngineSettings, key: ProblemKey) -> None:
        hold = GenerateHold.on_schedule(settings.gpu_schedule)
        try:
            entry = start_entry(request, settings, key, time.monotonic() + WARM_LIMIT_S, hold)
        except UserFailure as failure:
            # The job's own reference stage starts it again and reports the failure as its verdict.
            log.info("a judge started ahead failed (%s); its job starts its own", failure.kind)
        except JudgeStartFailure as failed:
            log.warning("a judge started ahead did not start (%s: %s); its job tries again", failed.failure.kind,
                        failed.failure.message[:300])
        except Exception:  # noqa: BLE001 - a warm-up must never take the worker down
            log.exception("starting a judge ahead failed")
        else:
            entry.prestarted = True
            self.cache.add(entry, hold=False)
        finally:
            self.cache.end_warming(key)


_warmers: dict[int, JudgeWarmer] = {}
_warmers_lock = threading.Lock()


def warmer_for(settings: EngineSettings) -> JudgeWarmer:
    cache = cache_for(settings)
    with _warmers_lock:
        warmer = _warmers.get(id(cache))
        if warmer is None:
            # As many judges start at once as jobs may share the device (each generates on it).
            threads = settings.gpu_schedule.sharers if settings.gpu_schedule is not None else 1
            warmer = _warmers[id(cache)] = JudgeWarmer(cache, threads)
        return warmer


def warm_reference(request: EvalRequest, settings: EngineSettings) -> bool:
    """The engine's entry point for the service: start this request's judge ahead of its job."""
    return warmer_for(settings).warm(request, settings)
