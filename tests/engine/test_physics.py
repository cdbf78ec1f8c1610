"""The physics rule (KJ-R06) on CPU, through the whole engine: a forward faster than reading its inputs once
at the measured copy bandwidth did not read them (worker/engine/verdict/physics.py, sandbox_side/judging/physics_measure.py)."""

from __future__ import annotations

import textwrap

import pytest
import torch

from contract.requests import PolicyConfig
from contract.results import CoverageReport, KernelSummary
from contract.statuses import EvalStatus
from sandbox_side.judging import physics_measure as judge_physics
from tests.engine.conftest import TRITON_HEADER
from tests.problems_util import load_problem
from worker.engine.engine_settings import EngineSettings
from worker.engine.verdict import physics
from worker.engine.verdict.attribution import Attribution
from worker.engine.verdict.verification import Observations, runtime_rules

RULE = "KJ-R06-beyond-roofline"

# A column mean of a 16 MiB input whose rows each appear four times in a row: a mean over every 4th row is
# the mean of all of them, so a kernel that reads a quarter of the input passes every trial. (The spikes
# probe breaks that structure and catches this one; the rule must catch it alone, as on the large inputs
# where spikes cannot: the probes are switched off below.)
MEAN_REFERENCE = textwrap.dedent('''
    import torch

    ROWS = 1024
    COLS = 4096


    class Model(torch.nn.Module):
        def forward(self, x):
            return x.mean(dim=0)


    def get_inputs():
        return [torch.randn(ROWS // 4, COLS).repeat_interleave(4, dim=0)]


    def get_init_inputs():
        return []
''')

_MEAN = TRITON_HEADER + textwrap.dedent('''
    @triton.jit
    def column_mean_kernel(x_ptr, y_ptr, rows, cols, STEP: tl.constexpr, BLOCK_R: tl.constexpr,
                           BLOCK_C: tl.constexpr):
        c = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
        acc = tl.zeros([BLOCK_C], dtype=tl.float32)
        for r0 in range(0, rows, BLOCK_R * STEP):
            r = r0 + tl.arange(0, BLOCK_R) * STEP
            mask = (r[:, None] < rows) & (c[None, :] < cols)
            acc += tl.sum(tl.load(x_ptr + r[:, None] * cols + c[None, :], mask=mask, other=0.0), axis=0)
        tl.store(y_ptr + c, acc / (rows // STEP), mask=c < cols)


    class ModelNew(torch.nn.Module):
        def forward(self, x):
            x = x.contiguous()
            rows, cols = x.shape
            y = torch.empty(cols, dtype=x.dtype, device=x.device)
            column_mean_kernel[(triton.cdiv(cols, 1024),)](x, y, rows, cols, STEP=STEP, BLOCK_R=256, BLOCK_C=1024)
            return y
''')
HONEST_MEAN = _MEAN.replace("STEP=STEP", "STEP=1")
# Reads rows 0, 4, 8, ...: a quarter of its input.
SUBSAMPLED_MEAN = _MEAN.replace("STEP=STEP", "STEP=4")

NO_PROBES = PolicyConfig(disabled_rules=["KJ-R15"])


def _physics(result) -> dict:
    physics = result.extra.physics
    assert physics is not None, result.extra
    return physics


def test_a_kernel_that_reads_every_4th_row_is_rejected_with_both_numbers(run_eval):
    result = run_eval(MEAN_REFERENCE, SUBSAMPLED_MEAN, trials=2, policy=NO_PROBES)
    assert result.status == EvalStatus.rejected, (result.error, result.rules)
    assert result.correctness.passed  # every trial passed: only physics tells it apart
    hit = next(h for h in result.rules if h.rule == RULE)
    assert hit.severity == "reject"
    assert result.reward == 0.0 and not result.correct
    physics = _physics(result)
    assert physics["applies"] and physics["rejected"]
    # Counted: the whole input (every block of it changes the reference's output).
    assert physics["counted_bytes"] == 1024 * 4096 * 4
    assert physics["inputs"][0]["counted"] == physics["inputs"][0]["bytes"] == 1024 * 4096 * 4
    assert physics["bandwidth_source"] == "measured" and physics["bandwidth_gbps"] > 0
    # On CPU the interpreter counts what the kernel's loads read: a quarter of the input.
    assert physics["candidate"]["trace_loaded_bytes"] == 1024 * 4096 * 4 // 4
    assert physics["readable_bytes"] < 0.5 * physics["counted_bytes"]
    assert f"its Triton kernels loaded {1024 * 4096} bytes" in hit.evidence
    assert f"it read at most {physics['readable_bytes']} bytes" in hit.evidence
    assert f"of the {physics['counted_bytes']} bytes" in hit.evidence
    assert "input 0 float32[1024, 4096]: 16777216 of 16777216 bytes" in hit.evidence
    assert "at the measured copy bandwidth" in hit.evidence


def test_the_honest_kernel_on_the_same_problem_passes_the_rule(run_eval):
    result = run_eval(MEAN_REFERENCE, HONEST_MEAN, trials=2, policy=NO_PROBES)
    assert result.status == EvalStatus.ok, (result.error, result.rules)
    assert RULE not in {h.rule for h in result.rules}
    physics = _physics(result)
    assert physics["applies"] and not physics["rejected"]
    assert physics["candidate"]["trace_loaded_bytes"] == physics["counted_bytes"]


def test_switching_the_rule_off_lets_the_subsampler_through(run_eval):
    policy = PolicyConfig(disabled_rules=["KJ-R15", "KJ-R06"])
    result = run_eval(MEAN_REFERENCE, SUBSAMPLED_MEAN, trials=2, policy=policy)
    assert result.status == EvalStatus.ok and RULE not in {h.rule for h in result.rules}
    assert _physics(result)["rejected"]  # still measured and reported


# Honest problem-library candidates at sizes where the rule applies (over 1 MiB of inputs).
LIBRARY_SIZES = {
    "elementwise": {"NUMEL": 300_007},
    "reduction": {"BATCH": 256, "DIM": 1100},
    "softmax": {"ROWS": 256, "COLS": 1100},
}


@pytest.mark.parametrize("name", sorted(LIBRARY_SIZES))
def test_honest_library_candidates_are_not_rejected_by_the_rule(run_eval, name):
    problem = load_problem(name).shrunk(**LIBRARY_SIZES[name])
    # The probe trials are tested with these candidates elsewhere (tests/engine/test_problems.py); off here,
    # they would only add interpreted calls.
    result = run_eval(problem.reference, problem.triton_ok, trials=2, policy=NO_PROBES)
    assert result.status == EvalStatus.ok, (result.error, result.rules)
    assert RULE not in {h.rule for h in result.rules}
    physics = _physics(result)
    assert physics["applies"], physics["why_not"]
    assert physics["counted_bytes"] >= 1 << 20
    assert physics["readable_bytes"] >= 0.5 * physics["counted_bytes"]


# -- the rule on measured numbers (worker/engine/verdict/physics.py) -------------------------------------------------
MIB = 1 << 20


def _gpu_attribution(busy_ms: float) -> Attribution:
    report = CoverageReport(share=1.0, own_ms=busy_ms, library_ms=0.0, plumbing_ms=0.0,
                            own_kernels=[KernelSummary(name="mean_kernel", launches=1, ms=busy_ms, share=1.0)],
                            method="cupti_kernel_trace")
    return Attribution(report=report, forward_gpu_ms=busy_ms)


def _reads(settings: EngineSettings, *, copy_gbps: float = 2800.0, reference_ms: float = 0.12,
           counted: int = 256 * MIB, gpu: str = "a test GPU", l2_bytes: int = 0) -> physics.ProblemReads:
    measured = {"bandwidth": {"copy_gbps": copy_gbps}, "reference_ms": reference_ms, "l2_bytes": l2_bytes,
                "inputs": [{"index": 0, "input": "float32[16384, 4096]", "bytes": 256 * MIB, "counted": counted}]}
    return physics.problem_reads(measured, "cuda", gpu, settings)


def test_the_issues_subsampled_mean_is_rejected_with_both_numbers(settings):
    # 256 MiB read once at a measured 2800 GB/s (read + written by a copy): 0.0959 ms; its kernels ran 33 µs.
    settings.peak_bandwidth_gbps = 0.0
    reads = _reads(settings, gpu="the issue's GPU")
    assessment = physics.assess(reads, _gpu_attribution(0.033), None, "cuda")
    assert assessment.applies and assessment.rejected
    hit = assessment.hit()
    assert hit.rule == physics.RULE and hit.severity == "reject"
    assert "the forward's kernels were busy 0.0330 ms in the traced call" in hit.evidence
    assert f"under 50% of the {256 * MIB} bytes" in hit.evidence
    assert f"input 0 float32[16384, 4096]: {256 * MIB} of {256 * MIB} bytes" in hit.evidence
    assert "at the measured copy bandwidth 2800 GB/s takes 0.0959 ms" in hit.evidence
    report = assessment.report()
    assert report["floor_ms"] == pytest.approx(256 * MIB / 2.8e12 * 1e3)
    assert report["candidate"] == {"trace_gpu_ms": 0.033}
    assert report["readable_bytes"] == int(0.033e-3 * 2.8e12)
    # Through the runtime rules: a rejection, unless the job switches the rule off.
    hits = runtime_rules(Observations(device="cuda", physics=assessment), PolicyConfig())
    assert [h.rule for h in hits] == [physics.RULE]
    assert runtime_rules(Observations(device="cuda", physics=assessment), PolicyConfig(disabled_rules=["KJ-R06"])) == []


def test_an_honest_kernel_at_the_bandwidth_passes_and_so_does_one_near_the_margin(settings):
    settings.peak_bandwidth_gbps = 0.0
    reads = _reads(settings, gpu="honest GPU")
    # Reading 256 MiB at 3.2 TB/s (faster than the copy: a read-only stream) is 84 µs.
    for busy_ms in (0.1, 0.084, 0.05):
        assessment = physics.assess(reads, _gpu_attribution(busy_ms), None, "cuda")
        assert assessment.applies and not assessment.rejected and assessment.hit() is None


def test_a_timed_median_below_the_floor_rejects_even_when_the_traced_call_read_everything(settings):
    settings.peak_bandwidth_gbps = 0.0
    assessment = physics.assess(_reads(settings, gpu="timed GPU"), _gpu_attribution(0.1), 0.02, "cuda")
    assert assessment.rejected and "its timed median is 0.0200 ms" in assessment.evidence
    assert assessment.report()["candidate"] == {"trace_gpu_ms": 0.1, "timed_median_ms": 0.02}


def test_the_rule_stands_aside_where_the_reference_itself_is_faster_or_the_problem_is_small(settings):
    settings.peak_bandwidth_gbps = 0.0
    fast_reference = physics.assess(_reads(settings, reference_ms=0.03, gpu="g1"), _gpu_attribution(0.01), None,
                                    "cuda")
    assert not fast_reference.applies and not fast_reference.rejected
    assert "the reference itself runs in 0.0300 ms" in fast_reference.why_not
    small = physics.assess(_reads(settings, counted=MIB // 2, gpu="g2"), _gpu_attribution(1e-6), None, "cuda")
    assert not small.applies and "under 1048576" in small.why_not
    skipped = physics.problem_reads({"bandwidth": {"copy_gbps": 2800.0}, "skipped": "its inputs hold 4000 bytes"},
                                    "cuda", "g3", settings)
    assert not physics.assess(skipped, _gpu_attribution(1e-6), None, "cuda").applies
    failed = physics.problem_reads({"error": "OutOfMemoryError: ..."}, "cuda", "g4", settings)
    assessment = physics.assess(failed, _gpu_attribution(1e-6), None, "cuda")
    assert not assessment.applies and "could not measure" in assessment.why_not


def test_the_fastest_bandwidth_measured_on_a_device_counts_and_the_variable_overrides_it(settings):
    settings.peak_bandwidth_gbps = 0.0
    assert physics.measures_wanted("cuda", "book GPU", settings) == ["copy"]  # each judge measures on a GPU
    for measured in (1500.0, 2800.0, 1000.0):  # a measurement slowed by a neighbour never raises the floor
        reads = _reads(settings, copy_gbps=measured, gpu="book GPU")
    assert reads.bandwidth.copy_gbps == 2800.0 and reads.bandwidth.source == "measured"
    # On CPU the host's bandwidth is measured once per process (per thread count: a key no engine test uses).
    settings.cpu_threads = 97
    assert physics.measures_wanted("cpu", None, settings) == ["copy"]
    physics.problem_reads({"bandwidth": {"copy_gbps": 20.0}}, "cpu", None, settings)
    assert physics.measures_wanted("cpu", None, settings) == []
    settings.peak_bandwidth_gbps = 3350.0
    assert physics.measures_wanted("cuda", "book GPU", settings) == []
    reads = _reads(settings, copy_gbps=2800.0, gpu="book GPU")
    assert reads.bandwidth.copy_gbps == 3350.0 and reads.bandwidth.source == "configured"
    assessment = physics.assess(reads, _gpu_attribution(0.033), None, "cuda")
    assert assessment.rejected and "at the configured copy bandwidth 3350 GB/s" in assessment.evidence


def test_on_cpu_the_interpreters_loads_and_the_rest_of_the_calls_time_are_what_was_read(settings):
    settings.cpu_threads = 98  # a bandwidth of its own, not the engine tests' measured one
    measured = {"bandwidth": {"copy_gbps": 10.0}, "reference_ms": 5.0,
                "inputs": [{"index": 0, "input": "float32[1024, 4096]", "bytes": 16 * MIB, "counted": 16 * MIB}]}
    reads = physics.problem_reads(measured, "cpu", None, settings)
    report = CoverageReport(share=1.0, own_ms=400.0, library_ms=0.1, plumbing_ms=0.0, method="interpreter_and_aten_trace")
    quarter = Attribution(report=report, interpreter_loaded_bytes=4 * MIB, interpreter_launch_ms=400.0)
    assert physics.assess(reads, quarter, None, "cpu").rejected
    # The same kernel, with PyTorch reading the input in 1 ms beside it (10 MB at 10 GB/s): not evidence.
    report.library_ms = 1.0
    assert not physics.assess(reads, quarter, None, "cpu").rejected
    whole = Attribution(report=report, interpreter_loaded_bytes=16 * MIB, interpreter_launch_ms=400.0)
    assert not physics.assess(reads, whole, None, "cpu").rejected


# -- which input bytes must be read (sandbox_side/judging/physics_measure.py, in the judge) --------------------------------
def _counted(forward, make) -> list[dict]:
    torch.manual_seed(0)
    args, other = make(), make()
    prepare = lambda values: [v.clone() if isinstance(v, torch.Tensor) else v for v in values]  # noqa: E731
    return judge_physics.input_reads(lambda values: [forward(*prepare(values))], args, other, call_s=0.001)


def test_inputs_the_output_depends_on_count_and_the_rest_is_left_out_with_why():
    mean = _counted(lambda x: x.mean(0), lambda: [torch.randn(512, 512)])
    assert mean[0]["counted"] == mean[0]["bytes"] == 512 * 512 * 4 and mean[0]["note"] is None
    # A slice: only the blocks holding its columns change the output.
    sliced = _counted(lambda x: x[:, :10].sum(1), lambda: [torch.randn(512, 512)])
    assert sliced[0]["counted"] == 512 * 512 * 4 // 4 and "grid: 4 of 16 blocks" in sliced[0]["note"]
    # A triangular mask made inside forward: the blocks above the diagonal are not read.
    masked = _counted(lambda x: torch.tril(x).sum(-1), lambda: [torch.randn(4, 256, 256)])
    assert masked[0]["counted"] == 4 * 256 * 256 * 4 * 10 // 16
    # One batch entry of three dimensions: the slabs along dimension 0.
    first = _counted(lambda x: x[0].sum(), lambda: [torch.randn(8, 128, 128)])
    assert first[0]["counted"] == 8 * 128 * 128 * 4 // 4 and "dim 0: 1 of 4 blocks" in first[0]["note"]
    # An unused input, a constant one, an early exit, a hyperparameter, a small tensor.
    reads = _counted(lambda x, unused, ones, n, bias: x * ones + n + bias.sum() + 0 * unused.shape[0],
                     lambda: [torch.randn(256, 256), torch.randn(256, 256), torch.ones(256, 256), 3, torch.randn(8)])
    assert [r["counted"] for r in reads] == [256 * 256 * 4, 0, 0, 0, 0]
    assert "does not change the reference's output" in reads[1]["note"]
    assert "a constant" in reads[2]["note"] and reads[3]["note"] == "not a tensor"
    assert reads[4]["note"].startswith("under ")
    early = _counted(lambda x: (x > -10).any(), lambda: [torch.randn(256, 256)])
    assert early[0]["counted"] == 0


def test_inputs_that_fit_in_l2_are_judged_by_the_cold_timed_median_only(settings):
    """A traced call's inputs may still be in L2 (50 MB on an H100), read there faster than memory allows: an
    honest kernel on 32 MiB would look like a subsampler by its traced time."""
    settings.peak_bandwidth_gbps = 0.0
    reads = _reads(settings, gpu="L2 GPU", counted=32 * MIB, reference_ms=0.02, l2_bytes=50 * 10**6)
    floor_ms = 32 * MIB / 2.8e12 * 1e3  # 0.012 ms
    l2_fast = _gpu_attribution(0.25 * floor_ms)  # read from L2 at 4x the memory's rate
    untimed = physics.assess(reads, l2_fast, None, "cuda")
    assert not untimed.applies and "fit in 4x the GPU's L2" in untimed.why_not
    honest = physics.assess(reads, l2_fast, 1.1 * floor_ms, "cuda")  # cold L2: memory speed
    assert honest.applies and not honest.rejected and "trace_gpu_ms" not in honest.candidate
    subsampler = physics.assess(reads, l2_fast, 0.3 * floor_ms, "cuda")
    assert subsampler.rejected and "its timed median" in subsampler.evidence
