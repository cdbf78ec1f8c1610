"""Kernel attribution: which of the kernels one forward call ran are the candidate's own.

Input: the raw profiler events the candidate's sandbox recorded (sandbox_side/runtime/kernel_trace.py)
and the kernel names the candidate's source defines (worker/engine/verdict/kernel_names.py). A kernel is
- own: its name is one the candidate defines and no ATen compute operator launched it;
- plumbing: memory copies and fills, or launched by an ATen allocation/view/copy operator;
- library: everything else (ATen compute, cuBLAS/cuDNN called directly, ...).
coverage = own time / (own + library time), GPU time on GPU, host time on CPU (where Triton runs
in its interpreter and an ATen operator stands for the kernels it would launch).

Streams (GPU): the harness frames the call with marker kernels on the timed stream (see
sandbox_side/runtime/kernel_trace.py). Kernels on other streams are fine when they are ordered between
the markers: they waited for the timed stream before starting and were joined back before forward
returned. Work that started before the first marker ended (it overlaps the timer's L2 flush) or
was still running when the second began escapes the timer (KJ-R03): those kernels are named.
"""

from __future__ import annotations

import bisect
import re
from collections import defaultdict
from dataclasses import dataclass, field

from contract.results import CoverageReport, KernelSummary

# ATen operators an honest candidate may call in either profile: allocation, views, shape changes,
# dtype/device moves and copies. Anything else computes part of the answer.
ALLOWED_ATEN_OPS = frozenset(f"aten::{name}" for name in (
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like",
    "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like", "new_full", "fill_", "zero_",
    "arange", "view", "_unsafe_view", "reshape", "_reshape_alias", "as_strided", "t", "transpose",
    "permute", "expand", "unsqueeze", "squeeze", "select", "slice", "narrow", "split", "split_with_sizes",
    "chunk", "unbind", "alias", "detach", "clone", "copy_", "_to_copy", "to", "contiguous", "lift_fresh",
    "view_as", "flatten", "unflatten", "movedim", "resize_", "set_", "cat", "stack", "_local_scalar_dense",
    "item", "is_contiguous", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "record_stream",
    "type_as", "expand_as", "reshape_as", "empty_strided", "index_select", "pad", "constant_pad_nd",
))
# Kernels no ATen operator launched, whose names mark them as a vendor library's (cuBLAS called
# from C++, cuDNN, CUTLASS, cub): not the candidate's, whatever it calls them.
LIBRARY_NAME = re.compile(
    r"cublas|cudnn|cutlass|xmma|nvjet|gemv|gemmk|gemmSN|splitKreduce|cub::|thrust::|at::|c10::|"
    r"^(sm\d+|ampere|volta|turing|hopper|maxwell|ada)_", re.IGNORECASE)
# Numba's ABI tags in a demangled name (`add_kernel[abi:v1][abi:cw51...]`).
ABI_TAG = re.compile(r"\[abi:[^\]]*\]")
TOP_LIBRARY = 10
MAX_NAMES = 20


@dataclass
class Attribution:
    """The report plus what the rules need."""

    report: CoverageReport
    truncated: bool = False
    forward_gpu_ms: float = 0.0  # busy time of the forward's kernels (GPU only)
    traced_alone: bool = False  # traced with the device held exclusively (device_stage._trace_alone)
    library_records: list[KernelSummary] = field(default_factory=list)
    # CPU: what the Triton interpreter counted in the traced call (sandbox_side/runtime/kernel_trace.py): the
    # bytes its loads read and the host time of Triton launches (the physics rule, worker/engine/verdict/physics.py).
    interpreter_loaded_bytes: int | None = None
    interpreter_launch_ms: float = 0.0


def kernel_base_name(name: str) -> str:
    """`void ns::relu_kernel<float, 4>(float const*, int)` -> `relu_kernel`; `_Z6kernelPf` -> `kernel`.

    Numba names a kernel after its module and qualified name, with ABI tags:
    `kj_candidate::add_kernel[abi:v1][abi:cw51...](Array<float, 1, C, mutable, aligned>, ...)`,
    or mangled `_ZN12kj_candidate10add_kernelB2v1B...E5Array...` -> `add_kernel`."""
    if name.startswith("_Z"):
        return _mangled_base_name(name)
    name = ABI_TAG.sub("", name.replace("(anonymous namespace)", "anon"))
    depth, cut = 0, len(name)
    for index, char in enumerate(name):
        if char == "<":
            depth += 1
        elif char == ">":
            depth = max(depth - 1, 0)
        elif char == "(" and depth == 0:
            cut = index
            break
    head, plain, depth = name[:cut], [], 0
    for char in head:  # drop template arguments
        if char == "<":
            depth += 1
        elif char == ">":
            depth = max(depth - 1, 0)
        elif depth == 0:
            plain.append(char)
    text = "".join(plain).strip()
    return text.split("::")[-1].split()[-1] if text else name


def _mangled_base_name(name: str) -> str:
    """The last component of an Itanium-mangled (nested) name: `_ZN2ns6kernelEPf` -> `kernel`."""
    position = 2 + (name[2:3] == "L")
    position += name[position:position + 1] == "N"
    base = name
    while (length := re.match(r"\d+", name[position:])) is not None:
        start = position + length.end()
        base = name[start:start + int(length.group())]
        position = start + int(length.group())
    return base


def _is_own_name(base: str, own_names: frozenset[str]) -> bool:
    if base in own_names:
        return True
    # Older Triton versions append a signature suffix (`add_kernel_0d1d2d`).
    return any(base.startswith(own + "_") and base[len(own) + 1:].isalnum() for own in own_names)


class _TopLevelOps:
    """The outermost ATen operator running on a thread at a given time."""

    def __init__(self, ops: list[dict]) -> None:
        by_thread: dict[int, list[tuple[int, int, str]]] = defaultdict(list)
        for op in sorted(ops, key=lambda o: (o["tid"], o["span"][0], -o["span"][1])):
            spans = by_thread[op["tid"]]
            start, end = op["span"]
            if spans and start <= spans[-1][1]:
                continue  # nested in the previous top-level operator
            spans.append((start, end, op["name"]))
        self._starts = {tid: [s[0] for s in spans] for tid, spans in by_thread.items()}
        self._spans = dict(by_thread)

    def at(self, tid: int, when: int) -> str | None:
        starts = self._starts.get(tid)
        if not starts:
            return None
        index = bisect.bisect_right(starts, when) - 1
        if index < 0:
            return None
        start, end, name = self._spans[tid][index]
        return name if start <= when <= end else None

    def inside(self, lo: int, hi: int, excluded: list[tuple[int, int]]) -> list[tuple[str, int]]:
        """Top-level operators (name, duration) within [lo, hi], outside the excluded spans."""
        found = []
        for spans in self._spans.values():
            for start, end, name in spans:
                if lo <= start and end <= hi and not any(a <= start <= b for a, b in excluded):
                    found.append((name, end - start))
        return found


@dataclass
class _Record:
    name: str
    kind: str  # own | library | plumbing
    ns: int
    op: str | None = None
    stream: int | None = None
    span: tuple[int, int] | None = None


def attribute(raw: dict, own_names: frozenset[str], device: str) -> Attribution | None:
    """Label the forward's kernels and compute coverage (see the module docstring).

    None when a GPU trace holds no device activity at all, not even the harness's markers: the
    profiler saw nothing (CUPTI unavailable), which must not read as "no kernel of its own ran"."""
    if device == "cuda" and not raw.get("kernels"):
        return None
    cpu = raw.get("cpu") or []
    forward = next((e["span"] for e in cpu if e["name"] == raw.get("forward_label")), None)
    ops = _TopLevelOps([e for e in cpu if e["name"].startswith("aten::")])
    streams = _Streams()
    if device == "cuda":
        records, streams = _gpu_records(raw, cpu, forward, ops, own_names)
        method = "cupti_kernel_trace"
    else:
        records = _cpu_records(raw, cpu, forward, ops)
        method = "interpreter_and_aten_trace"
    own_ns = sum(r.ns for r in records if r.kind == "own")
    library_ns = sum(r.ns for r in records if r.kind == "library")
    plumbing_ns = sum(r.ns for r in records if r.kind == "plumbing")
    compute_ns = own_ns + library_ns
    own = _summaries([r for r in records if r.kind == "own"], compute_ns)
    library = _summaries([r for r in records if r.kind == "library"], compute_ns)
    launched = {kernel_base_name(r.name) for r in records if r.kind == "own"}
    not_launched = sorted(n for n in own_names if not any(_is_own_name(b, frozenset([n])) for b in launched))
    report = CoverageReport(
        share=round(own_ns / compute_ns, 4) if compute_ns else 0.0,
        own_ms=own_ns / 1e6, library_ms=library_ns / 1e6, plumbing_ms=plumbing_ns / 1e6,
        own_kernels=own, library_kernels=library[:TOP_LIBRARY],
        own_kernels_not_launched=not_launched[:MAX_NAMES],
        off_stream_kernels=sorted(set(streams.off_stream))[:MAX_NAMES],
        escaped_kernels=sorted(set(streams.escaped))[:MAX_NAMES],
        unordered_kernels=sorted(set(streams.unordered))[:MAX_NAMES],
        current_stream_switched=bool(raw.get("current_stream_switched")),
        stream_hold_covered_forward=streams.hold_covered_forward, method=method,
    )
    busy_ns = _busy_ns([r.span for r in records if r.span])
    counted = raw.get("interpreter") if device != "cuda" else None
    loaded = counted.get("loaded_bytes") if isinstance(counted, dict) else None
    launch_ns = counted.get("launch_ns") if isinstance(counted, dict) else None
    return Attribution(report=report, truncated=bool(raw.get("truncated")), forward_gpu_ms=busy_ns / 1e6,
                       library_records=library,
                       interpreter_loaded_bytes=loaded if type(loaded) is int and loaded >= 0 else None,
                       interpreter_launch_ms=launch_ns / 1e6 if type(launch_ns) is int and launch_ns > 0 else 0.0)


@dataclass
class _Streams:
    """Base names of the forward's kernels on streams other than the timed one."""

    off_stream: list[str] = field(default_factory=list)
    escaped: list[str] = field(default_factory=list)  # still running when the end marker started
    unordered: list[str] = field(default_factory=list)  # started before the start marker ended
    # Whether the timed stream was still held (the start marker not yet started) when forward returned:
    # then every side-stream launch of forward that did not wait for the timed stream shows as unordered.
    hold_covered_forward: bool | None = None


def _gpu_records(raw: dict, cpu: list[dict], forward: list[int] | None, ops: _TopLevelOps,
                 own_names: frozenset[str]) -> tuple[list[_Record], _Streams]:
    """A kernel links to the frontend event (ATen operator or labelled range) open when it launched;
    the outermost ATen operator around that event says who launched it. Kernels launched outside
    the forward's range are the harness's markers on the timed stream, one before and one after."""
    frontends = {event["corr"]: event for event in cpu}
    inside: list[tuple[dict, dict | None]] = []
    markers: list[tuple[int, dict]] = []
    labels = (raw.get("forward_label") or "\0", raw.get("launch_prefix") or "\0")
    for kernel in raw.get("kernels") or []:
        if kernel["name"].startswith(labels):
            continue  # the GPU-side shadow of a labelled range, not work
        # Triton's launcher calls the driver directly: its kernels link to no frontend event (0).
        launch = frontends.get(kernel["linked"])
        if launch is not None and forward is not None and not forward[0] <= launch["span"][0] <= forward[1]:
            markers.append((launch["span"][0], kernel))
        else:
            inside.append((kernel, launch))
    markers.sort(key=lambda item: item[0])
    before = [k for t, k in markers if forward is not None and t < forward[0]]
    after = [k for t, k in markers if forward is not None and t > forward[1]]
    timed_stream = before[-1]["stream"] if before else None
    start_marker_start = before[-1]["span"][0] if before else None
    start_marker_end = before[-1]["span"][1] if before else None
    end_marker_start = after[0]["span"][0] if after else None
    records: list[_Record] = []
    streams = _Streams(hold_covered_forward=None if start_marker_start is None or forward is None
                       else start_marker_start >= forward[1])
    for kernel, launch in inside:
        name, span = kernel["name"], (kernel["span"][0], kernel["span"][1])
        if kernel["stream"] == timed_stream and start_marker_start is not None and span[1] <= start_marker_start:
            # The harness's hold ahead of the start marker (it links to no frontend event): all that
            # forward queues on the timed stream runs after the marker.
            continue
        duration = max(span[1] - span[0], 0)
        if kernel["kind"] == "memory":
            records.append(_Record(name, "plumbing", duration, None, kernel["stream"], span))
            continue
        op = ops.at(launch["tid"], launch["span"][0]) if launch is not None else None
        base = kernel_base_name(name)
        if op is None and _is_own_name(base, own_names):
            kind = "own"
        elif op is not None:
            kind = "plumbing" if op in ALLOWED_ATEN_OPS else "library"
        else:
            kind = "library" if LIBRARY_NAME.search(name) else "own"
        records.append(_Record(name, kind, duration, op, kernel["stream"], span))
        if timed_stream is not None and kernel["stream"] != timed_stream:
            streams.off_stream.append(base)
            if end_marker_start is not None and span[1] > end_marker_start:
                streams.escaped.append(base)
            if start_marker_end is not None and span[0] < start_marker_end:
                streams.unordered.append(base)
    return records, streams


def _cpu_records(raw: dict, cpu: list[dict], forward: list[int] | None, ops: _TopLevelOps) -> list[_Record]:
    if forward is None:
        return []
    prefix = raw.get("launch_prefix") or ""
    launches = [r for r in cpu
                if prefix and r["name"].startswith(prefix) and forward[0] <= r["span"][0] <= forward[1]]
    records = [_Record(r["name"][len(prefix):], "own", r["span"][1] - r["span"][0]) for r in launches]
    excluded = [(r["span"][0], r["span"][1]) for r in launches]
    for name, duration in ops.inside(forward[0], forward[1], excluded):
        records.append(_Record(name, "plumbing" if name in ALLOWED_ATEN_OPS else "library", duration, name))
    return records


def _busy_ns(spans: list[tuple[int, int]]) -> int:
    """Length of the union of the kernels' GPU intervals."""
    total, end = 0, None
    for start, stop in sorted(spans):
        if end is None or start > end:
            total += stop - start
            end = stop
        elif stop > end:
            total += stop - end
            end = stop
    return total


def _summaries(records: list[_Record], compute_ns: int) -> list[KernelSummary]:
    grouped: dict[tuple[str, str | None], list[_Record]] = defaultdict(list)
    for record in records:
        grouped[(record.name, record.op)].append(record)
    summaries = [
        KernelSummary(name=name, launches=len(group), ms=sum(r.ns for r in group) / 1e6,
                      share=round(sum(r.ns for r in group) / compute_ns, 4) if compute_ns else 0.0,
                      op=op, streams=sorted({r.stream for r in group if r.stream is not None}))
        for (name, op), group in grouped.items()
    ]
    return sorted(summaries, key=lambda s: -s.ms)
