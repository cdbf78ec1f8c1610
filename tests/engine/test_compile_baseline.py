"""The torch.compile baseline on CPU: measured once per problem in the background by a judge of its own,
attached to later jobs, waited for only by a job whose reward uses it, and never in the way of an
eager verdict when torch.compile fails."""

from __future__ import annotations

import math

from contract.statuses import EvalStatus
from tests.engine.conftest import HONEST_SILU, SILU_REFERENCE
from worker.engine.timing import baselines
from worker.engine.timing.baselines import COMPILE_BASELINE, REFERENCE_TIMING, BaselineKey

# Small timing so that the Triton interpreter's candidate stays quick.
TIMING = {"timing": True, "timing_budget_s": 0.2, "timing_min_runs": 3, "timing_max_runs": 5, "trials": 2}

# A toolchain Inductor cannot use: torch.compile fails at the first call, eager is unaffected.
UNCOMPILABLE_REFERENCE = ("import torch._inductor.config\n"
                          "torch._inductor.config.cpp.cxx = ('/nonexistent/c++',)\n" + SILU_REFERENCE)


def test_a_job_rewarded_against_compile_waits_for_the_baseline_and_later_jobs_reuse_it(run_eval, settings):
    first = run_eval(SILU_REFERENCE, HONEST_SILU, seed=4101, compile_baseline=True, reward_preset="log_speedup",
                     reward_baseline="compile", **TIMING)
    assert first.status == EvalStatus.ok, first.error
    info = first.extra.compile_baseline
    assert info["state"] == "waited" and info["available"] is True and info["compile_s"] > 0
    timing = first.timing
    assert timing is not None and timing.compile_baseline_missing is None
    record = settings.baseline_book().get(BaselineKey.of(SILU_REFERENCE, "cpu", None), COMPILE_BASELINE)
    assert record is not None and record.available and record.eager_runs == record.compiled_runs > 0
    # The job's speedup against torch.compile is its own eager speedup scaled by the record's ratio.
    assert math.isclose(timing.compile_speedup, timing.speedup * record.eager_median_ms / record.compiled_median_ms)
    assert timing.compile_reference_median_ms == record.compiled_median_ms
    assert timing.compile_reference is not None and timing.compile_reference.n == record.compiled_runs
    s = timing.compile_speedup
    assert first.reward_components["speedup"] == s
    assert math.isclose(first.reward, max(0.0, min(math.log2(s) + 1.0, 4.0)) / 4.0)

    second = run_eval(SILU_REFERENCE, HONEST_SILU, seed=4101, compile_baseline=True, **TIMING)
    assert second.status == EvalStatus.ok, second.error
    assert second.extra.reference_cache == "hit"
    assert second.extra.compile_baseline["state"] == "attached", "measured once, persisted, reused"
    assert settings.baseline_book().get(BaselineKey.of(SILU_REFERENCE, "cpu", None), COMPILE_BASELINE) is record
    assert second.reward_components["speedup"] == second.speedup, "the eager baseline is the default"
    # The eager reference's timing is persisted too (it sizes later jobs' timing windows).
    eager = settings.baseline_book().get(BaselineKey.of(SILU_REFERENCE, "cpu", None), REFERENCE_TIMING)
    assert eager is not None and eager.median_ms > 0 and eager.runs > 0


def test_in_the_service_a_job_that_does_not_reward_compile_does_not_wait_and_says_it_is_pending(run_eval, settings):
    from worker.engine.gpu_schedule import GpuSchedule

    settings.gpu_schedule = GpuSchedule("cpu0")  # the service's lane (the engine alone always waits)
    result = run_eval(SILU_REFERENCE, HONEST_SILU, seed=4104, compile_baseline=True, **TIMING)
    assert result.status == EvalStatus.ok, result.error
    assert result.extra.compile_baseline == {"state": "pending"}
    assert result.timing is not None and result.timing.compile_speedup is None
    assert result.timing.compile_baseline_missing.startswith("pending")


def test_a_reference_torch_compile_cannot_compile_still_gets_an_eager_verdict(run_eval):
    result = run_eval(UNCOMPILABLE_REFERENCE, HONEST_SILU, seed=4102, compile_baseline=True,
                      reward_baseline="compile", **TIMING)
    assert result.status == EvalStatus.ok, result.error
    assert result.timing is not None and result.timing.speedup > 0
    assert result.timing.compile_speedup is None and result.timing.compile_reference is None
    assert "torch.compile failed" in result.timing.compile_baseline_missing
    assert "InvalidCxxCompiler" in result.timing.compile_baseline_missing
    assert result.extra.compile_baseline["available"] is False
    # The reward falls back to the eager speedup and says why.
    assert result.reward_components["speedup"] == result.speedup
    assert result.extra.reward_baseline.used == "eager"


def test_the_compile_baseline_is_off_by_default_on_cpu(run_eval):
    result = run_eval(SILU_REFERENCE, HONEST_SILU, seed=4103, **TIMING)
    assert result.status == EvalStatus.ok, result.error
    assert result.extra.compile_baseline is None
    assert result.timing is not None and result.timing.compile_speedup is None
    assert "off by default on cpu" in result.timing.compile_baseline_missing


def test_a_compiled_reference_that_disagrees_with_the_eager_one_is_no_baseline():
    import torch

    from sandbox_side.judging import correctness
    from sandbox_side.judging.compiled_reference import compile_reference
    from sandbox_side.runtime.loader import to_storable

    class CompilesDifferently(torch.nn.Module):
        def forward(self, x):
            return x * 2 if torch.compiler.is_compiling() else x * torch.sigmoid(x)

    model, args = CompilesDifferently(), [torch.randn(64)]
    expected = correctness.Outputs(**to_storable(model(*args)))

    def matches(stored: dict) -> str | None:
        result = correctness.compare(0, expected, correctness.Outputs(**stored), None, None)
        return None if result.passed else result.message

    outcome = compile_reference(model, args, torch.device("cpu"), lambda: None, matches)
    assert outcome.model is None and outcome.compile_s > 0
    assert outcome.reason.startswith("the compiled reference does not match the eager one on trial 0")


def test_the_worker_switch_and_the_job_option_turn_the_baseline_off():
    from contract.requests import EvalOptions
    from worker.engine.engine_settings import EngineSettings
    from worker.engine.timing.compile_baseline import off_reason

    settings = EngineSettings()
    cuda = EvalOptions(device="cuda")
    assert off_reason(cuda, settings) is None, "on by default on cuda"
    assert off_reason(EvalOptions(device="cuda", compile_baseline=False), settings) is not None
    settings.compile_baseline = False
    assert "KERNELJUDGE_COMPILE_BASELINE" in off_reason(cuda, settings)


def test_the_compile_speedup_formula_scales_the_paired_eager_speedup():
    record = baselines.CompileBaselineRecord(True, 0.0, eager_median_ms=2.0, compiled_median_ms=1.0)
    assert baselines.compile_speedup(3.0, record) == 6.0
    assert baselines.compile_speedup_interval((2.0, 4.0), record) == (4.0, 8.0)


def test_the_baseline_judge_is_background_work_and_says_so_to_the_host_sampler(settings, monkeypatch):
    # Its torch.compile is host work like a build's: the build cores, the builds' nice value, so that the jobs'
    # judges and runners come first; and its environment names it for benchmarks/host_sched.py.
    import os
    from pathlib import Path

    from contract.requests import EvalOptions
    from worker.engine.process_tree import descendants
    from worker.engine.timing import baseline_worker

    seen: dict[str, object] = {}
    measured_cpu = baseline_worker.tree_cpu_s

    def observe(pid):  # called while the judge still runs, just before it is closed
        tree = descendants(pid)
        seen["nice"] = {os.getpriority(os.PRIO_PROCESS, p) for p in tree}
        seen["named"] = any(b"KJ_PURPOSE=compile-baseline\0" in Path(f"/proc/{p}/environ").read_bytes()
                            for p in tree)
        return measured_cpu(pid)

    monkeypatch.setattr(baseline_worker, "tree_cpu_s", observe)
    options = EvalOptions(compile_baseline=True, **TIMING)
    task = baseline_worker.BaselineTask(BaselineKey.of(SILU_REFERENCE, "cpu", None), SILU_REFERENCE, options)
    _key, records = baseline_worker.measure(task, settings)
    assert records[0].available, records
    expected = min(os.getpriority(os.PRIO_PROCESS, 0) + settings.build_nice, 19)
    assert seen == {"nice": {expected}, "named": True}
