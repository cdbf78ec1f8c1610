"""Runtime verification: rules judged from what the supervisor observed while the
candidate ran (its claims are cross-checked, never trusted alone)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .models import PolicyConfig, RuleHit
from .policy.registry import is_disabled

SHAPE_RULE = "KJ-R09-shape-specialised"

# Work that escaped the events: host-synced time this much over the event time, and by at
# least this many ms (host overhead per iteration is a few microseconds on an idle host).
UNSYNCED_RATIO = 2.0
UNSYNCED_MIN_GAP_MS = 0.05
# Reported time below this share of what the outside clock saw (less harness overhead).
EXTERNAL_CLOCK_RATIO = 0.5
EXTERNAL_CLOCK_MIN_GAP_MS = 0.05


# ATen operators an honest candidate may dispatch: allocation, views, shape changes and copies
# (including what Triton's interpreter does around a launch on CPU). Anything else is PyTorch
# computing part of the answer.
ALLOWED_ATEN_OPS = frozenset(f"aten.{name}" for name in (
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like",
    "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like", "new_full", "fill_", "zero_",
    "arange", "view", "_unsafe_view", "reshape", "_reshape_alias", "as_strided", "t", "transpose",
    "permute", "expand", "unsqueeze", "squeeze", "select", "slice", "narrow", "split", "split_with_sizes",
    "chunk", "unbind", "alias", "detach", "clone", "copy_", "_to_copy", "contiguous", "lift_fresh",
    "view_as", "flatten", "unflatten", "movedim", "resize_", "set_", "cat", "stack", "_local_scalar_dense",
    "is_contiguous", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "record_stream",
))


@dataclass
class Observations:
    tampered: list[str] = field(default_factory=list)
    timed_outputs_ok: bool = True
    timed_outputs_message: str | None = None
    candidate_device_median_ms: float | None = None
    candidate_host_median_ms: float | None = None
    # Per-iteration wall time of the fixed-count runs, seen from the supervisor.
    candidate_external_ms: float | None = None
    reference_external_ms: float | None = None
    reference_device_median_ms: float | None = None
    speedup: float | None = None
    degenerate_reference: bool = False
    # ATen operators dispatched by one forward call of the candidate (None: not measured).
    aten_ops: dict[str, int] | None = None
    # Device time per operator in that call, in ms (empty: not measured).
    aten_op_ms: dict[str, float] = field(default_factory=dict)
    min_bytes: int | None = None
    peak_bandwidth_gbps: float = 0.0
    # Why the doubled-batch trial failed (None: passed, skipped or not run).
    shape_trial_failure: str | None = None
    device: str = "cpu"


def _op_evidence(op: str, obs: Observations) -> str:
    ms = obs.aten_op_ms.get(op)
    return f"{op} x{obs.aten_ops[op]}" + (f" ({ms:.3f} ms)" if ms is not None else "")


def runtime_rules(obs: Observations, policy: PolicyConfig) -> list[RuleHit]:
    hits: list[RuleHit] = []
    if obs.tampered:
        hits.append(RuleHit(
            rule="KJ-R01-tampered-harness", severity="reject",
            message="the candidate rebound functions the evaluation relies on (timers, sync, comparison)",
            evidence=", ".join(sorted(set(obs.tampered))),
        ))
    if not obs.timed_outputs_ok:
        hits.append(RuleHit(
            rule="KJ-R02-timed-outputs-wrong", severity="reject",
            message="outputs produced during timing do not match the reference for the same inputs "
                    "(cached or replayed results, or behaviour that changes once timing starts)",
            evidence=obs.timed_outputs_message,
        ))
    dev, host = obs.candidate_device_median_ms, obs.candidate_host_median_ms
    if obs.device == "cuda" and dev is not None and host is not None:
        if host > UNSYNCED_RATIO * dev and host - dev > UNSYNCED_MIN_GAP_MS:
            hits.append(RuleHit(
                rule="KJ-R03-work-outside-timed-stream", severity="flag",
                message="most of the candidate's GPU work ran outside the timed stream (side stream or "
                        "deferred work): event time is far below the device-synchronised time",
                evidence=f"event median {dev:.4f} ms, synchronised host median {host:.4f} ms",
            ))
    ext_c, ext_r, ref_dev = obs.candidate_external_ms, obs.reference_external_ms, obs.reference_device_median_ms
    # On CPU the host clock is the measurement itself (and Triton's interpreter dominates it).
    if obs.device == "cuda" and dev is not None and ext_c is not None and ext_r is not None and ref_dev is not None:
        overhead = max(ext_r - ref_dev, 0.0)  # harness cost per iteration (flush, syncs, IPC)
        seen = ext_c - overhead
        if dev < EXTERNAL_CLOCK_RATIO * seen and seen - dev > EXTERNAL_CLOCK_MIN_GAP_MS:
            hits.append(RuleHit(
                rule="KJ-R04-timing-disagrees-with-wall-clock", severity="flag",
                message="the candidate's reported time is far below the time measured from outside its process",
                evidence=f"reported {dev:.4f} ms/iter, outside clock {seen:.4f} ms/iter after harness overhead",
            ))
    if obs.speedup is not None and obs.speedup > policy.max_speedup:
        hits.append(RuleHit(
            rule="KJ-R05-implausible-speedup", severity="flag",
            message=f"speedup {obs.speedup:.1f}x is above the configured ceiling {policy.max_speedup:g}x",
        ))
    if obs.min_bytes and obs.peak_bandwidth_gbps > 0 and dev is not None and obs.device == "cuda":
        floor_ms = obs.min_bytes / (obs.peak_bandwidth_gbps * 1e9) * 1e3
        if dev < 0.8 * floor_ms:
            hits.append(RuleHit(
                rule="KJ-R06-beyond-roofline", severity="flag",
                message="the candidate ran faster than moving its inputs and outputs once allows",
                evidence=f"{dev:.4f} ms < floor {floor_ms:.4f} ms for {obs.min_bytes} bytes "
                         f"at {obs.peak_bandwidth_gbps:g} GB/s",
            ))
    compute_ops = sorted(op for op in (obs.aten_ops or {}) if op not in ALLOWED_ATEN_OPS)
    if compute_ops:
        hits.append(RuleHit(
            rule="KJ-R08-pytorch-compute-at-runtime", severity="flag",
            message="PyTorch operators computed part of the output at run time; the work must be done by "
                    "the candidate's own kernels (allocation, views and copies are fine)",
            evidence=", ".join(_op_evidence(op, obs) for op in compute_ops[:20]),
        ))
    if obs.shape_trial_failure:
        hits.append(RuleHit(
            rule=SHAPE_RULE, severity="flag",
            message="the candidate is correct on the problem's shapes but wrong on a doubled batch: it hard-codes "
                    "the problem's shape (disable KJ-R09 to allow shape-specialised kernels)",
            evidence=obs.shape_trial_failure,
        ))
    if obs.degenerate_reference:
        hits.append(RuleHit(
            rule="KJ-R07-degenerate-problem", severity="flag",
            message="the reference gives the same output for every input drawn: a constant passes the check, "
                    "so correctness here proves little (fix the problem's get_inputs or outputs)",
        ))
    return [hit for hit in hits if not is_disabled(hit.rule, policy.disabled_rules)]
