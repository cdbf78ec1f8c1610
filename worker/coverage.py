"""Kernel coverage: the share of one forward call's device time not spent in PyTorch compute.

The candidate's child times one forward call and, inside it, every ATen operator it
dispatches (CUDA events on the current stream on GPU, the host clock on CPU). Allocation,
views and copies (verification.ALLOWED_ATEN_OPS) count as the candidate's own time: honest
kernels need them. Everything else is PyTorch doing part of the work.
"""

from __future__ import annotations

from .models import CoverageReport
from .verification import ALLOWED_ATEN_OPS

TOP_OPS = 5


def coverage_report(op_ms: dict[str, float], forward_ms: float, device: str) -> CoverageReport | None:
    """None when the forward took no measurable time (nothing to divide)."""
    if forward_ms <= 0:
        return None
    compute = {op: ms for op, ms in op_ms.items() if op not in ALLOWED_ATEN_OPS and ms > 0}
    compute_ms = min(sum(compute.values()), forward_ms)
    top = dict(sorted(compute.items(), key=lambda item: -item[1])[:TOP_OPS])
    return CoverageReport(
        share=round(1.0 - compute_ms / forward_ms, 4),
        forward_ms=forward_ms,
        pytorch_compute_ms=compute_ms,
        top_pytorch_ops={op: round(ms, 4) for op, ms in top.items()},
        method="cuda_events_per_op" if device == "cuda" else "host_clock_per_op",
    )
