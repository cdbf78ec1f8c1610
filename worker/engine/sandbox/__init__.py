"""Supervising side of the sandbox: builds the bubblewrap command line, applies resource
limits, runs the child with a wall-clock limit and reads its messages. Code that runs inside
the sandbox lives in worker.engine.sandbox_runtime and is never imported here.
"""

from .process import SandboxExited, SandboxProcess, SandboxTimeout, SandboxUnavailable
from .spec import IsolationConfig, Mount, ResourceLimits, SandboxSpec, Scratch

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
