"""GPU-only engine behaviour (run on the device machine: pytest -m gpu)."""

from __future__ import annotations

import pytest

from benchmarks.redteam.corpus import load_corpus
from contract.statuses import EvalStatus
from tests.engine.conftest import SILU_REFERENCE, triton_candidate
from tests.engine.test_failures import NO_STATIC_POLICY
from tests.problems_util import load_problem

pytestmark = pytest.mark.gpu

BIG_SILU_REFERENCE = SILU_REFERENCE.replace("N = 1000", "N = 1 << 24")


def test_honest_cuda_candidate_is_correct_and_timed_with_events(run_eval, settings):
    settings.gpu_index = 0  # as a lane pins its GPU (engine_call.engine_settings_for)
    problem = load_problem("elementwise")
    result = run_eval(problem.reference, problem.cuda_ok, device="cuda", timing=True, timing_budget_s=1.0)
    assert result.status == EvalStatus.ok, result.error
    assert result.timing.method.startswith("cuda_events")
    assert result.timing.candidate.n >= 10
    assert result.environment.gpu_name and result.environment.gpu_index == 0
    # The kernel profiler saw the extension's own kernel run, and nothing else computing.
    assert result.coverage.method == "cupti_kernel_trace"
    assert result.coverage.own_kernels and result.coverage.share == 1.0, result.coverage
    assert not result.rules, result.rules


def test_wrong_cuda_candidate_is_incorrect(run_eval):
    problem = load_problem("elementwise")
    result = run_eval(problem.reference, problem.cuda_wrong, device="cuda")
    assert result.status == EvalStatus.incorrect


# The offset is a run-time argument: a constant this large would fail Triton's compilation instead.
ILLEGAL_ACCESS = triton_candidate('''
    y = torch.empty_like(x)
    bad_kernel[(1,)](x, y, 1 << 40, BLOCK=256)
    return y
''', kernel='''
@triton.jit
def bad_kernel(x_ptr, y_ptr, far, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK) + far
    tl.store(y_ptr + offs, tl.load(x_ptr + offs))
''')

SIDE_STREAM = triton_candidate('''
    y = torch.empty_like(x)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(20):
            silu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
    return y
''')


def test_illegal_memory_access_is_contained_and_the_next_job_is_fine(run_eval):
    bad = run_eval(SILU_REFERENCE, ILLEGAL_ACCESS, device="cuda")
    assert bad.status == EvalStatus.runtime_error
    assert "illegal" in (bad.error.message + (bad.error.log_excerpt or "")).lower()
    problem = load_problem("elementwise")
    good = run_eval(problem.reference, problem.triton_ok, device="cuda", timing=True, timing_budget_s=0.5)
    assert good.status == EvalStatus.ok, good.error


def test_work_left_running_on_a_side_stream_is_rejected(run_eval):
    # No static rule reads streams: the kernel trace decides (KJ-R03), naming the kernel.
    result = run_eval(BIG_SILU_REFERENCE, SIDE_STREAM, device="cuda", timing=True, timing_budget_s=0.5)
    assert result.status == EvalStatus.rejected, result.rules
    hit = next(hit for hit in result.rules if hit.rule == "KJ-R03-work-outside-timed-stream")
    assert hit.severity == "reject" and "silu_kernel" in hit.evidence
    assert "silu_kernel" in result.coverage.escaped_kernels
    assert result.reward == 0.0


JOINED_SIDE_STREAM = triton_candidate('''
    y = torch.empty_like(x)
    current = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    side.wait_stream(current)
    with torch.cuda.stream(side):
        silu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
    current.wait_stream(side)
    return y
''')


TWO_JOINED_SIDE_STREAMS = next(case for case in load_corpus() if case.id == "honest_triton_two_streams")


@pytest.mark.parametrize(("reference", "candidate"), [
    (BIG_SILU_REFERENCE, JOINED_SIDE_STREAM),
    (TWO_JOINED_SIDE_STREAMS.reference_source, TWO_JOINED_SIDE_STREAMS.candidate_source),
], ids=["one", "two"])
def test_side_streams_joined_back_are_accepted(run_eval, reference, candidate):
    result = run_eval(reference, candidate, device="cuda", timing=True, timing_budget_s=0.5)
    assert result.status == EvalStatus.ok and not result.flagged, result.rules
    coverage = result.coverage
    assert len(coverage.off_stream_kernels) == 1 and not coverage.escaped_kernels, coverage
    assert not coverage.unordered_kernels and not coverage.current_stream_switched, coverage


HIDDEN_TORCH_SILU = triton_candidate('''
    y = torch.empty_like(x)
    silu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
    return OPS["mm"](y.view(4096, 4096), y.view(4096, 4096)).view(-1) * 0 + y
''', extra="OPS = {'mm': torch.matmul}\n")


def test_coverage_on_gpu_counts_hidden_pytorch_compute(run_eval):
    from contract.requests import PolicyConfig

    problem = load_problem("elementwise")
    honest = run_eval(problem.reference, problem.triton_ok, device="cuda")
    assert honest.coverage.method == "cupti_kernel_trace" and honest.coverage.share == 1.0, honest.coverage
    # The view(4096, 4096) only works for the problem's size: the doubled batch is not the point here.
    no_shape_trial = NO_STATIC_POLICY.model_copy(update={"disabled_rules": [*NO_STATIC_POLICY.disabled_rules,
                                                                            "KJ-R09"]})
    hidden = run_eval(BIG_SILU_REFERENCE, HIDDEN_TORCH_SILU, device="cuda", policy=no_shape_trial)
    assert hidden.status == EvalStatus.ok, hidden.error
    library_ops = {kernel.op for kernel in hidden.coverage.library_kernels}
    assert library_ops & {"aten::matmul", "aten::mm"}, hidden.coverage
    assert hidden.coverage.share < 0.5, hidden.coverage  # a 4096^3 matmul dwarfs one SiLU pass
    assert 0 < hidden.reward < 0.3 * 0.5  # the correctness part is scaled by coverage
    full = run_eval(BIG_SILU_REFERENCE, HIDDEN_TORCH_SILU, device="cuda",
                    policy=no_shape_trial.model_copy(update={"profile": "full"}))
    assert full.status == EvalStatus.rejected
    assert any(hit.rule == "KJ-R11-library-compute" for hit in full.rules), full.rules
    assert PolicyConfig().profile is None  # the default profile is the problem's, else partial


def test_a_call_whose_host_work_outlasts_the_flush_is_timed_at_its_device_time():
    """The timer queues a block's calls without synchronising between them (sandbox_side/timing/timer.py), so
    300 us of host work before a 1 ms kernel is hidden behind the calls queued ahead; with a synchronisation
    after every call only the flush (85 us on an H100) covered it, and the sample grew by the rest."""
    import statistics
    import time

    import torch

    from sandbox_side.timing import timer

    device = torch.device("cuda")
    spin = torch.empty(1, device=device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(1_000_000)
    end.record()
    torch.cuda.synchronize()
    kernel_ms = start.elapsed_time(end)

    def slow_host(x):
        until = time.perf_counter() + 300e-6
        while time.perf_counter() < until:
            pass
        torch.cuda._sleep(1_000_000)
        return x

    samples = timer.time_model(slow_host, [[spin]], device, runs=40, warmup=2).device_ms
    assert statistics.median(samples) < kernel_ms + 0.05, (statistics.median(samples), kernel_ms)


@pytest.mark.parametrize("wait", ["auto", "blocking"])
def test_the_judge_waits_for_the_device_as_configured_and_the_job_is_timed_alike(run_eval, settings, wait):
    """KERNELJUDGE_CUDA_SYNC_WAIT reaches the judge's CUDA context (its Ready environment reads the context's
    flags back from the driver); a job under either wait passes and is timed with events."""
    settings.cuda_sync_wait = wait
    problem = load_problem("elementwise")
    # A reference of its own: a judge cached by another test started under another wait (a service's wait is
    # one setting for its life).
    reference = f"{problem.reference}\n# cuda-sync-wait {wait}\n"
    result = run_eval(reference, problem.cuda_ok, device="cuda", timing=True, timing_budget_s=1.0)
    assert result.status == EvalStatus.ok, result.error
    assert result.environment.cuda_sync_wait == wait
    assert result.timing.method.startswith("cuda_events") and result.timing.candidate.n >= 10
