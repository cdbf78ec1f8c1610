"""Statuses of an evaluation and of a job, and the enums a request names (pydantic only, no torch)."""

from __future__ import annotations

from enum import Enum


class EvalStatus(str, Enum):
    """Verdict of one evaluation. Only `ok` means correct and timed. `sandbox_error` is no verdict:
    the harness failed (the judge ran out of device memory even alone, no sandbox, an engine fault),
    so the result says nothing about the candidate (`EvalResult.judged` is false): skip the sample
    or submit it again."""

    ok = "ok"
    incorrect = "incorrect"
    compile_error = "compile_error"
    runtime_error = "runtime_error"
    timeout = "timeout"
    invalid_input = "invalid_input"
    rejected = "rejected"
    sandbox_error = "sandbox_error"


class JobStatus(str, Enum):
    """A job's state in the service (the API's `status`); its verdict is `result.status`."""

    queued = "queued"
    building = "building"  # claimed, being validated and built; `built_at` set once it waits for its GPU
    running = "running"
    done = "done"  # an evaluation was produced, whatever its verdict
    failed = "failed"  # the service could not produce one
    cancelled = "cancelled"


# Statuses that are no judgement of the candidate (see EvalResult.judged).
NON_VERDICT_STATUSES = frozenset({EvalStatus.sandbox_error})

# Job statuses that end a job.
TERMINAL_STATUSES = frozenset({JobStatus.done, JobStatus.failed, JobStatus.cancelled})


class Device(str, Enum):
    cpu = "cpu"
    cuda = "cuda"


class Backend(str, Enum):
    """The kind of kernel the candidate launches; `pytorch` means none of its own."""

    cuda = "cuda"
    triton = "triton"
    numba = "numba"  # Numba's @cuda.jit kernels
    pytorch = "pytorch"


class SandboxKind(str, Enum):
    bwrap = "bwrap"
    # No isolation at all: for debugging the engine only. Results say so.
    none = "none"

