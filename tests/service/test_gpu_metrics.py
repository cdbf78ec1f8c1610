"""/metrics exports what the GPU monitor measured: busy seconds (a batch's GPU busy time is their difference
over the batch), utilisation, memory now and its peak."""

from __future__ import annotations

from prometheus_client import generate_latest

from app.metrics import ServiceMetrics
from worker.engine.gpu_monitor import GpuMonitor


def test_gpu_busy_seconds_and_memory_are_exported_per_gpu():
    monitor = GpuMonitor()
    metrics = ServiceMetrics()
    metrics.watch_gpus(monitor.readings)
    monitor.record("0, 100, 60000, 80000", now=100.0)
    monitor.record("0, 80, 72000, 80000", now=102.5)  # 80% of 2.5 s busy
    monitor.record("1, 10, 8000, 80000", now=101.0)
    text = generate_latest(metrics.registry).decode()
    assert 'kerneljudge_gpu_busy_seconds_total{gpu="0"} 2.0' in text
    assert 'kerneljudge_gpu_busy_seconds_total{gpu="1"} 0.0' in text
    assert 'kerneljudge_gpu_utilization{gpu="0"} 0.8' in text
    assert 'kerneljudge_gpu_memory_used_ratio{gpu="0"} 0.9' in text
    assert 'kerneljudge_gpu_memory_peak_ratio{gpu="1"} 0.1' in text
