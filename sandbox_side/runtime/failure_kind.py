"""How user code (or the sandbox around it) failed: the kinds a runner reports and the supervisor acts on.

Shared by both sides of the pipe: a runner (runner.py, judge_process.py, loader.py) and the builder
(sandbox_side/build/sandboxed.py) send a kind as its value; the supervisor reads it back with `FailureKind.reported`
(worker/engine/launch.py, worker/engine/build/builder.py), where anything that is not a kind is a `protocol`
failure. Standard library only: it is imported inside the sandbox.

A candidate's kind is its result's `error.kind` (contract/results.py ErrorKind), a reference's is that with
`reference_` before it.
"""

from __future__ import annotations

from enum import Enum


class FailureKind(str, Enum):
    compile_error = "compile_error"  # the CUDA build, or a Triton / Numba kernel's compilation, failed
    runtime_error = "runtime_error"  # the user code raised
    invalid_output = "invalid_output"  # forward returned something other than dense tensors
    out_of_memory = "out_of_memory"  # out of device memory
    timeout = "timeout"  # past its deadline (the supervisor's, which then kills the sandbox)
    crashed = "crashed"  # the process died without reporting
    # A message that is not the protocol's: unreadable, unexpected, malformed, or a failure of a kind that
    # is none of these (what a runner reports is read by `reported`). The user code shares the runner's
    # process, so it can write to the reply channel.
    protocol = "protocol"

    def __str__(self) -> str:  # the kind's name as sent and shown (format() too, on every Python version)
        return self.value

    @classmethod
    def reported(cls, value: object) -> FailureKind:
        """The kind another process reported: anything that is not one (missing, mistyped, unknown) is
        `protocol`."""
        if isinstance(value, str):
            try:
                return cls(value)
            except ValueError:
                pass
        return cls.protocol
