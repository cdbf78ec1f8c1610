"""The physics rule (KJ-R06): a forward that took less time than reading its inputs once did not read them.

A mean that reads every 4th row of a 256 MiB input passes every correctness trial (random spikes cannot
catch a uniform subsample on a large enough input), and its kernels run in 33 µs on an H100, where reading
256 MiB once at the device's bandwidth takes at least 80 µs. That is physics, not statistics.

Measured by the judge, inside its sandbox, on the device (sandbox_side/judging/physics_measure.py; no table of device
names): the device's copy bandwidth, the bytes of the inputs the reference's output depends on (those
legitimately not read are left out, see there) and the reference's own time. Measured of the candidate, by
the profiler in its sandbox (sandbox_side/runtime/kernel_trace.py, worker/engine/verdict/attribution.py): the GPU time
its forward's kernels were busy (all of them: own, library and copies), and when timed its median.

The bytes those times can read: time x the device's copy bandwidth. A candidate whose times read less than
REJECT_SHARE of the counted bytes is rejected, with both numbers as evidence: honest kernels read at most
about 1.2x the copy bandwidth (a read-only stream against a copy's read + write), so the margin is 2x wide.

On CPU (the CI machine) the candidate's Triton kernels run under Triton's interpreter, whose time says
nothing about memory (about 100x slower than the host, and its cost per element varies 3x with how a kernel
indexes). There the interpreter counts the bytes its loads read in the traced call instead, as a GPU's DRAM
counters would (sandbox_side/runtime/kernel_trace.py); the rest of the call (PyTorch's operators, Numba's
simulated kernels) reads at most its host time x the host's measured copy bandwidth.

The rule does not apply (`extra.physics.applies` false, and why) when the counted bytes are under
MIN_COUNTED_BYTES (launch-bound problems), when no bandwidth was measured, or when the reference itself
runs faster than reading the counted bytes allows (it reads less than the judge's test could tell, and the
rule must never reject the reference). KERNELJUDGE_PEAK_BANDWIDTH_GBPS (GB/s, > 0) replaces the measured
device (or host) bandwidth.

Bandwidths are kept per device model for this process (`_BOOK`): the fastest measurement seen counts, so
a measurement slowed by another job sharing the device cannot raise the floor.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from contract.results import RuleHit
from worker.engine.engine_settings import EngineSettings
from worker.engine.verdict.attribution import Attribution

RULE = "KJ-R06-beyond-roofline"
# Rejected when the candidate's time reads less than this share of the counted bytes.
REJECT_SHARE = 0.5
# Below this many counted bytes the rule does not apply (a launch-bound problem).
MIN_COUNTED_BYTES = 1024 * 1024
MAX_INPUTS_NAMED = 4
# A traced call's time counts on a GPU only for counted bytes above this many times its L2 cache.
L2_MARGIN = 4


@dataclass
class Bandwidth:
    copy_gbps: float | None = None  # the device's copy bandwidth (the host's on CPU), read + written
    source: str = "measured"  # or "configured" (KERNELJUDGE_PEAK_BANDWIDTH_GBPS)


class _Book:
    """The fastest bandwidths measured per device in this process (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._best: dict[tuple, dict[str, float]] = {}

    def known(self, key: tuple) -> dict[str, float]:
        with self._lock:
            return dict(self._best.get(key, {}))

    def record(self, key: tuple, measured: dict) -> dict[str, float]:
        with self._lock:
            best = self._best.setdefault(key, {})
            for name, value in measured.items():
                if isinstance(value, (int, float)) and value > 0:
                    best[name] = max(best.get(name, 0.0), float(value))
            return dict(best)


_BOOK = _Book()


def device_key(device: str, gpu_name: str | None, settings: EngineSettings) -> tuple:
    return ("cuda", gpu_name or "") if device == "cuda" else ("cpu", settings.cpu_threads)


def measures_wanted(device: str, gpu_name: str | None, settings: EngineSettings) -> list[str]:
    """Which bandwidths a new judge measures: on a GPU the copy bandwidth each time (a few milliseconds; the
    fastest counts), on CPU once per process; none where KERNELJUDGE_PEAK_BANDWIDTH_GBPS gives it."""
    known = _BOOK.known(device_key(device, gpu_name, settings))
    if settings.peak_bandwidth_gbps > 0 or (device != "cuda" and "copy_gbps" in known):
        return []
    return ["copy"]


@dataclass
class ProblemReads:
    """What the judge measured for the physics rule, and the device's bandwidths."""

    bandwidth: Bandwidth
    inputs: list[dict] = field(default_factory=list)
    counted_bytes: int = 0
    reference_ms: float | None = None
    skipped: str | None = None  # why the rule does not apply to this problem
    l2_bytes: int = 0  # the GPU's L2 cache (0: CPU, or not known)


def problem_reads(measured: dict | None, device: str, gpu_name: str | None, settings: EngineSettings) -> ProblemReads:
    """The judge's measurements (its generate reply's `physics`), with the best bandwidths of this device."""
    measured = measured if isinstance(measured, dict) else {}
    best = _BOOK.record(device_key(device, gpu_name, settings), measured.get("bandwidth") or {})
    bandwidth = Bandwidth(best.get("copy_gbps"))
    if settings.peak_bandwidth_gbps > 0:
        bandwidth.copy_gbps, bandwidth.source = settings.peak_bandwidth_gbps, "configured"
    inputs = [dict(item) for item in measured.get("inputs") or [] if isinstance(item, dict)]
    reads = ProblemReads(bandwidth, inputs, sum(int(item.get("counted") or 0) for item in inputs),
                         _number(measured.get("reference_ms")), l2_bytes=int(measured.get("l2_bytes") or 0))
    if measured.get("error"):
        reads.skipped = f"the judge could not measure it: {str(measured['error'])[:300]}"
    elif measured.get("skipped"):
        reads.skipped = str(measured["skipped"])[:300]
    elif not measured:
        reads.skipped = "not measured"
    return reads


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and value >= 0 else None


@dataclass
class Assessment:
    """The rule on one candidate: whether it applies, the numbers, the verdict (`extra.physics`)."""

    applies: bool
    why_not: str | None
    reads: ProblemReads
    candidate: dict = field(default_factory=dict)
    readable_bytes: int | None = None
    evidence: str | None = None

    @property
    def rejected(self) -> bool:
        return self.evidence is not None

    def floor_ms(self, gbps: float | None) -> float | None:
        return self.reads.counted_bytes / (gbps * 1e9) * 1e3 if gbps else None

    def report(self) -> dict:
        bandwidth = self.reads.bandwidth
        report = {
            "applies": self.applies, "why_not": self.why_not, "rejected": self.rejected,
            "counted_bytes": self.reads.counted_bytes, "inputs": self.reads.inputs,
            "bandwidth_gbps": bandwidth.copy_gbps, "bandwidth_source": bandwidth.source,
            "floor_ms": self.floor_ms(bandwidth.copy_gbps), "reference_ms": self.reads.reference_ms,
            "reject_share": REJECT_SHARE, "candidate": self.candidate, "readable_bytes": self.readable_bytes,
        }
        return report

    def hit(self) -> RuleHit | None:
        if self.evidence is None:
            return None
        return RuleHit(rule=RULE, severity="reject", evidence=self.evidence,
                       message="the forward cannot have read its inputs once: what its kernels' time reads at the "
                               "device's measured copy bandwidth (on CPU: what the interpreter's loads read) falls "
                               "far short of the input bytes the reference's output depends on (a subsampled input)")


def _counted_names(reads: ProblemReads) -> str:
    counted = [item for item in reads.inputs if item.get("counted")]
    names = [f"input {item.get('index')} {item.get('input', '')}: {item['counted']} of {item.get('bytes')} bytes"
             for item in counted[:MAX_INPUTS_NAMED]]
    more = f" and {len(counted) - MAX_INPUTS_NAMED} more" if len(counted) > MAX_INPUTS_NAMED else ""
    return "; ".join(names) + more


def assess(reads: ProblemReads | None, attribution: Attribution | None, timed_median_ms: float | None,
           device: str) -> Assessment | None:
    """The rule on one candidate (None: nothing was measured for it)."""
    if reads is None:
        return None
    bandwidth = reads.bandwidth
    need = REJECT_SHARE * reads.counted_bytes
    why_not = reads.skipped
    if why_not is None and not bandwidth.copy_gbps:
        why_not = "no copy bandwidth measured on this device"
    if why_not is None and reads.counted_bytes < MIN_COUNTED_BYTES:
        why_not = f"the reference's output depends on {reads.counted_bytes} input bytes, under {MIN_COUNTED_BYTES}"
    if why_not is None and reads.reference_ms is not None and bandwidth.copy_gbps \
            and reads.reference_ms * 1e-3 * bandwidth.copy_gbps * 1e9 < need:
        why_not = (f"the reference itself runs in {reads.reference_ms:.4f} ms, less than reading the counted bytes "
                   "allows: it reads less than the judge could tell")
    if why_not is not None:
        return Assessment(False, why_not, reads)
    copy = bandwidth.copy_gbps or 0.0
    candidate: dict = {}
    evidence: list[tuple[int, str]] = []
    # The traced call's inputs may still be in the GPU's L2 (just copied there, or read by a call before),
    # where they read faster than from memory: its time counts only for inputs far larger than the L2. The
    # timed median is always measured with a cold L2 (the timer flushes it before each call).
    trace_fits_l2 = device == "cuda" and reads.counted_bytes <= L2_MARGIN * reads.l2_bytes
    if attribution is not None and device == "cuda" and attribution.forward_gpu_ms > 0 and not trace_fits_l2:
        busy = attribution.forward_gpu_ms
        candidate["trace_gpu_ms"] = busy
        evidence.append((int(busy * 1e-3 * copy * 1e9),
                         f"the forward's kernels were busy {busy:.4f} ms in the traced call"))
    elif attribution is not None and device != "cuda":
        report = attribution.report
        loaded = attribution.interpreter_loaded_bytes or 0
        # Everything but the Triton launches (whose loads are counted): PyTorch's operators, other kernels.
        rest = max(report.own_ms + report.library_ms + report.plumbing_ms - attribution.interpreter_launch_ms, 0.0)
        candidate.update(trace_loaded_bytes=loaded, trace_rest_ms=rest)
        evidence.append((loaded + int(rest * 1e-3 * copy * 1e9),
                         f"its Triton kernels loaded {loaded} bytes in the traced call (counted by the interpreter) "
                         f"and the rest of the call took {rest:.3f} ms"))
    if timed_median_ms is not None and timed_median_ms > 0:
        candidate["timed_median_ms"] = timed_median_ms
        evidence.append((int(timed_median_ms * 1e-3 * copy * 1e9), f"its timed median is {timed_median_ms:.4f} ms"))
    if not evidence:
        why = "the candidate's time was not measured (no kernel trace, not timed)"
        if trace_fits_l2:
            why = (f"the counted {reads.counted_bytes} bytes fit in {L2_MARGIN}x the GPU's L2 ({reads.l2_bytes} bytes), "
                   "so only a cold-L2 timed median can tell, and the job was not timed")
        return Assessment(False, why, reads, candidate)
    readable, said = min(evidence, key=lambda item: item[0])
    assessment = Assessment(True, None, reads, candidate, readable)
    if readable < need:
        floors = f"at the {bandwidth.source} copy bandwidth {copy:.4g} GB/s takes {assessment.floor_ms(copy):.4f} ms"
        assessment.evidence = (
            f"{said}: it read at most {readable} bytes, under {REJECT_SHARE:.0%} of the {reads.counted_bytes} "
            f"bytes its inputs hold that the reference's output depends on ({_counted_names(reads)}); reading "
            f"them once {floors}")
    return assessment
