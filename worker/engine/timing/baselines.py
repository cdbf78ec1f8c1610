"""Per-problem timing baselines measured once and persisted: the reference's eager timing and its
torch.compile baseline.

What is deterministic and expensive per problem (a torch.compile of the reference, 10-60 s, and
its timing) is measured once per problem, device model and torch/Triton version, and kept where
every worker finds it again after a restart or an eviction (the job store, shared by every worker:
worker/jobs/store/baseline_rows.py; an in-memory book where the engine runs alone). Nothing secret is
kept: no inputs, no outputs, only medians and run counts.

Two records per problem:
- `ReferenceTimingRecord`: the eager reference's median and run count, which sizes a job's timing
  window without a calibration run.
- `CompileBaselineRecord`: the compiled and the eager reference timed interleaved in one exclusive
  window, both medians and run counts; or why there is no compiled baseline. A job's speedup against
  torch.compile is its own paired eager speedup scaled by this record's eager/compiled ratio
  (`compile_speedup`), so the compiled reference is never re-timed per job.

A record older than the retime interval is stale: it is still used, and measured again in the
background (worker/engine/timing/baseline_worker.py).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Protocol

REFERENCE_TIMING = "reference_timing"
COMPILE_BASELINE = "compile_baseline"
KINDS = (REFERENCE_TIMING, COMPILE_BASELINE)


def package_version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


@dataclass(frozen=True)
class BaselineKey:
    """What a baseline depends on: the reference source, the device model and the software."""

    reference_sha256: str
    device: str  # cpu | cuda
    device_model: str  # the GPU's name (e.g. "NVIDIA H100 80GB HBM3"), or "cpu"
    torch: str | None
    triton: str | None

    @classmethod
    def of(cls, reference: str, device: str, device_model: str | None) -> BaselineKey:
        return cls(reference_sha256=hashlib.sha256(reference.encode()).hexdigest(), device=device,
                   device_model=device_model or device, torch=package_version("torch"),
                   triton=package_version("triton"))

    @property
    def digest(self) -> str:
        """A short stable id of the whole key (the store's primary key with the record's kind)."""
        text = "\0".join(str(part) for part in (self.reference_sha256, self.device, self.device_model,
                                                 self.torch, self.triton))
        return hashlib.sha256(text.encode()).hexdigest()[:40]


@dataclass
class ReferenceTimingRecord:
    """The eager reference's timing on one device model: sizes a job's timing window."""

    median_ms: float
    runs: int
    measured_at: float  # time.time() (wall clock: records outlive processes)
    measured_on: str = ""  # the worker that measured it (host and GPU index)

    def age_s(self, now: float | None = None) -> float:
        return max(0.0, (now if now is not None else time.time()) - self.measured_at)


@dataclass
class CompileBaselineRecord:
    """torch.compile (default mode) of the reference against the eager reference, timed interleaved in
    one exclusive window on one device model; or, with `available` False, why there is none."""

    available: bool
    measured_at: float  # time.time()
    reason: str | None = None  # why there is no compiled baseline
    eager_median_ms: float = 0.0
    compiled_median_ms: float = 0.0
    eager_runs: int = 0
    compiled_runs: int = 0
    compile_s: float = 0.0  # what the compile cost, once
    blocks: int = 0  # alternating eager/compiled blocks in the window
    measured_on: str = ""
    # The compiled reference's samples summarised (the result's timing.compile_reference).
    compiled_stats: dict = field(default_factory=dict)

    def age_s(self, now: float | None = None) -> float:
        return max(0.0, (now if now is not None else time.time()) - self.measured_at)

    @property
    def ratio(self) -> float:
        """eager median / compiled median: how much faster torch.compile made the reference."""
        return self.eager_median_ms / self.compiled_median_ms if self.compiled_median_ms > 0 else 0.0


Record = ReferenceTimingRecord | CompileBaselineRecord


def compile_speedup(eager_speedup: float, record: CompileBaselineRecord) -> float:
    """A job's speedup against torch.compile of the reference: its paired eager speedup (reference
    median / candidate median, measured in the job's own window) times the record's eager/compiled
    ratio (measured in the baseline's own window). Both ratios are of neighbours in one window, so
    drift between the two windows cancels out."""
    if not record.available or record.compiled_median_ms <= 0:
        raise ValueError(f"no compiled baseline to scale by: {record.reason or 'not measured'}")
    return eager_speedup * record.eager_median_ms / record.compiled_median_ms


def compile_speedup_interval(eager_interval: tuple[float, float], record: CompileBaselineRecord) -> tuple[float, float]:
    """The eager speedup's interval scaled the same way (the record's own spread is not added)."""
    low, high = eager_interval
    return (compile_speedup(low, record), compile_speedup(high, record))


def record_to_json(record: Record) -> dict:
    return asdict(record)


def record_from_json(kind: str, data: dict) -> Record:
    cls = ReferenceTimingRecord if kind == REFERENCE_TIMING else CompileBaselineRecord
    known = set(cls.__dataclass_fields__)
    return cls(**{name: value for name, value in data.items() if name in known})


def kind_of(record: Record) -> str:
    return REFERENCE_TIMING if isinstance(record, ReferenceTimingRecord) else COMPILE_BASELINE


class BaselineBook(Protocol):
    """Where baselines are kept: the job store for the service, memory for the engine alone."""

    def get(self, key: BaselineKey, kind: str) -> Record | None: ...

    def put(self, key: BaselineKey, record: Record) -> None: ...


class MemoryBaselineBook:
    """Baselines of one process (`kerneljudge eval`, the serial engine): gone with it."""

    def __init__(self) -> None:
        self._records: dict[tuple[BaselineKey, str], Record] = {}
        self._lock = threading.Lock()

    def get(self, key: BaselineKey, kind: str) -> Record | None:
        with self._lock:
            return self._records.get((key, kind))

    def put(self, key: BaselineKey, record: Record) -> None:
        with self._lock:
            self._records[(key, kind_of(record))] = record


def fresh(record: Record | None, retime_s: float, now: float | None = None) -> bool:
    """Whether a record may be used without measuring it again (see the retime policy above)."""
    return record is not None and record.age_s(now) <= retime_s
