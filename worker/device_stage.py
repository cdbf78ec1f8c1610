"""The device half of an evaluation: reference and candidate children, comparison, timing.

Both children stay alive from their correctness run to their timing, so each pays for
`import torch`, CUDA initialisation and the module import once. They never run at the same
time: the supervisor sends one operation at a time, so timings do not overlap.
"""

from __future__ import annotations

import logging
import time

from . import correctness, engine, timing_stats
from .attribution import Attribution, attribute
from .correctness import OutputFileError, Outputs
from .discrimination import discriminate
from .input_checks import check_inputs
from .kernel_names import own_kernel_names
from .launch import RunnerSession, UserFailure
from .models import (
    Backend,
    CorrectnessReport,
    Device,
    EnvironmentInfo,
    EvalResult,
    EvalStatus,
    ShapeTrialReport,
    TimingReport,
)
from .policy.registry import is_disabled
from .precision import precision_check
from .settings import EngineSettings
from .verification import SHAPE_RULE, Observations, runtime_rules

log = logging.getLogger(__name__)

MAX_OUTPUT_FILE_BYTES = 16 * 1024**3
# Fixed-count runs, timed from outside the child, last at least this long.
EXTERNAL_RUN_TARGET_S = 0.25


class _ReferenceTimingFailure(Exception):
    """The reference's process failed while being timed (told apart by origin, not by message)."""

    def __init__(self, failure: UserFailure) -> None:
        super().__init__(failure.message)
        self.failure = failure


class DeviceStage:
    def __init__(self, prepared: engine.PreparedJob, settings: EngineSettings, on_stage) -> None:
        self.prepared = prepared
        self.settings = settings
        self.on_stage = on_stage
        self.options = prepared.request.options
        self.builder = prepared.builder
        self.seeds = engine.new_seeds(self.options.seed, self.options.trials, settings.timing_pool_size)
        self.shape_check = not is_disabled(SHAPE_RULE, self.options.policy.disabled_rules)
        if not self.shape_check:
            self.seeds["shape_seeds"] = []
        self.profile = self.options.policy.profile or "partial"
        # Learned along the way, used by the runtime rules.
        self._attribution: Attribution | None = None
        self._shape_failure: str | None = None
        self._shape_info: dict = {}
        self._ref_shape: list[Outputs] = []
        self._truths: list[Outputs] = []
        self._perturbed: list[int] = []
        self._trial_inputs: list[list] = []

    def run(self) -> EvalResult:
        opts = self.options
        engine._notify(self.on_stage, "reference")
        # Both children start now so that their imports overlap; the candidate gets its
        # inputs only once the reference has written them.
        reference = engine.runner(self.prepared, self.settings, role="reference", limit_s=opts.limits.run_s)
        candidate = engine.runner(self.prepared, self.settings, role="candidate", limit_s=opts.limits.run_s)
        try:
            with self.builder.stage("reference"):
                reference.process.start()
                candidate.process.start()
            result = self._with_reference(reference, candidate)
        finally:
            reference.process.close(grace_s=2.0)
            candidate.process.close(grace_s=2.0)
            self.builder.set_candidate_log(candidate.logs())
        # The candidate's output is complete only once its process is gone.
        result.candidate_log = self.builder.candidate_log
        return result

    def _with_reference(self, reference: RunnerSession, candidate: RunnerSession) -> EvalResult:
        opts = self.options
        with self.builder.stage("reference"):
            deadline = time.monotonic() + opts.limits.run_s
            try:
                reference.wait_ready(deadline)
                generated = reference.request("generate", deadline, shape_max_bytes=self.settings.shape_trial_max_bytes,
                                              tolerances=correctness.tolerance_table(opts.atol, opts.rtol),
                                              **self.seeds)
            except UserFailure as failure:
                return self.builder.reference_failure(failure)
            self._record_environment(reference.environment)
            self._shape_info = dict(generated.get("shape_trial") or {})
            self._perturbed = [int(i) for i in generated.get("perturbed_trials") or []]
            if generated.get("truth_skipped"):
                self.builder.extra["precision_skipped"] = str(generated["truth_skipped"])[:500]
            ref_data = correctness.load_output_file(self.prepared.workdir / "ref_out" / "outputs.pt",
                                                    MAX_OUTPUT_FILE_BYTES)
            ref_trials = [correctness.parse_outputs(e) for e in ref_data["trials"]]
            self._truths = [correctness.parse_outputs(e) for e in ref_data.get("truths") or []]
            self._trial_inputs = correctness.load_output_file(self.prepared.workdir / "ref_out" / "inputs.pt",
                                                              MAX_OUTPUT_FILE_BYTES)["trials"]
            ref_pool = [correctness.parse_outputs(e) for e in ref_data["pool"]]
            self._ref_shape = [correctness.parse_outputs(e) for e in ref_data.get("shape_trials", [])]
            engine.link_inputs(self.prepared)
        engine._notify(self.on_stage, "candidate")
        return self._with_both(reference, candidate, ref_trials, ref_pool)

    def _with_both(self, reference: RunnerSession, candidate: RunnerSession, ref_trials: list[Outputs],
                   ref_pool: list[Outputs]) -> EvalResult:
        opts = self.options
        # The candidate's clock starts when its inputs exist (its import overlapped the reference).
        deadline = time.monotonic() + opts.limits.run_s
        out_bytes = sum(t.numel() * t.element_size() for t in ref_trials[0].tensors)
        poison = 2 * out_bytes
        with self.builder.stage("candidate"):
            try:
                candidate.wait_ready(deadline)
                done = candidate.request("run", deadline, init_seed=self.seeds["init_seed"], poison_bytes=poison)
            except UserFailure as failure:
                return self.builder.candidate_failure(failure, during="run")
        self.builder.compiled = True
        tampered = list(done.get("tampered") or [])

        engine._notify(self.on_stage, "compare")
        with self.builder.stage("compare"):
            try:
                cand_data = correctness.load_output_file(self.prepared.workdir / "cand_out" / "outputs.pt",
                                                         MAX_OUTPUT_FILE_BYTES)
                cand_trials = [correctness.parse_outputs(e) for e in cand_data["trials"]]
            except (OutputFileError, KeyError, TypeError) as exc:
                return self.builder.fail(EvalStatus.incorrect, "invalid_output",
                                         f"the candidate's outputs could not be read: {exc}")
            report = self._correctness(ref_trials, cand_trials)
            report.inputs = check_inputs(self._trial_inputs, cand_data["trials"])
            if report.passed:
                report.shape_trial = self._shape_trial(cand_data.get("shape_trials"))
        # Not after a failed doubled-batch trial: that may also have broken the CUDA context.
        if report.passed and not self._shape_failure:
            try:
                traced = candidate.request("trace", deadline)
            except UserFailure as failure:
                return self.builder.candidate_failure(failure, during="kernel trace")
            self._attribution = attribute(traced.get("events") or {},
                                          own_kernel_names(self.prepared.request.candidate), opts.device.value)
            if self._attribution is None:
                log.warning("the kernel trace recorded no GPU activity; attribution skipped (is CUPTI usable?)")
                self.builder.extra["attribution_skipped"] = "the profiler recorded no GPU activity"
            else:
                self.builder.coverage = self._attribution.report
                if self._attribution.truncated:
                    self.builder.extra["trace_truncated"] = True
            tampered += list(traced.get("tampered") or [])
        if tampered or not report.passed or self._shape_failure or not opts.timing:
            return self._finish(report, self._observations(report, tampered=tampered))

        engine._notify(self.on_stage, "timing")
        with self.builder.stage("timing"):
            try:
                timing, observations = self._timing(reference, candidate, ref_pool, out_bytes, report)
            except _ReferenceTimingFailure as wrapped:
                # The reference already ran cleanly; dying or hanging now points at the candidate
                # (GPU work it left running), so only its own errors are held against the reference.
                failure = wrapped.failure
                if failure.kind in ("timeout", "crashed"):
                    return self.builder.candidate_failure(failure, during="timing")
                return self.builder.reference_failure(failure)
            except UserFailure as failure:
                return self.builder.candidate_failure(failure, during="timing")
        return self._finish(report, observations, timing)

    def _finish(self, report: CorrectnessReport, observations: Observations,
                timing: TimingReport | None = None) -> EvalResult:
        self.builder.add_rules(runtime_rules(observations, self.options.policy))
        engine._notify(self.on_stage, "reward")
        return self.builder.finish(correctness=report, timing=timing)

    def _record_environment(self, env: dict) -> None:
        fields = ("gpu_name", "driver", "cuda", "torch", "triton", "python")
        current = self.builder.environment or EnvironmentInfo(device=self.options.device, sandbox=self.options.sandbox)
        self.builder.environment = current.model_copy(update={name: env.get(name) for name in fields})

    def _correctness(self, ref_trials: list[Outputs], cand_trials: list[Outputs]) -> CorrectnessReport:
        opts = self.options
        truths = self._truths if len(self._truths) == len(ref_trials) else [None] * len(ref_trials)
        results = [correctness.compare_with_truth(i, r, c, t, opts.atol, opts.rtol)
                   for i, (r, c, t) in enumerate(zip(ref_trials, cand_trials, truths, strict=True))]
        atol, rtol = correctness.tolerances_used(ref_trials[0], opts.atol, opts.rtol)
        passed = all(r.passed for r in results)
        report = CorrectnessReport(passed=passed, atol=atol, rtol=rtol, trials=results,
                                   degenerate_reference=correctness.reference_is_degenerate(ref_trials, opts.atol,
                                                                                            opts.rtol))
        if report.degenerate_reference and passed:
            report.discrimination = discriminate(ref_trials, cand_trials, bool(self._perturbed))
            report.passed = report.discrimination.passed
        elif self._perturbed:
            self.builder.extra["perturbed_trials"] = self._perturbed
        if passed and self._truths:
            report.precision = precision_check(ref_trials, cand_trials, self._truths)
        return report

    def _shape_trial(self, cand_entries: object) -> ShapeTrialReport:
        info = self._shape_info
        if not self.shape_check:
            return ShapeTrialReport(ran=False, message=f"switched off ({SHAPE_RULE} is disabled for this job)")
        if not self._ref_shape:
            return ShapeTrialReport(ran=False, message=f"skipped: {info.get('skipped', 'no doubled-batch inputs')}")
        report = ShapeTrialReport(ran=True, problem_shapes=info.get("problem_shapes") or [],
                                  shapes=info.get("shapes") or [])
        entries = cand_entries if isinstance(cand_entries, list) else []
        entry = entries[0] if entries else None
        if isinstance(entry, dict) and entry.get("kind") == "error":
            report.passed = False
            report.message = f"forward failed on the doubled batch: {str(entry.get('message'))[:500]}"
        else:
            try:
                cand = correctness.parse_outputs(entry)
            except OutputFileError as exc:
                report.passed = False
                report.message = f"no valid output for the doubled batch: {exc}"
            else:
                report.result = correctness.compare(0, self._ref_shape[0], cand, self.options.atol, self.options.rtol)
                report.passed = report.result.passed
                report.message = report.result.message
        if not report.passed:
            self._shape_failure = (f"inputs {report.problem_shapes} -> {report.shapes}: {report.message}")
        return report

    def _observations(self, report: CorrectnessReport | None = None, **fields) -> Observations:
        return Observations(
            device=self.options.device.value, attribution=self._attribution, profile=self.profile,
            own_kernels_required=self.options.backend != Backend.pytorch,
            precision=report.precision if report else None, inputs=report.inputs if report else None,
            shape_trial_failure=self._shape_failure, peak_bandwidth_gbps=self.settings.peak_bandwidth_gbps, **fields,
        )

    # -- timing -----------------------------------------------------------------------------
    def _time(self, session: RunnerSession, deadline: float, **fields) -> tuple[dict, float]:
        opts = self.options
        start = time.monotonic()
        reply = session.request("time", deadline, expect="timing", budget_s=opts.timing_budget_s,
                                min_runs=opts.timing_min_runs, max_runs=opts.timing_max_runs,
                                target_rse=opts.timing_target_rse, **fields)
        if not reply.get("device_ms"):
            raise UserFailure("protocol", "timing reply holds no samples")
        return reply, time.monotonic() - start

    def _fixed_runs(self, median_ms: float) -> int:
        wanted = int(EXTERNAL_RUN_TARGET_S * 1e3 / max(median_ms, 1e-3)) + 1
        return max(10, min(wanted, self.options.timing_max_runs))

    def _timing(self, reference: RunnerSession, candidate: RunnerSession, ref_pool: list[Outputs],
                out_bytes: int, report: CorrectnessReport) -> tuple[TimingReport, Observations]:
        deadline = time.monotonic() + self.options.limits.timing_s
        try:
            ref_reply, _ = self._time(reference, deadline)
        except UserFailure as failure:
            failure.message = f"reference timing: {failure.message}"
            raise _ReferenceTimingFailure(failure) from failure
        cand_reply, _ = self._time(candidate, deadline)
        candidate.request("save_timed", deadline, tag="adaptive")
        ref_stats = timing_stats.summarize(ref_reply["device_ms"])
        cand_stats = timing_stats.summarize(cand_reply["device_ms"])
        # Fixed-count runs, a second look at each side whose outputs are re-checked (KJ-R02); their
        # outside wall time is reported, not judged (it moves with whatever else shares the host).
        n_ref = self._fixed_runs(ref_stats.median_ms)
        n_cand = self._fixed_runs(cand_stats.median_ms)
        ref_fixed, ref_wall = self._time(reference, deadline, fixed_runs=n_ref)
        cand_fixed, cand_wall = self._time(candidate, deadline, fixed_runs=n_cand)
        candidate.request("save_timed", deadline, tag="fixed")
        ok, message = self._check_timed_outputs(ref_pool)
        tampered = [*cand_reply.get("tampered", []), *cand_fixed.get("tampered", [])]
        speedup = ref_stats.median_ms / cand_stats.median_ms if cand_stats.median_ms > 0 else float("inf")
        method = "cuda_events+l2_flush+device_sync" if self.options.device == Device.cuda else "host_clock"
        host_median = timing_stats.summarize(cand_reply["host_ms"]).median_ms
        timing = TimingReport(
            method=method, device=(self.builder.environment.gpu_name if self.builder.environment else None)
            or self.options.device.value,
            reference=ref_stats, candidate=cand_stats, speedup=speedup,
            speedup_ci95=timing_stats.speedup_ci(ref_reply["device_ms"], cand_reply["device_ms"]),
            candidate_host_median_ms=host_median,
        )
        observations = self._observations(
            report, tampered=tampered, timed_outputs_ok=ok, timed_outputs_message=message,
            candidate_device_median_ms=cand_stats.median_ms, candidate_device_std_ms=cand_stats.std_ms,
            speedup=speedup, min_bytes=out_bytes,
        )
        self.builder.extra["timing_runs"] = {"reference_fixed": n_ref, "candidate_fixed": n_cand,
                                             "reference_outside_ms_per_run": round(ref_wall * 1e3 / (n_ref + 3), 4),
                                             "candidate_outside_ms_per_run": round(cand_wall * 1e3 / (n_cand + 3), 4),
                                             "reference_stopped_by": ref_reply.get("stopped_by"),
                                             "candidate_stopped_by": cand_reply.get("stopped_by")}
        return timing, observations

    def _check_timed_outputs(self, ref_pool: list[Outputs]) -> tuple[bool, str | None]:
        out_dir = self.prepared.workdir / "cand_out"
        for tag in ("adaptive", "fixed"):
            try:
                data = correctness.load_output_file(out_dir / f"timed_outputs_{tag}.pt", MAX_OUTPUT_FILE_BYTES)
                pool = data["pool"]
                for slot, expected in enumerate(ref_pool):
                    if slot not in pool:
                        continue
                    result = correctness.compare(slot, expected, correctness.parse_outputs(pool[slot]),
                                                 self.options.atol, self.options.rtol)
                    if not result.passed:
                        return False, f"timing run '{tag}', input set {slot}: {result.message}"
            except (OutputFileError, KeyError, TypeError) as exc:
                return False, f"timing run '{tag}': {exc}"
        return True, None
