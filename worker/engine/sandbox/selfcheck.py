"""Start-up probe: can a sandboxed child see the GPU (and reach nothing else: no network, no variable
of the server's environment in any process it can see)?

Workers run it once before taking jobs, so a misconfigured host fails loudly at start instead of
turning every candidate into a sandbox_error. worker/engine/startup_check.py then proves the whole
path with one real evaluation.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

from worker.engine.sandbox.process import SandboxExited, SandboxProcess, SandboxTimeout, SandboxUnavailable
from worker.engine.sandbox.spec import IsolationConfig, ResourceLimits, SandboxSpec

# Variables of the sandbox's processes besides the spec's own: the message channel and bwrap's PWD.
RUNTIME_VARIABLES = {"KJ_MSG_FD", "KJ_FD_SOCK", "PWD"}

PROBE = r"""
import json, os, socket
report = {}
try:
    import torch
    report["cuda_available"] = torch.cuda.is_available()
    if report["cuda_available"]:
        torch.cuda.init()
        report["gpu"] = torch.cuda.get_device_name(0)
        report["sum"] = float(torch.ones(1024, device="cuda").sum())
except Exception as exc:
    report["cuda_error"] = f"{type(exc).__name__}: {exc}"
# A fresh network namespace has only the loopback interface; no packet is sent to find out.
interfaces = sorted(name for _, name in socket.if_nameindex())
report["interfaces"] = interfaces
report["network"] = "isolated" if interfaces == ["lo"] else "reachable"
# The names (never the values) of every variable of every process the sandbox can see.
names = set()
for pid in (p for p in os.listdir("/proc") if p.isdigit()):
    try:
        names |= {e.split(b"=")[0].decode() for e in open(f"/proc/{pid}/environ", "rb").read().split(b"\0") if e}
    except OSError:
        pass
report["variables"] = sorted(names)
os.write(int(os.environ["KJ_MSG_FD"]), (json.dumps(report) + "\n").encode())
"""


@dataclass
class SelfCheck:
    ok: bool
    report: dict
    seconds: float
    message: str


def check_sandbox(*, gpu_nodes: list[str], isolate_network: bool, env: dict[str, str] | None = None,
                  timeout_s: float = 120.0, isolation: IsolationConfig | None = None) -> SelfCheck:
    spec = SandboxSpec(env={"PATH": "/usr/bin:/bin", "HOME": "/tmp", **(env or {})},
                       gpu_device_nodes=gpu_nodes, isolate_network=isolate_network,
                       limits=ResourceLimits(), isolation=isolation or IsolationConfig())
    start = time.monotonic()
    process = SandboxProcess(spec, [sys.executable, "-I", "-c", PROBE], name="selfcheck")
    try:
        process.start()
        report = process.receive(timeout_s)
    except (SandboxUnavailable, SandboxTimeout, SandboxExited) as exc:
        detail = exc.describe() if isinstance(exc, SandboxExited) else str(exc)
        return SelfCheck(False, {}, time.monotonic() - start,
                         f"sandbox self-check failed: {detail}; stderr: {process.stderr.text()[-2000:]}")
    finally:
        process.close(grace_s=1.0)
    problems = []
    if gpu_nodes and not report.get("cuda_available"):
        problems.append(f"CUDA is not usable inside the sandbox ({report.get('cuda_error', 'not available')})")
    if report.get("network") == "reachable":
        problems.append("the network is reachable from inside the sandbox")
    leaked = sorted(set(report.get("variables") or []) - set(spec.env) - RUNTIME_VARIABLES)
    if leaked:
        problems.append(f"variables of the server are visible inside the sandbox: {', '.join(leaked)}")
    report["identity"] = process.identity.kind if process.identity else None
    return SelfCheck(not problems, report, time.monotonic() - start, "; ".join(problems) or "ok")


def require_working_sandbox(*, use_gpu: bool, gpu_index: int | None, isolate_network: bool,
                            isolation: IsolationConfig | None = None) -> SelfCheck:
    """Run the self-check at worker start; raise with the reason when the host cannot sandbox."""
    from worker.engine.sandbox.bwrap import gpu_device_nodes

    nodes = gpu_device_nodes(gpu_index) if use_gpu else []
    env = {"CUDA_VISIBLE_DEVICES": str(gpu_index)} if (use_gpu and gpu_index is not None) else {}
    check = check_sandbox(gpu_nodes=nodes, isolate_network=isolate_network, env=env, isolation=isolation)
    if not check.ok:
        raise SandboxUnavailable(
            f"{check.message}. Evaluations would all fail with sandbox_error, so this worker does not start. "
            "Check that bubblewrap is installed, that unprivileged user namespaces are enabled, and (GPU) "
            "that the /dev/nvidia* nodes exist; KERNELJUDGE_SKIP_SELFCHECK=1 skips this check."
        )
    return check
