"""KJ-R04 on a trace taken beside other jobs: the call is traced again with the device held alone, and that
trace decides (worker/engine/device_stage.py, DeviceStage._trace_alone)."""

from __future__ import annotations

from types import SimpleNamespace

from contract.requests import PolicyConfig
from contract.results import ResultNotes
from worker.engine.device_stage import DeviceStage
from worker.engine.verdict.attribution import attribute
from worker.engine.verdict.verification import Observations, runtime_rules, trace_disagrees

CANDIDATE = "import torch\n\n\nclass ModelNew(torch.nn.Module):\n    pass\n"
R04 = "KJ-R04-timing-disagrees-with-wall-clock"


def _trace(own_kernel_ns: int) -> dict:
    """A framed call (flush, start marker, forward's one kernel, end marker), times in nanoseconds."""
    end = 20 + own_kernel_ns
    return {
        "forward_label": "F", "launch_prefix": "L::",
        "cpu": [{"name": "aten::zero_", "corr": 1, "span": [0, 3], "tid": 1},
                {"name": "aten::add_", "corr": 2, "span": [6, 9], "tid": 1},
                {"name": "F", "corr": 3, "span": [10, 14], "tid": 1},
                {"name": "aten::add_", "corr": 4, "span": [15, 16], "tid": 1}],
        "kernels": [{"name": "zero_kernel", "kind": "kernel", "stream": 7, "span": [4, 12], "linked": 1},
                    {"name": "marker", "kind": "kernel", "stream": 7, "span": [14, 16], "linked": 2},
                    {"name": "gemm_kernel", "kind": "kernel", "stream": 7, "span": [18, end], "linked": 3},
                    {"name": "marker", "kind": "kernel", "stream": 7, "span": [end + 2, end + 4], "linked": 4}],
    }


class _Session:
    def __init__(self, events: dict) -> None:
        self.events = events
        self.requests = 0

    def request(self, command, reply_type, deadline):
        self.requests += 1
        return SimpleNamespace(events=self.events, tampered=[])


def _stage(first_trace: dict) -> DeviceStage:
    stage = DeviceStage.__new__(DeviceStage)
    stage.options = SimpleNamespace(device=SimpleNamespace(value="cuda"))
    stage.prepared = SimpleNamespace(request=SimpleNamespace(candidate=CANDIDATE))
    stage.builder = SimpleNamespace(extra=ResultNotes())
    stage._attribution = attribute(first_trace, frozenset({"gemm_kernel"}), "cuda")
    return stage


def _r04(stage: DeviceStage, median_ms: float) -> list:
    observations = Observations(device="cuda", attribution=stage._attribution, candidate_device_median_ms=median_ms,
                                candidate_device_std_ms=0.002)
    return [hit for hit in runtime_rules(observations, PolicyConfig()) if hit.rule == R04]


def test_an_honest_gemm_stretched_by_other_jobs_in_the_first_trace_passes_on_the_trace_taken_alone():
    # Beside another context the GEMM read 2.86 ms busy; it runs 0.63 ms alone, as the timer measured.
    stage = _stage(_trace(2_860_000))
    assert stage._attribution is not None and trace_disagrees(0.63, 0.002, stage._attribution.forward_gpu_ms)
    assert _r04(stage, 0.63), "the first trace alone would reject it"
    runner = SimpleNamespace(session=_Session(_trace(640_000)))
    stage._trace_alone(runner, deadline=0.0)
    assert runner.session.requests == 1
    assert stage._attribution.traced_alone and abs(stage._attribution.forward_gpu_ms - 0.64) < 1e-5
    assert abs(stage.builder.extra.trace_busy_beside_others_ms - 2.86) < 1e-5
    assert not _r04(stage, 0.63)


def test_a_forged_median_is_still_rejected_by_the_trace_taken_alone_with_that_said():
    stage = _stage(_trace(2_860_000))
    stage._trace_alone(SimpleNamespace(session=_Session(_trace(2_800_000))), deadline=0.0)
    hits = _r04(stage, 0.63)
    assert hits and "kernels busy 2.8000 ms in a traced call with the device held alone" in hits[0].evidence
