"""FastAPI application factory: `create_app(config)` wires store, workers, limits and routes, all from the
configuration tree it is given (worker/config/)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import OperationalError

from app import api_docs, dashboard, dashboard_api, routes_evaluations, routes_reward, routes_system
from app.body_checks import StrictJsonBody
from app.limits import BodySizeLimit, FailedAuthLimiter, RateLimiter
from app.metrics import RequestMetrics, ServiceMetrics
from app.service import Submitter
from app.views import clean_errors
from app.waiting import JobEvents
from worker.config.tree import KernelJudgeConfig, load_config
from worker.engine.gpu_monitor import gpu_monitor
from worker.jobs.callbacks import CallbackSender
from worker.jobs.launchers.celery_launcher import CeleryLauncher
from worker.jobs.launchers.embedded_launcher import EmbeddedLauncher, plan_identities
from worker.jobs.launchers.launcher import Launcher
from worker.jobs.store import Job, JobStore, store_url

log = logging.getLogger(__name__)

REAPER_INTERVAL_S = 30.0


def create_app(config: KernelJudgeConfig | None = None) -> FastAPI:
    """The app for this configuration (`kerneljudge serve` loads it once; default: load_config())."""
    config = config if config is not None else load_config()
    api, jobs = config.api, config.jobs
    store = JobStore(store_url(jobs))
    metrics = ServiceMetrics()
    events = JobEvents()
    callbacks = CallbackSender(jobs.callbacks)

    def finished(job: Job) -> None:  # a job the embedded lanes finished (Celery workers tell only the store)
        metrics.observe_finished(job)
        events.notify()
        callbacks.job_finished(job)

    # The one launcher of this process (worker/jobs/launchers/); the app uses only the Launcher interface.
    launcher: Launcher
    if jobs.broker_url:
        launcher = CeleryLauncher(jobs.broker_url, jobs.job_time_limit_s)
    else:
        launcher = EmbeddedLauncher(store, plan_identities(api.device, api.local_workers), finished,
                                    process_config=config)
    metrics.watch_store(store, launcher.workers_alive)
    # The lanes in this process (their watchdog's view); Celery workers' lanes live in their own processes.
    metrics.watch_lanes(launcher.lane_health)
    if any(identity.device == "cuda" for identity in launcher.identities):
        metrics.watch_gpus(gpu_monitor().readings)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        events.bind(asyncio.get_running_loop())
        await asyncio.to_thread(launcher.start)
        reaper = asyncio.create_task(_reap_overdue(store, jobs.job_time_limit_s, events))
        try:
            yield
        finally:
            reaper.cancel()
            await asyncio.to_thread(launcher.stop)
            callbacks.stop()
            store.close()

    app = FastAPI(
        title="kerneljudge",
        version="0.1.0",
        description="Sandboxed GPU-kernel evaluation with a reward API for RL trainers.",
        lifespan=lifespan,
        docs_url=None,  # served by api_docs without a CDN
        redoc_url=None,
    )
    app.state.config = config
    app.state.api = api  # the API section, which the routes read
    app.state.store = store
    app.state.metrics = metrics
    app.state.events = events
    app.state.launcher = launcher
    app.state.rate_limiter = RateLimiter(api.rate_limit_per_s, api.rate_burst)
    app.state.auth_failures = FailedAuthLimiter(api.auth_fail_rate_per_s, api.auth_fail_burst,
                                                api.auth_fail_global_rate_per_s)
    app.state.submitter = Submitter(store, api, launcher, metrics, callbacks)

    app.include_router(routes_evaluations.router)
    app.include_router(routes_system.router)
    app.include_router(routes_reward.router)
    app.include_router(dashboard_api.router)
    dashboard.install(app)
    api_docs.install(app)
    _install_error_handlers(app)
    # Added innermost first: the body limit runs before anything reads the body, and bounds what
    # the body check reads whole.
    app.add_middleware(StrictJsonBody)
    app.add_middleware(RequestMetrics, metrics=metrics)
    app.add_middleware(BodySizeLimit, max_bytes=api.max_body_bytes)
    return app


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _validation(_request: Request, exc: RequestValidationError) -> JSONResponse:
        # Name the field and say what is wrong; do not echo (possibly huge) inputs back.
        return JSONResponse({"detail": clean_errors(exc)}, status_code=422)

    @app.exception_handler(OperationalError)
    async def _store_down(_request: Request, exc: OperationalError) -> JSONResponse:
        log.error("job store error: %s", exc)
        return JSONResponse({"detail": "the job store is unavailable or busy; retry later"}, status_code=503,
                            headers={"Retry-After": "5"})


async def _reap_overdue(store: JobStore, limit_s: float, events: JobEvents) -> None:
    """Fail jobs in flight for longer than any job may run: their worker is gone."""
    margin = limit_s + 300.0
    while True:
        await asyncio.sleep(REAPER_INTERVAL_S)
        try:
            if await asyncio.to_thread(store.fail_overdue, margin):
                events.notify()
        except Exception:
            log.exception("could not check for overdue jobs")
