"""Prometheus metrics. Job counts and queue depth are read from the store at scrape time, so they
are right whatever process ran the jobs; stage latencies are observed by the embedded workers."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from worker.engine.gpu_monitor import GpuReading
from worker.jobs.pipeline import LaneHealth
from worker.jobs.store import Job, JobStore

log = logging.getLogger(__name__)

STAGE_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
API_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10, 60)


class _StoreCollector:
    def __init__(self, store: JobStore, workers_alive):
        self.store = store
        self.workers_alive = workers_alive

    def collect(self):
        jobs = GaugeMetricFamily("kerneljudge_jobs", "Jobs in the store by service status.", labels=["status"])
        verdicts = GaugeMetricFamily("kerneljudge_job_outcomes", "Finished jobs by status and verdict.",
                                     labels=["status", "verdict"])
        depth = GaugeMetricFamily("kerneljudge_queue_depth", "Jobs waiting for a worker.")
        workers = GaugeMetricFamily("kerneljudge_workers", "Workers (one per GPU) that answer.")
        try:
            counts = self.store.status_counts()
            for status, count in sorted(counts.items()):
                jobs.add_metric([status], count)
            for (status, verdict), count in sorted(self.store.verdict_counts().items()):
                verdicts.add_metric([status, verdict], count)
            depth.add_metric([], counts.get("queued", 0))
        except Exception:
            log.exception("metrics: could not read the job store")
        workers.add_metric([], self.workers_alive())
        yield from (jobs, verdicts, depth, workers)


class _LaneCollector:
    """The embedded workers' device lanes as their watchdog sees them (worker/jobs/watchdog.py), at scrape time."""

    def __init__(self, lanes: Callable[[], list[LaneHealth]]):
        self.lanes = lanes

    def collect(self):
        stalled = GaugeMetricFamily("kerneljudge_lane_stalled", "1 while a device lane is stalled (has jobs, no "
                                    "progress for KERNELJUDGE_WATCHDOG_STALL_S) and not yet restarted.",
                                    labels=["lane"])
        restarts = CounterMetricFamily("kerneljudge_lane_restarts", "Device lane restarts by the watchdog.",
                                       labels=["lane"])
        quiet = GaugeMetricFamily("kerneljudge_lane_seconds_since_progress", "Seconds since a busy device lane's "
                                  "last stage transition (0 while it holds no job).", labels=["lane"])
        try:
            for lane in self.lanes():
                stalled.add_metric([lane.name], int(lane.stalled))
                restarts.add_metric([lane.name], lane.restarts)
                quiet.add_metric([lane.name], lane.last_progress_s_ago if lane.busy else 0.0)
        except Exception:
            log.exception("metrics: could not read the lanes")
        yield from (stalled, restarts, quiet)


class _GpuCollector:
    """What the GPUs did, measured (worker/engine/gpu_monitor.py): busy seconds (their difference over a
    batch is its GPU busy time), utilisation and memory now, and the highest memory share seen."""

    def __init__(self, readings: Callable[[], list[GpuReading]]):
        self.readings = readings

    def collect(self):
        busy = CounterMetricFamily("kerneljudge_gpu_busy_seconds", "Seconds in which a kernel ran on the GPU "
                                   "(nvidia-smi utilization.gpu integrated over time) since the service started.",
                                   labels=["gpu"])
        utilization = GaugeMetricFamily("kerneljudge_gpu_utilization", "Share of the last period in which a kernel "
                                        "ran on the GPU (0-1).", labels=["gpu"])
        memory = GaugeMetricFamily("kerneljudge_gpu_memory_used_ratio", "GPU memory in use / total, now.",
                                   labels=["gpu"])
        peak = GaugeMetricFamily("kerneljudge_gpu_memory_peak_ratio", "Highest GPU memory in use / total seen "
                                 "since the service started.", labels=["gpu"])
        try:
            for reading in self.readings():
                label = [str(reading.index)]
                busy.add_metric(label, reading.busy_s)
                utilization.add_metric(label, reading.utilization)
                memory.add_metric(label, reading.memory_share)
                peak.add_metric(label, reading.memory_peak)
        except Exception:
            log.exception("metrics: could not read the GPU monitor")
        yield from (busy, utilization, memory, peak)


class ServiceMetrics:
    def __init__(self):
        self.registry = CollectorRegistry()
        self.requests = Counter("kerneljudge_http_requests", "HTTP requests.", ["route", "method", "code"],
                                registry=self.registry)
        self.latency = Histogram("kerneljudge_http_request_seconds", "API latency (time to first byte).",
                                 ["route"], buckets=API_BUCKETS, registry=self.registry)
        self.stage_seconds = Histogram("kerneljudge_stage_seconds", "Engine stage durations.", ["stage"],
                                       buckets=STAGE_BUCKETS, registry=self.registry)
        self.job_seconds = Histogram("kerneljudge_job_seconds", "Queued-to-finished time of jobs.",
                                     buckets=STAGE_BUCKETS, registry=self.registry)
        self.submitted = Counter("kerneljudge_jobs_submitted", "Jobs accepted.", registry=self.registry)

    def watch_store(self, store: JobStore, workers_alive) -> None:
        self.registry.register(_StoreCollector(store, workers_alive))

    def watch_lanes(self, lanes: Callable[[], list[LaneHealth]]) -> None:
        self.registry.register(_LaneCollector(lanes))

    def watch_gpus(self, readings: Callable[[], list[GpuReading]]) -> None:
        self.registry.register(_GpuCollector(readings))

    def observe_finished(self, job: Job) -> None:
        if job.finished_at is not None:
            self.job_seconds.observe(max(0.0, job.finished_at - job.created_at))
        for stage, seconds in ((job.result or {}).get("stages") or {}).items():
            if isinstance(seconds, (int, float)):
                self.stage_seconds.labels(stage).observe(seconds)


def route_label(scope) -> str:
    """The route template a request matched (not its raw path): an endpoint's path, or for a mounted
    app (the dashboard's and the docs' static files) the mount's path; "unmatched" otherwise."""
    route = scope.get("route")
    if route is not None and hasattr(route, "path"):
        return route.path
    if "app_root_path" in scope:  # set when a Mount matched; root_path then ends with the mount's path
        mount = scope.get("root_path", "")[len(scope["app_root_path"]):]
        if mount:
            return mount
    return "unmatched"


class RequestMetrics:
    """ASGI middleware recording count and latency per route template (not per raw path)."""

    def __init__(self, app, metrics: ServiceMetrics):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start = time.perf_counter()
        status = {"code": 500}

        async def timed_send(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
                name = route_label(scope)
                self.metrics.latency.labels(name).observe(time.perf_counter() - start)
                self.metrics.requests.labels(name, scope.get("method", ""), str(message["status"])).inc()
            await send(message)

        await self.app(scope, receive, timed_send)
