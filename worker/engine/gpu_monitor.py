"""What the GPUs are doing, measured: utilisation and memory of every GPU, from one `nvidia-smi` stream.

The supervisor never imports CUDA. One `nvidia-smi --query-gpu=... -lms N` process per service streams a
line per GPU per period; a reader thread keeps, per GPU, the latest reading, the busy seconds so far
(utilization.gpu, the share of the period in which a kernel ran, times the period) and the highest memory
share seen. `/metrics` exports them (busy seconds per batch are a difference of two scrapes), and the GPU
schedule admits a job's device stage only while the card's measured memory leaves room (gpu_schedule).
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

PERIOD_MS = 500


@dataclass
class GpuReading:
    index: int
    utilization: float  # 0..1, over the last period
    memory_used_bytes: int
    memory_total_bytes: int
    at: float  # time.monotonic() of the reading
    busy_s: float = 0.0  # integral of utilization over time since the monitor started
    memory_peak: float = 0.0  # highest used / total seen

    @property
    def memory_share(self) -> float:
        return self.memory_used_bytes / self.memory_total_bytes if self.memory_total_bytes else 0.0


class GpuMonitor:
    """Readings of every GPU nvidia-smi shows (indices as nvidia-smi numbers them)."""

    def __init__(self, period_ms: int = PERIOD_MS) -> None:
        self.period_ms = period_ms
        self._readings: dict[int, GpuReading] = {}
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> bool:
        """Start the stream; False where there is no nvidia-smi (no GPU to watch)."""
        smi = shutil.which("nvidia-smi")
        if smi is None:
            return False
        command = [smi, "--query-gpu=index,utilization.gpu,memory.used,memory.total", "--format=csv,noheader,nounits",
                   "-lms", str(self.period_ms)]
        try:
            self._proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError as exc:
            log.warning("GPU monitor: nvidia-smi did not start: %s", exc)
            return False
        self._thread = threading.Thread(target=self._read, args=(self._proc,), name="kj-gpu-monitor", daemon=True)
        self._thread.start()
        return True

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()

    def _read(self, proc: subprocess.Popen) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.record(line, time.monotonic())

    def record(self, line: str, now: float) -> None:
        """One line of the stream: `index, utilization %, memory used MiB, memory total MiB`."""
        try:
            index, busy, used, total = (float(field) for field in line.split(","))
        except ValueError:
            return  # a header, a blank or "[N/A]": nothing measured
        with self._lock:
            previous = self._readings.get(int(index))
            reading = GpuReading(int(index), busy / 100.0, int(used) * 1024**2, int(total) * 1024**2, now)
            if previous is not None:
                # The period's utilisation, over the time since the previous line.
                reading.busy_s = previous.busy_s + reading.utilization * max(0.0, now - previous.at)
                reading.memory_peak = previous.memory_peak
            reading.memory_peak = max(reading.memory_peak, reading.memory_share)
            self._readings[reading.index] = reading

    def reading(self, index: int) -> GpuReading | None:
        with self._lock:
            found = self._readings.get(index)
            return None if found is None else GpuReading(**found.__dict__)

    def readings(self) -> list[GpuReading]:
        with self._lock:
            return [GpuReading(**r.__dict__) for _, r in sorted(self._readings.items())]


_monitor: GpuMonitor | None = None
_monitor_lock = threading.Lock()


def gpu_monitor() -> GpuMonitor:
    """The process's monitor, started on first use (it reads nothing where there is no nvidia-smi)."""
    global _monitor
    with _monitor_lock:
        if _monitor is None:
            _monitor = GpuMonitor()
            _monitor.start()
        return _monitor


# A reading older than this says nothing about now (nvidia-smi stopped, or the GPU fell off the bus).
STALE_S = 5.0


def memory_share_of(gpu_index: int) -> Callable[[], float | None]:
    """A reader of one GPU's measured memory share (None while there is no fresh reading), for the
    GPU schedule's admission."""
    monitor = gpu_monitor()

    def share() -> float | None:
        reading = monitor.reading(gpu_index)
        if reading is None or time.monotonic() - reading.at > STALE_S:
            return None
        return reading.memory_share

    return share
