"""Kernel attribution (worker/engine/verdict/attribution.py), fed with profiler events recorded on a GPU.

tests/engine/data/kernel_traces_h100.json was written by benchmarks/record_kernel_traces.py on an
H100 (torch 2.11, triton 3.6): the real names, streams and correlation ids CUPTI reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.record_kernel_traces import EXPECTED_STREAMS
from contract.requests import PolicyConfig
from worker.engine.verdict.attribution import attribute, kernel_base_name
from worker.engine.verdict.verification import STREAM_RULE, Observations, runtime_rules

TRACES = json.loads((Path(__file__).parent / "data" / "kernel_traces_h100.json").read_text())["cases"]
# The same recorder with the trace's hold on the timed stream (kernel_trace.trace_forward), on an H100.
HELD_TRACES = json.loads((Path(__file__).parent / "data" / "kernel_traces_h100_hold.json").read_text())["cases"]
OWN = frozenset({"silu_kernel"})


def _report(case: str, own: frozenset[str] = OWN):
    return attribute(TRACES[case], own, "cuda")


def test_own_triton_kernel_alone_is_full_coverage():
    attribution = _report("own_only")
    report = attribution.report
    assert [(k.name, k.launches) for k in report.own_kernels] == [("silu_kernel", 1)]
    assert report.share == 1.0 and not report.library_kernels and not report.off_stream_kernels
    assert report.method == "cupti_kernel_trace" and attribution.forward_gpu_ms > 0


def test_the_harness_markers_are_not_counted():
    # One marker kernel before and one after the forward, on the timed stream: neither is the candidate's.
    report = _report("own_only").report
    assert report.plumbing_ms == 0.0 and report.library_ms == 0.0


def test_a_kept_conv_is_library_compute_launched_by_its_aten_operator():
    report = _report("conv_plus_epilogue").report
    assert [k.name for k in report.own_kernels] == ["silu_kernel"]
    assert {k.op for k in report.library_kernels} == {"aten::conv2d"}
    assert any("fprop" in k.name for k in report.library_kernels)
    assert 0 < report.share < 1


def test_a_large_matmul_with_a_token_kernel_has_low_coverage():
    report = _report("matmul_token_kernel").report
    assert report.library_kernels[0].op == "aten::matmul"
    assert report.share < 0.05 and report.library_kernels[0].share > 0.95


def test_an_unjoined_side_stream_escapes_the_timed_window():
    report = _report("unjoined_side_stream").report
    assert report.own_kernels[0].launches == 20
    assert report.off_stream_kernels == ["silu_kernel"] and report.escaped_kernels == ["silu_kernel"]


def test_a_joined_side_stream_is_off_stream_but_does_not_escape():
    report = _report("joined_side_stream").report
    assert report.off_stream_kernels == ["silu_kernel"] and report.escaped_kernels == []
    assert report.unordered_kernels == [] and not report.current_stream_switched


@pytest.mark.parametrize(("case", "verdict"), [("joined_side_stream", None), ("unjoined_side_stream", "reject")])
def test_streams_are_judged_at_run_time_from_the_recorded_trace(case, verdict):
    """KJ-R03 from what CUPTI recorded: a side stream joined before forward returns is fine; one
    left running is rejected, with its kernel named."""
    observations = Observations(device="cuda", attribution=_report(case))
    hit = next((h for h in runtime_rules(observations, PolicyConfig()) if h.rule == STREAM_RULE), None)
    assert (hit.severity if hit else None) == verdict
    if hit:
        assert "still running after forward returned: silu_kernel" in hit.evidence


def _stream_evidence(raw: dict) -> dict:
    report = attribute(raw, OWN, "cuda").report
    found = {"off_stream": bool(report.off_stream_kernels), "escaped": bool(report.escaped_kernels),
             "unordered": bool(report.unordered_kernels), "switched": report.current_stream_switched}
    return {key: True for key, value in found.items() if value}


def _timeline(raw: dict) -> str:
    """The trace's CPU ranges and device activities in microseconds from its first event: what a failed
    live case saw (a GPU run is scarce; its failure should explain itself)."""
    events = [(e["span"], "cpu", e["name"][:40], e["corr"]) for e in raw["cpu"] if not e["name"].startswith("aten::empty")]
    events += [(k["span"], f"stream {k['stream']}", k["name"][:40], k["linked"]) for k in raw["kernels"]]
    origin = min(span[0] for span, *_ in events)
    return "\n".join(f"{(span[0] - origin) / 1e3:10.1f} {(span[1] - origin) / 1e3:10.1f}  {where:10} {name} ({link})"
                     for span, where, name, link in sorted(events, key=lambda event: event[0][0]))


def _hold_covered(raw: dict) -> bool | None:
    return attribute(raw, OWN, "cuda").report.stream_hold_covered_forward


@pytest.mark.parametrize("case", sorted(set(TRACES) & set(EXPECTED_STREAMS)))
def test_recorded_stream_evidence(case):
    assert _stream_evidence(TRACES[case]) == EXPECTED_STREAMS[case]


@pytest.mark.gpu
@pytest.mark.parametrize("case", sorted(EXPECTED_STREAMS))
def test_stream_evidence_recorded_live(case):
    """The recorder's cases traced on this GPU now (benchmarks/record_kernel_traces.py): joined side
    streams (one or two) show no escape; unjoined, unwaited or left-current streams do."""
    import torch

    from benchmarks.record_kernel_traces import record

    raw = record(case, torch.device("cuda", 0))
    assert _stream_evidence(raw) == EXPECTED_STREAMS[case], _timeline(raw)
    # The trace held the timed stream until forward had launched everything (none of these synchronises).
    assert _hold_covered(raw) is True


def _framed_call(side_start: int, side_end: int) -> dict:
    """Events shaped like a GPU trace: the start marker (ends at 20), the forward range (launches
    from 30 to 100), one kernel on side stream 9, and the end marker (starts at 200)."""
    return {
        "forward_label": "F", "launch_prefix": "L::",
        "cpu": [{"name": "aten::add_", "corr": 1, "span": [0, 5], "tid": 1},
                {"name": "F", "corr": 2, "span": [30, 100], "tid": 1},
                {"name": "aten::add_", "corr": 3, "span": [150, 155], "tid": 1}],
        "kernels": [{"name": "marker", "kind": "kernel", "stream": 7, "span": [10, 20], "linked": 1},
                    {"name": "side_kernel", "kind": "kernel", "stream": 9, "span": [side_start, side_end],
                     "linked": 0},
                    {"name": "marker", "kind": "kernel", "stream": 7, "span": [200, 210], "linked": 3}],
    }


def test_side_stream_work_must_start_after_the_timed_streams_earlier_work():
    own = frozenset({"side_kernel"})
    ordered = attribute(_framed_call(40, 190), own, "cuda").report
    assert ordered.off_stream_kernels == ["side_kernel"]
    assert ordered.unordered_kernels == [] and ordered.escaped_kernels == []
    # Started while the start marker (behind the L2 flush) still ran: it never waited for the stream.
    early = attribute(_framed_call(15, 190), own, "cuda").report
    assert early.unordered_kernels == ["side_kernel"] and early.escaped_kernels == []
    late = attribute(_framed_call(40, 250), own, "cuda").report
    assert late.escaped_kernels == ["side_kernel"] and late.unordered_kernels == []
    switched = attribute({**_framed_call(40, 190), "current_stream_switched": True}, own, "cuda").report
    assert switched.current_stream_switched


def _held_call(hold_end: int) -> dict:
    """A trace shaped like trace_forward's: the flush, then the hold (a spin on the timed stream 7 that
    links to no frontend event) until `hold_end`, the start marker, the forward range (launches from 30
    to 100, one of a 2-unit kernel on side stream 9 that waited for nothing) and the end marker."""
    marker_start = hold_end + 2
    return {
        "forward_label": "F", "launch_prefix": "L::",
        "cpu": [{"name": "aten::zero_", "corr": 1, "span": [0, 3], "tid": 1},
                {"name": "aten::add_", "corr": 2, "span": [6, 9], "tid": 1},
                {"name": "F", "corr": 3, "span": [30, 100], "tid": 1},
                {"name": "aten::add_", "corr": 4, "span": [110, 115], "tid": 1}],
        "kernels": [{"name": "zero_kernel", "kind": "kernel", "stream": 7, "span": [4, 12], "linked": 1},
                    {"name": "spin_kernel", "kind": "kernel", "stream": 7, "span": [12, hold_end], "linked": 0},
                    {"name": "marker", "kind": "kernel", "stream": 7, "span": [marker_start, marker_start + 2],
                     "linked": 2},
                    {"name": "side_kernel", "kind": "kernel", "stream": 9, "span": [45, 47], "linked": 0},
                    {"name": "own_kernel", "kind": "kernel", "stream": 7, "span": [marker_start + 3, marker_start + 9],
                     "linked": 0},
                    {"name": "marker", "kind": "kernel", "stream": 7, "span": [marker_start + 10, marker_start + 12],
                     "linked": 4}],
    }


def test_the_traces_hold_is_not_forward_work_and_a_short_unwaited_side_kernel_runs_inside_it():
    """c3_side_stream_python on an H100: a few-microsecond kernel on a side stream that waited for nothing
    started long after the start marker, because the host launches slower than the GPU runs. The trace
    now holds the timed stream until forward has returned, so such a kernel starts before the marker."""
    own = frozenset({"side_kernel", "own_kernel"})
    attribution = attribute(_held_call(hold_end=120), own, "cuda")
    report = attribution.report
    assert report.unordered_kernels == ["side_kernel"] and report.escaped_kernels == []
    assert report.stream_hold_covered_forward is True
    # The spin is the harness's: neither side's work, and not in the forward's GPU time.
    assert sorted(k.name for k in report.own_kernels) == ["own_kernel", "side_kernel"]
    assert report.library_ms == 0.0 and report.plumbing_ms == 0.0
    assert attribution.forward_gpu_ms * 1e6 == 2 + 6
    observations = Observations(device="cuda", attribution=attribution)
    hit = next(h for h in runtime_rules(observations, PolicyConfig()) if h.rule == STREAM_RULE)
    assert hit.severity == "reject"


def test_on_a_real_trace_a_short_unwaited_side_kernel_runs_inside_the_hold():
    """CUPTI's record of the hold (an H100): the spin links to no frontend event and is left out of the
    forward's work; a 4096-element kernel on a side stream that never waited starts inside it."""
    small = attribute(HELD_TRACES["small_side_stream_never_waited_nor_joined"], OWN, "cuda")
    assert small.report.unordered_kernels == ["silu_kernel"] and small.report.escaped_kernels == []
    assert small.report.stream_hold_covered_forward is True
    assert [k.name for k in small.report.own_kernels] == ["silu_kernel"] and not small.report.library_kernels
    assert small.forward_gpu_ms < 0.1  # the 20 ms spin is not the forward's
    unjoined = attribute(HELD_TRACES["unjoined_side_stream"], OWN, "cuda").report
    assert unjoined.escaped_kernels == ["silu_kernel"] and unjoined.unordered_kernels == []
    # A waited side stream stays ordered even when the hold did not cover forward: here the start marker's
    # first launch loaded its module and waited the hold out (the frame is warmed up now), and that is told.
    joined = attribute(HELD_TRACES["joined_side_stream"], OWN, "cuda").report
    assert joined.unordered_kernels == [] and joined.escaped_kernels == []
    assert joined.stream_hold_covered_forward is False


def test_a_hold_that_ended_before_forward_returned_is_reported():
    # Forward was still launching (until 100) when the timed stream moved on to the start marker (92).
    report = attribute(_held_call(hold_end=90), frozenset({"own_kernel"}), "cuda").report
    assert report.stream_hold_covered_forward is False


def test_without_a_matching_name_nothing_is_own_and_defined_kernels_are_listed_as_not_launched():
    report = _report("conv_plus_epilogue", frozenset({"other_kernel"})).report
    # The Triton kernel is launched outside ATen and does not look like a vendor library's: own.
    assert [k.name for k in report.own_kernels] == ["silu_kernel"]
    assert report.own_kernels_not_launched == ["other_kernel"]


def test_a_library_kernel_launched_outside_aten_is_not_own():
    raw = {"forward_label": "F", "launch_prefix": "L::",
           "cpu": [{"name": "F", "corr": 1, "span": [0, 100], "tid": 1}],
           "kernels": [{"name": "sm90_xmma_gemm_f32f32_tn", "kind": "kernel", "stream": 7, "span": [10, 60],
                        "linked": 0},
                       {"name": "void my_gemm<float>(float const*, float*)", "kind": "kernel", "stream": 7,
                        "span": [60, 70], "linked": 0}]}
    report = attribute(raw, frozenset({"my_gemm"}), "cuda").report
    assert [k.name for k in report.library_kernels] == ["sm90_xmma_gemm_f32f32_tn"]
    assert report.share == pytest.approx(10 / 60, abs=1e-3)


def test_an_own_name_launched_by_an_aten_compute_operator_is_library():
    # A candidate cannot claim ATen's kernel by naming one of its own kernels the same way.
    raw = {"forward_label": "F", "launch_prefix": "L::",
           "cpu": [{"name": "F", "corr": 1, "span": [0, 100], "tid": 1},
                   {"name": "aten::add", "corr": 2, "span": [5, 20], "tid": 1}],
           "kernels": [{"name": "void at::native::elementwise_kernel<4>(int)", "kind": "kernel", "stream": 7,
                        "span": [30, 40], "linked": 2}]}
    report = attribute(raw, frozenset({"elementwise_kernel"}), "cuda").report
    assert not report.own_kernels and report.library_kernels[0].op == "aten::add"


@pytest.mark.parametrize("name, base", [
    ("void relu_kernel<float, 4>(float const*, float*, int)", "relu_kernel"),
    ("relu_kernel(float const*, float*, int)", "relu_kernel"),
    ("void (anonymous namespace)::fused<c10::Half>(c10::Half*)", "fused"),
    ("_Z11relu_kernelPKfPfi", "relu_kernel"),
    ("_ZN2ns11relu_kernelEPKf", "relu_kernel"),
    ("silu_kernel", "silu_kernel"),
    # Numba names a kernel module::qualname with ABI tags, demangled or not (numba-cuda 0.30).
    ("kj_candidate::silu_kernel[abi:v1][abi:cw51cXTLSUwv1sDUaKthqaNgoKmjgOR3W3CwAkMXLaJtQYkOIgxJU0gCqOkELKEJAA_3d_3d]"
     "(Array<float, 1, C, mutable, aligned>, Array<float, 1, C, mutable, aligned>, long long)", "silu_kernel"),
    ("_ZN12kj_candidate11silu_kernelB2v1B72cw51cXTLSUwv1sDUaKthqaNgoKmjgOR3W3CwAkMXLaJtQYkOIgxJU0gCqOkELKEJAA_3d_3dE"
     "5ArrayIfLi1E1C7mutable7alignedE5ArrayIfLi1E1C7mutable7alignedEx", "silu_kernel"),
    ("kj_candidate::Kernels::row_norm[abi:v2](Array<float, 2, A, mutable, aligned>)", "row_norm"),
])
def test_kernel_base_names(name, base):
    assert kernel_base_name(name) == base


def test_a_gpu_trace_without_any_device_activity_is_not_evidence():
    # Not even the harness's marker kernels: the profiler saw nothing, so nothing is judged.
    raw = {"forward_label": "F", "launch_prefix": "L::", "cpu": [{"name": "F", "corr": 1, "span": [0, 9], "tid": 1}],
           "kernels": []}
    assert attribute(raw, OWN, "cuda") is None
