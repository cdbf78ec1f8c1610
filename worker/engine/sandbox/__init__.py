"""Supervising side of the sandbox: builds the bubblewrap command line, applies resource
limits, runs the child with a wall-clock limit and reads its messages. Code that runs inside
the sandbox lives in sandbox_side and is never imported here.
"""

from worker.engine.sandbox.process import SandboxExited, SandboxProcess, SandboxTimeout, SandboxUnavailable
from worker.engine.sandbox.spec import IsolationConfig, Mount, ResourceLimits, SandboxSpec, Scratch

__all__ = [
    "IsolationConfig",
    "Mount",
    "ResourceLimits",
    "SandboxExited",
    "SandboxProcess",
    "SandboxSpec",
    "SandboxTimeout",
    "SandboxUnavailable",
    "Scratch",
]
