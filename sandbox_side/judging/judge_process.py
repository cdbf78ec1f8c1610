"""The judge, inside its sandbox: runs the reference, keeps its inputs and outputs, and compares.

A judge never runs candidate code. It generates the input sets from the seeds it is given, runs
the reference on them (with its float64 ground truth, the degenerate-reference perturbation, the
doubled-batch trial and the probe trials, see probe_inputs), and keeps everything in its own
memory, outputs on its device; its input sets are sealed once (wire.seal) and the same sealed memory
file goes to every candidate. A candidate's outputs arrive in a sealed memory file of the candidate's
(see wire); the judge copies out only tensors whose shape and dtype are the ones it expects, into fresh
storage of its own, then compares on its
device with the comparison code of this package (correctness, probes, discrimination, input_checks, precision).
It replies with the report as plain data; the supervisor validates it.

Commands (messages.py, the judge's `handlers` table): Load, Generate, Inputs (the inputs for a
candidate), Compare (a candidate's run), MakeTimingVariants (the timing pool's variants and the
reference's outputs for them, made once, see timing_variants), CheckTimed (the outputs a candidate
kept while timed), Compile (the torch.compile baseline, see compiled_reference), Time (the eager
reference, or the compiled one with `compiled`), Exit.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from contract.results import CorrectnessReport, ProbeTrialReport, ShapeTrialReport
from sandbox_side.judging import correctness, physics_measure, probes, reference_checks
from sandbox_side.judging.compiled_reference import compile_reference
from sandbox_side.judging.correctness import MalformedOutputs, Outputs
from sandbox_side.judging.discrimination import discriminate
from sandbox_side.judging.input_checks import check_inputs
from sandbox_side.judging.precision import floating_values, precision_check, reduction_length
from sandbox_side.judging.probe_inputs import PROBE_KINDS, ProbeInputs, probe_inputs
from sandbox_side.judging.shape_variant import input_bytes, input_shapes, wider_batch_plans
from sandbox_side.runtime import wire
from sandbox_side.runtime.failure_kind import FailureKind
from sandbox_side.runtime.loader import UserCodeError, classify, clone_args, fresh_on, to_device
from sandbox_side.runtime.messages import (
    CheckTimed,
    Command,
    Compare,
    Compared,
    Compile,
    Compiled,
    Generate,
    Generated,
    Inputs,
    InputsDone,
    MakeTimingVariants,
    MessageError,
    Proceed,
    StepReached,
    Time,
    TimedChecked,
    VariantsMade,
)
from sandbox_side.runtime.runner import Handler, Runner
from sandbox_side.runtime.wire import Pending, WireError
from sandbox_side.timing import timer, timing_variants

# Tensors a candidate's reply may hold besides its outputs: the inputs after the first trials.
INPUT_CHECK_TRIALS = 2
# Room kept in a candidate's reply for its alignment and small tensors (_reply_fits).
REPLY_MARGIN_BYTES = 64 * 1024**2


@dataclass
class ProbeTrial:
    """A kept probe: its inputs (sent to candidates after the trials'), the reference's output and
    its float64 truth (on the judge's device)."""

    kind: str
    description: str
    args: list
    output: Outputs
    truth: Outputs


def probe_seed(trial_seeds: list[int]) -> int:
    """The probes' seed: derived from the secret trial seeds, so as secret and as fresh as they are."""
    return int.from_bytes(hashlib.sha256(f"probes:{trial_seeds}".encode()).digest()[:7], "big")


def _want_matching(items: object, expected: list) -> None:
    """Mark each announced tensor wanted when the expected one at its place has its shape and dtype."""
    if not isinstance(items, list):
        return
    for item, exp in zip(items, expected, strict=False):
        if isinstance(item, Pending) and isinstance(exp, torch.Tensor) and item.matches(exp):
            item.wanted = True


class JudgeRunner(Runner):
    role = "reference"

    @property
    def output_device(self) -> torch.device:
        """The reference's outputs stay on the judge's device, where they are kept and compared: copied to the
        host first, one problem's trial outputs and float64 truths (15 GiB) went over the sandbox's memory cap."""
        return self.device

    def __init__(self) -> None:
        super().__init__()
        self.init_inputs: list = []
        self.trial_inputs: list[list] = []
        self.pool_inputs: list[list] = []
        self.sized: dict | None = None  # the trials kept when one trial is too large for them all (sized_trials)
        self.shape_inputs: list[list] = []
        self.ref_trials: list[Outputs] = []
        self.truths: list[Outputs] = []
        self.at_scale: list[bool] = []  # per output: correctness.rounds_at_scale
        self.ref_pool: list[Outputs] = []
        self.ref_shape: list[Outputs] = []
        self.shape_truths: list[Outputs] = []
        self.shape_info: dict = {}
        self.probes: list[ProbeTrial] = []
        self.probes_left_out: list[ProbeTrialReport] = []
        # The outputs' reduction length (precision.reduction_length): None when they are no reduction.
        self.reduction: int | None = None
        self.reply_max_bytes = 0  # Generate.reply_max_bytes
        self.perturbed: list[int] = []
        self.compiled_model: Callable[..., object] | None = None
        self.compiles = 0  # how many times this judge compiled its reference (once at most)
        self.compile_reason: str | None = None
        self.compile_s = 0.0
        # The timing pool's variants (op_timing_variants): per input set, the changes (CPU) and the
        # reference's outputs, variant 0 (the set itself) first; None until asked for.
        self.variant_changes: list[list] = []
        self.ref_variants: list[list[Outputs]] | None = None
        self.variants_skipped: str | None = None
        # The input sets as the reference ran them, sealed once (op_generate) and sent to every candidate.
        self.sealed_inputs: wire.SealedTensors | None = None

    def handlers(self) -> dict[type[Command], Handler]:
        return {**super().handlers(), Generate: self.op_generate, Inputs: self.op_inputs, Compare: self.op_compare,
                MakeTimingVariants: self.op_timing_variants, CheckTimed: self.op_check_timed,
                Compile: self.op_compile}

    def _kept(self, stored: dict) -> Outputs:
        return Outputs(stored["kind"], [t.to(self.device) for t in stored["tensors"]])

    def _inputs(self, seed: int) -> list:
        torch.manual_seed(seed)
        try:
            return list(self.module.get_inputs())
        except BaseException as exc:  # noqa: BLE001
            raise classify(exc, "in get_inputs()") from exc

    # -- generate ----------------------------------------------------------------------
    def _step(self, step: str, *, device: bool) -> None:
        """Tell the supervisor that generating reached `step`, its device work so far ended, and wait for its
        go-ahead (messages.StepReached): between steps a timing that waits may have the device first, and a
        host-only step holds none of it (a whole generation held shared kept every timing waiting for up to 30 s)."""
        self._sync()
        self.channel.reply(StepReached(step=step, device=device))
        message = self.channel.receive()
        if message is None:
            raise UserCodeError(FailureKind.protocol, f"the supervisor left while the judge was at step {step!r}")
        try:
            Proceed.decode(message)
        except MessageError as exc:
            raise UserCodeError(FailureKind.protocol, f"expected to proceed past step {step!r}: {exc}") from None

    def op_generate(self, command: Generate) -> None:
        self._step("inputs", device=False)
        torch.manual_seed(command.init_seed)
        try:
            init_inputs = list(self.module.get_init_inputs())
        except BaseException as exc:  # noqa: BLE001
            raise classify(exc, "in get_init_inputs()") from exc
        trials = [self._inputs(seed) for seed in command.trial_seeds]
        pool = [self._inputs(seed) for seed in command.pool_seeds]
        self._step("trials", device=True)
        self._construct("Model", init_inputs, command.init_seed)
        first = self._call(fresh_on(trials[0], self.device), "in Model.forward (trial 0)")
        set_bytes = input_bytes(trials[0]) + _nbytes_args(first["tensors"])
        self.reply_max_bytes = command.reply_max_bytes
        budgets = [b for b in (command.trial_bytes_budget, command.reply_max_bytes) if b > 0]
        budget = min(budgets) if budgets else 0
        kept = sized_trials(len(trials), set_bytes, budget)
        if kept < len(trials):
            self.sized = {"kept": kept, "asked": len(trials), "set_bytes": set_bytes, "budget": budget}
            trials = trials[:kept]
        trial_outputs = [first] + [self._call(fresh_on(a, self.device), f"in Model.forward (trial {i})")
                                   for i, a in enumerate(trials[1:], start=1)]
        tolerances = correctness.tolerance_table(command.atol, command.rtol)
        self.perturbed = self._perturb_degenerate(trials, trial_outputs, tolerances)
        self._step("truths", device=True)
        double = reference_checks.Float64Reference(
            self.model, lambda model, args: self._call(args, "in Model.forward (float64)", model),
            lambda args: to_device(args, self.device))
        truths, truth_skipped = double.truths(trials)
        self._step("pool", device=True)
        pool_outputs = [self._call(fresh_on(a, self.device), "in Model.forward (timing inputs)")
                        for a in pool]
        self._step("shape", device=True)
        shape_inputs, shape_outputs, self.shape_info = self._shape_trial(command.shape_seeds,
                                                                         command.shape_max_bytes,
                                                                         _nbytes_args([o["tensors"] for o in
                                                                                       trial_outputs]))
        self.init_inputs, self.trial_inputs, self.pool_inputs, self.shape_inputs = init_inputs, trials, pool, \
            shape_inputs
        self.ref_trials = [self._kept(o) for o in trial_outputs]
        self.reduction = reduction_length(floating_values(trials[0]), floating_values(self.ref_trials[0].tensors))
        self.truths = [self._kept(o) for o in truths or []]
        # Which outputs round at their scale (a reduction whose terms cancel): decided once, from the reference's
        # own error against float64, for every comparison of this problem's outputs.
        self.at_scale = correctness.rounds_at_scale(self.ref_trials, self.truths)
        self.ref_pool = [self._kept(o) for o in pool_outputs]
        self.ref_shape = [self._kept(o) for o in shape_outputs]
        self.shape_truths = self._kept_truths(double, shape_inputs)
        self._step("probe_inputs", device=True)
        self._probe_trials(probe_seed(command.trial_seeds), command.probe_max_bytes, trial_outputs[0],
                           double, truth_skipped)
        double.close()
        self.pool = [to_device(a, self.device) for a in pool]
        self._step("physics", device=True)
        measured = self._physics(command.physics_measures)
        self._step("seal", device=False)
        # The probes run as further trials: nothing in a candidate's run tells them apart.
        packed = wire.pack({"init_inputs": init_inputs, "trials": trials + [p.args for p in self.probes],
                            "pool": pool, "shape_trials": shape_inputs})
        del init_inputs, trials, pool, shape_inputs
        sealed = self._seal_inputs(*packed)
        self.channel.reply(Generated(
            shape_trial=self.shape_info, perturbed_trials=self.perturbed, physics=measured, trials_sized=self.sized,
            truth_skipped=truth_skipped, tampered=self.integrity.changed(),
            output_bytes=_nbytes(self.ref_trials[:1]), reply_bytes=self._candidate_reply_bytes(),
            input_bytes=sealed.buffer.nbytes if sealed.buffer is not None else 0,
            # What it now holds on its device (sizes the reference cache; memory_budget).
            device_bytes=torch.cuda.memory_reserved(self.device) if self.device.type == "cuda" else 0))

    def _seal_inputs(self, description: dict, tensors: list[torch.Tensor | None]) -> wire.SealedTensors:
        """Seal the input sets (wire.pack's), letting each host copy go once written, then keep views of the
        sealed file in their place: the host holds one copy of every input set, not two (two put a problem with
        512 MiB inputs, 7 GiB of input sets, over the sandbox's memory cap)."""
        self.init_inputs, self.trial_inputs, self.pool_inputs, self.shape_inputs = [], [], [], []
        for probe in self.probes:
            probe.args = []
        self.sealed_inputs = wire.seal_packed(description, tensors)
        sealed = wire.unseal(self.sealed_inputs)
        assert isinstance(sealed, dict)
        trials = len(sealed["trials"]) - len(self.probes)
        self.init_inputs, self.trial_inputs = sealed["init_inputs"], sealed["trials"][:trials]
        for probe, args in zip(self.probes, sealed["trials"][trials:], strict=True):
            probe.args = args
        self.pool_inputs, self.shape_inputs = sealed["pool"], sealed["shape_trials"]
        return self.sealed_inputs

    def _physics(self, measures: list[str]) -> dict:
        """The device's copy bandwidth, the input bytes the reference's output depends on and the reference's
        own time (sandbox_side/judging/physics_measure.py), for the physics rule KJ-R06; an extra the judge can do without."""
        try:
            # Both input sets on the device once (the timing pool's first set is there already): each
            # call then copies them on the device, not from the host.
            args = fresh_on(self.trial_inputs[0], self.device)
            other = self.pool[0] if self.pool else None
            return physics_measure.measure(self.model, clone_args, args, other, self.device, measures)
        except Exception as exc:  # noqa: BLE001 - out of device memory, or the reference failing on a copy
            return {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        finally:
            if self.device.type == "cuda":
                torch.cuda.empty_cache()  # the copies it made go back before device_bytes is read

    def _kept_truths(self, double: reference_checks.Float64Reference, arg_sets: list[list]) -> list[Outputs]:
        """The float64 truths of some input sets on the device, or none: an extra the judge can do without
        (the doubled batch is then compared with the reference alone)."""
        truths = double.truths(arg_sets)[0] if arg_sets else None
        try:
            return [self._kept(o) for o in truths or []]
        except torch.OutOfMemoryError:
            return []

    def _reply_fits(self, nbytes: int) -> bool:
        """A candidate's reply of `nbytes` fits what its sandbox may write, with room for its other tensors."""
        return not self.reply_max_bytes or nbytes + REPLY_MARGIN_BYTES <= self.reply_max_bytes

    def _candidate_reply_bytes(self) -> int:
        """The size of an honest candidate's run reply: its outputs and the inputs it sends back."""
        return (_nbytes(self.ref_trials) + _nbytes(self.ref_shape) + _nbytes([p.output for p in self.probes])
                + _nbytes_args(self.trial_inputs[:INPUT_CHECK_TRIALS]))

    def _probe_trials(self, seed: int, max_bytes: int, first_output: dict,
                      double: reference_checks.Float64Reference, truth_skipped: str | None) -> None:
        """The probe trials this reference keeps (see probe_inputs and sandbox_side.judging.probes): each
        where the reference runs, stays finite and keeps a sane error against float64."""
        self.probes, self.probes_left_out = [], []

        def leave_out(kind: str, description: str, why: str) -> None:
            self.probes_left_out.append(probes.skipped(kind, description, why))

        base = self._inputs(seed)
        if not self.truths:
            for kind in PROBE_KINDS:
                leave_out(kind, probes.DESCRIPTIONS[kind], f"no float64 truth ({truth_skipped})")
            return
        # Each kept probe holds its output and float64 truth on the device, for the judge's life.
        size = max(input_bytes(base), _nbytes(self.ref_trials[:1]))
        if size > max_bytes:
            for kind in PROBE_KINDS:
                leave_out(kind, probes.DESCRIPTIONS[kind], f"one input or output set takes {size} bytes, over the "
                                                           f"{max_bytes}-byte limit for probe trials")
            return
        on_device = fresh_on(base, self.device)
        made = self._probe_inputs(base, on_device, seed)  # before the call below, which may change its arguments
        unscaled = self._call(on_device, "in Model.forward (probe inputs)")
        # Each probe's runs are steps of their own (a timing may go between), its float64 truth and checks apart
        # from its call: `probes` was more than half of every generation on an H100, its parts unknown.
        for probe in made:
            self._step("probes", device=True)
            try:
                out = self._call(fresh_on(probe.args, self.device),
                                 f"in Model.forward (probe {probe.kind})")
            except UserCodeError as exc:
                leave_out(probe.kind, probe.description, f"the reference fails on these inputs: {exc.message[:300]}")
                continue
            if not reference_checks.finite_where(first_output, out):
                leave_out(probe.kind, probe.description, "the reference's output is not finite on these inputs")
                continue
            if probe.kind == "scaled" and not probes.scales_exactly(Outputs(out["kind"], out["tensors"]),
                                                                   Outputs(unscaled["kind"], unscaled["tensors"])):
                leave_out(probe.kind, probe.description, "the reference does not round on these inputs as on the "
                                                         "same inputs unscaled (it adds a bias, an eps or a "
                                                         "nonlinearity to them): the probe would say nothing")
                continue
            try:
                output = self._kept(out)
            except torch.OutOfMemoryError:  # an extra the judge can do without
                output = None
            self._step("probe_truths", device=True)
            truths = self._kept_truths(double, [probe.args]) if output is not None else []
            if output is None or not truths:
                leave_out(probe.kind, probe.description, "no float64 truth on these inputs (the reference does not "
                                                         "run in float64, or no device memory left for it)")
                continue
            truth_kept = truths[0]
            why = probes.reference_unusable(probe.kind, output, truth_kept, self.ref_trials, self.truths)
            reply = self._candidate_reply_bytes() + _nbytes([output])
            if not why and not self._reply_fits(reply):
                why = (f"a candidate's reply would take {reply} bytes with this probe's output, over the "
                       f"{self.reply_max_bytes}-byte limit on what a sandbox may write")
            if why:
                leave_out(probe.kind, probe.description, why)
                continue
            self.probes.append(ProbeTrial(probe.kind, probe.description, probe.args, output, truth_kept))

    def _probe_inputs(self, base: list, on_device: list, seed: int) -> list[ProbeInputs]:
        """The probes' input sets (probe_inputs), kept on the host like every input set (the candidates' sealed
        file). Made on a GPU where there is one, and on the host again if it is out of memory: on 2 host cores the
        four transforms of one 8192 x 4096 input take 5.7 s, and the probes step was two thirds of a judge's
        generation on an H100. `on_device`: `base` copied onto the judge's device (left unchanged)."""
        if self.device.type == "cuda":
            try:
                made = probe_inputs(on_device, torch.Generator().manual_seed(seed))
                return [dataclasses.replace(probe, args=to_device(probe.args, torch.device("cpu"))) for probe in made]
            except torch.OutOfMemoryError:
                torch.cuda.empty_cache()
        return probe_inputs(base, torch.Generator().manual_seed(seed))

    def _perturb_degenerate(self, trials: list, outputs: list[dict], tolerances: dict) -> list[int]:
        """Scale/shift later trials' inputs when the outputs do not move between trials; returns
        the trials changed (each kept only where the reference's output stays finite and moves)."""
        if not reference_checks.all_degenerate(outputs, tolerances):
            return []
        changed = []
        for index in range(1, len(trials)):
            scale, shift = reference_checks.perturbation_for(index)
            for option in ((scale, shift), (scale, 0.0)):
                args = reference_checks.perturb(trials[index], *option)
                try:
                    out = self._call(fresh_on(args, self.device), "in Model.forward (perturbed)")
                except UserCodeError:
                    continue
                if reference_checks.finite_where(outputs[0], out) and reference_checks.outputs_move(
                        outputs[0], out, tolerances):
                    trials[index], outputs[index] = args, out
                    changed.append(index)
                    break
        return changed

    def _shape_trial(self, seeds: list[int], max_bytes: int, trial_output_bytes: int) -> tuple[list, list, dict]:
        """One trial on a doubled batch, if the reference accepts one (see shape_variant) and a candidate's reply
        can hold its output beside the trials' (`trial_output_bytes`)."""
        if len(seeds) != 2:
            return [], [], {"skipped": "not requested"}
        first, second = self._inputs(seeds[0]), self._inputs(seeds[1])
        plans = wider_batch_plans(first, second)
        if not plans:
            return [], [], {"skipped": "get_inputs() returns no tensor whose first dimension can be doubled"}
        size = input_bytes(plans[0].args)
        if size > max_bytes:
            return [], [], {"skipped": f"the doubled inputs would take {size} bytes, "
                                       f"over the {max_bytes}-byte limit for this check"}
        refused = []
        for plan in plans:
            try:
                out = self._call(fresh_on(plan.args, self.device), "in Model.forward (doubled batch)")
            except UserCodeError as exc:
                refused.append(f"doubling inputs {plan.widened}: {exc.message}")
                continue
            reply = trial_output_bytes + _nbytes_args(out["tensors"])
            if not self._reply_fits(reply):
                return [], [], {"skipped": f"a candidate's reply would take {reply} bytes with the doubled batch's "
                                           f"output, over the {self.reply_max_bytes}-byte limit on what a sandbox "
                                           "may write"}
            info = {"widened": plan.widened, "problem_shapes": input_shapes(first),
                    "shapes": input_shapes(plan.args)}
            return [plan.args], [out], info
        return [], [], {"skipped": "the reference does not accept a doubled batch (" + "; ".join(refused) + ")"}

    def op_inputs(self, command: Inputs) -> None:
        self.channel.reply_sealed(InputsDone(), self.sealed_inputs)

    # -- compare -----------------------------------------------------------------------
    def _choose_run_reply(self, value: object) -> None:
        if not isinstance(value, dict):
            return
        trials = value.get("trials")
        expected = self.ref_trials + [p.output for p in self.probes]
        if isinstance(trials, list):
            for index, entry in enumerate(trials[:len(expected)]):
                if isinstance(entry, dict):
                    _want_matching(entry.get("tensors"), expected[index].tensors)
                    if index < len(self.trial_inputs):
                        _want_matching(entry.get("inputs_after"), self.trial_inputs[index])
        shape = value.get("shape_trials")
        if isinstance(shape, list) and shape and self.ref_shape and isinstance(shape[0], dict):
            _want_matching(shape[0].get("tensors"), self.ref_shape[0].tensors)

    def _on_device(self, outputs: Outputs) -> Outputs:
        return Outputs(outputs.kind, [t if t.is_meta else t.to(self.device) for t in outputs.tensors])

    def op_compare(self, command: Compare) -> None:
        atol, rtol = command.atol, command.rtol
        try:
            value: Any = self.channel.read_payload(command.payload, self._choose_run_reply)
            entries = value["trials"]
            expected = len(self.ref_trials) + len(self.probes)
            if not isinstance(entries, list) or len(entries) != expected:
                raise MalformedOutputs(f"{len(entries) if isinstance(entries, list) else 'no'} trial outputs, "
                                      f"expected {expected}")
            trial_entries, probe_entries = entries[:len(self.ref_trials)], entries[len(self.ref_trials):]
            cand_trials = [self._on_device(correctness.parse_outputs(e)) for e in trial_entries]
        except (MalformedOutputs, WireError, KeyError, TypeError) as exc:
            self.channel.reply(Compared(invalid=f"the candidate's outputs could not be read: {exc}"))
            return
        try:
            report = self._correctness(cand_trials, atol, rtol)
            del cand_trials  # compared: their device memory goes back before the next outputs come in
            # Compared where the candidate's copies are: on the CPU (a reference may draw inputs on the GPU).
            report.inputs = check_inputs([[a.cpu() if isinstance(a, torch.Tensor) else a for a in args]
                                          for args in self.trial_inputs[:INPUT_CHECK_TRIALS]], entries)
            if report.passed:
                report.shape_trial = self._shape_report(value.get("shape_trials"), command, atol, rtol)
            if report.passed and command.probe_check:
                usual = report.precision.ratio if report.precision and report.precision.checked else None
                report.probes = self._probe_reports(probe_entries, rtol, usual)
                report.passed = all(p.outcome != "fail" for p in report.probes)
        except torch.OutOfMemoryError as exc:  # the judge's own memory: a harness failure, never a verdict
            raise classify(exc, "while comparing the candidate's outputs") from exc
        # Perturbed trials are news only where the discrimination check did not already use them.
        discriminated = report.degenerate_reference and all(t.passed for t in report.trials)
        self.channel.reply(Compared(report=report.model_dump(), perturbed_trials=[] if discriminated else self.perturbed))

    def _probe_reports(self, entries: list, rtol: float | None, usual_ratio: float | None) -> list[ProbeTrialReport]:
        """Each kept probe judged against its truth (one candidate output on the device at a time),
        then the probes this reference left out, with why."""
        reports = []
        for probe, entry in zip(self.probes, entries, strict=True):
            try:
                cand = self._on_device(correctness.parse_outputs(entry))
            except MalformedOutputs as exc:
                reports.append(probes.unreadable(probe.kind, probe.description, str(exc)))
                continue
            reports.append(probes.judge_probe(probe.kind, probe.description, probe.output, cand, probe.truth, rtol,
                                              usual_ratio, self.reduction))
        return reports + list(self.probes_left_out)

    def _correctness(self, cand_trials: list[Outputs], atol: float | None, rtol: float | None) -> CorrectnessReport:
        ref_trials = self.ref_trials
        truths = self.truths if len(self.truths) == len(ref_trials) else [None] * len(ref_trials)
        results = [correctness.compare_with_truth(i, r, c, t, atol, rtol, self.at_scale)
                   for i, (r, c, t) in enumerate(zip(ref_trials, cand_trials, truths, strict=True))]
        used_atol, used_rtol = correctness.tolerances_used(ref_trials[0], atol, rtol)
        passed = all(r.passed for r in results)
        report = CorrectnessReport(passed=passed, atol=used_atol, rtol=used_rtol, trials=results,
                                   degenerate_reference=correctness.reference_is_degenerate(ref_trials, atol, rtol))
        if report.degenerate_reference and passed:
            report.discrimination = discriminate(ref_trials, cand_trials, bool(self.perturbed),
                                                 self.truths if len(self.truths) == len(ref_trials) else None)
            report.passed = report.discrimination.passed
        if passed and self.truths:
            report.precision = precision_check(ref_trials, cand_trials, self.truths, self.reduction)
        return report

    def _shape_report(self, entries: object, command: Compare, atol: float | None, rtol: float | None
                      ) -> ShapeTrialReport:
        info = self.shape_info
        if not command.shape_check:
            return ShapeTrialReport(ran=False, message=f"switched off ({command.shape_rule} is disabled "
                                                       "for this job)")
        if not self.ref_shape:
            return ShapeTrialReport(ran=False, message=f"skipped: {info.get('skipped', 'no doubled-batch inputs')}")
        report = ShapeTrialReport(ran=True, problem_shapes=info.get("problem_shapes") or [],
                                  shapes=info.get("shapes") or [])
        entry = entries[0] if isinstance(entries, list) and entries else None
        if isinstance(entry, dict) and entry.get("kind") == "error":
            report.passed = False
            report.message = f"forward failed on the doubled batch: {str(entry.get('message'))[:500]}"
            report.difference = "shape"
            return report
        try:
            cand = self._on_device(correctness.parse_outputs(entry))
        except MalformedOutputs as exc:
            report.passed = False
            report.message = f"no valid output for the doubled batch: {exc}"
            report.difference = "shape"
            return report
        truth = self.shape_truths[0] if self.shape_truths else None
        report.result = correctness.compare_at_new_shape(self.ref_shape[0], cand, truth, atol, rtol, self.at_scale)
        report.passed = report.result.passed
        report.message = report.result.message
        if not report.passed:
            precision = correctness.precision_difference(self.ref_shape[0], cand, truth)
            report.difference = "precision" if precision else "shape"
            if precision:
                report.message = f"{report.message}; {precision}"
        return report

    # -- the torch.compile baseline ----------------------------------------------------------
    def op_compile(self, command: Compile) -> None:
        if self.compiles == 0 and self.ref_trials:
            self.compiles += 1
            expected = self.ref_trials[0]

            def matches(stored: dict) -> str | None:
                result = correctness.compare(0, expected, self._kept(stored), command.atol, command.rtol,
                                             self.at_scale)
                return None if result.passed else (result.message or "outputs differ")

            outcome = compile_reference(self.model, self.trial_inputs[0], self.device, self._sync, matches)
            self.compiled_model = outcome.model
            self.compile_reason, self.compile_s = outcome.reason, outcome.compile_s
        elif not self.ref_trials:
            self.compile_reason, self.compile_s = "the reference has not run yet", 0.0
        self.channel.reply(Compiled(ok=self.compiled_model is not None, reason=self.compile_reason,
                                    compile_s=self.compile_s, compiles=self.compiles))

    def op_time(self, command: Time) -> None:
        if command.compiled:
            if self.compiled_model is None:
                raise UserCodeError(FailureKind.protocol, "no compiled reference to time")
            self._send_timing(self.compiled_model, command)
        else:
            self._send_timing(self.model, command)

    # -- timing variants and timed outputs -----------------------------------------------
    def op_timing_variants(self, command: MakeTimingVariants) -> None:
        """The timing pool's variants (made on the first request, kept for the judge's life): their changes
        go to a candidate's runner; the judge writes them into its own pool too (its timed calls follow the
        supervisor's order like the candidate's)."""
        made = self.ref_variants is None
        if made:
            self._make_timing_variants(command.seed, command.count, command.max_bytes, command.atol, command.rtol)
        slots = [[{"arg": arg, "positions": positions, "values": table} for arg, positions, table in changes]
                 for changes in self.variant_changes]
        assert self.ref_variants is not None
        self.channel.reply(VariantsMade(counts=[len(outputs) for outputs in self.ref_variants],
                                        variant_bytes=sum(_nbytes(outputs[1:]) for outputs in self.ref_variants),
                                        skipped=self.variants_skipped, made=made), tensors={"slots": slots})

    def _make_timing_variants(self, seed: int, count: int, max_bytes: int, atol: float | None,
                              rtol: float | None) -> None:
        pool_bytes = _nbytes(self.ref_pool)
        fits = max_bytes // pool_bytes if pool_bytes else count
        self.variants_skipped = None
        if count > 0 and fits < 1:
            self.variants_skipped = (f"the reference's outputs for one variant of every timing input set take "
                                     f"{pool_bytes} bytes, over the {max_bytes}-byte limit")
        count = max(0, min(count, fits))
        generator = torch.Generator().manual_seed(seed)
        self.variant_changes, self.ref_variants = [], []
        for slot, base in enumerate(self.pool_inputs):
            own = self.ref_pool[slot]
            outputs, rows, changes = [own], [0], []
            if count:
                fresh = self._inputs((seed + 1 + slot) % 2**63)
                changes = timing_variants.make_tables(base, fresh, count, generator)
            for variant in range(1, count + 1 if changes else 1):
                args = timing_variants.variant_args(base, changes, variant)
                try:
                    out = self._kept(self._call(to_device(args, self.device), "in Model.forward (timing variant)"))
                except (UserCodeError, torch.OutOfMemoryError):
                    continue
                if not reference_checks.finite_where({"tensors": own.tensors}, {"tensors": out.tensors}):
                    continue
                if correctness.compare(slot, own, out, atol, rtol, self.at_scale).passed:
                    continue  # the output does not see this change: it could not expose a stale one
                rows.append(variant)
                outputs.append(out)
            self.variant_changes.append(timing_variants.select_rows(changes, rows) if len(rows) > 1 else [])
            self.ref_variants.append(outputs)
        # Written before each timed call: buffers of the judge's own (the pool may share the generated sets'
        # memory, which every later candidate is sent).
        self.pool = [clone_args(args) for args in self.pool]
        self.variants = timer.InputVariants(self.pool, self.variant_changes)

    def _ref_variant(self, slot: int, variant: int) -> Outputs | None:
        rows = self.ref_variants[slot] if self.ref_variants and 0 <= slot < len(self.ref_variants) else (
            [self.ref_pool[slot]] if 0 <= slot < len(self.ref_pool) else [])
        return rows[variant] if 0 <= variant < len(rows) else None

    def op_check_timed(self, command: CheckTimed) -> None:
        """The outputs a candidate kept while timed, each against the reference's for the input set and
        variant the supervisor says that call had. Replies with every wrong one (index, message) and, for
        the first, whether it is the reference's output for another variant of the same set (a stored one)."""
        expected = command.expected
        atol, rtol = command.atol, command.rtol

        def choose(value: object) -> None:
            kept = value.get("kept") if isinstance(value, dict) else None
            if isinstance(kept, list):
                for entry, (slot, variant) in zip(kept, expected, strict=False):
                    ref = self._ref_variant(slot, variant)
                    if isinstance(entry, dict) and ref is not None:
                        _want_matching(entry.get("tensors"), ref.tensors)

        message: str | None = None
        wrong: list[tuple[int, str]] = []
        replayed: int | None = None
        try:
            value: Any = self.channel.read_payload(command.payload, choose)
            kept = value["kept"]
            if not isinstance(kept, list) or len(kept) != len(expected):
                raise MalformedOutputs(f"{len(kept) if isinstance(kept, list) else 'no'} kept outputs, "
                                      f"expected {len(expected)}")
            for index, (entry, (slot, variant)) in enumerate(zip(kept, expected, strict=True)):
                ref = self._ref_variant(slot, variant)
                if ref is None:
                    raise MalformedOutputs(f"no reference output for input set {slot}, variant {variant}")
                cand = self._on_device(correctness.parse_outputs(entry))
                result = correctness.compare(index, ref, cand, atol, rtol, self.at_scale)
                if result.passed:
                    continue
                wrong.append((index, result.message or "outputs differ"))
                if replayed is None and self.ref_variants:
                    others = [v for v, other in enumerate(self.ref_variants[slot]) if v != variant
                              and correctness.compare(index, other, cand, atol, rtol, self.at_scale).passed]
                    replayed = others[0] if others else -1
        except (MalformedOutputs, WireError, KeyError, TypeError, ValueError) as exc:
            message = f"timed run: {exc}"
        self.channel.reply(TimedChecked(ok=message is None and not wrong, message=message, wrong=wrong,
                                        replayed=replayed if replayed is not None and replayed >= 0 else None,
                                        checked=len(expected)))


# However large one input set and its outputs are, this many trials stay (two different draws of the inputs
# tell a kernel that computes from its inputs from one that does not).
MIN_SIZED_TRIALS = 2


def sized_trials(asked: int, set_bytes: int, budget: int) -> int:
    """How many of `asked` trials a problem keeps when each trial's inputs and outputs take `set_bytes`: as many
    as fit in `budget` bytes (0: no budget), never fewer than MIN_SIZED_TRIALS. One huge problem (20 GiB of
    outputs a trial) held its lane's device for 185 s with every trial, while the other jobs waited."""
    if budget <= 0 or set_bytes <= 0 or asked * set_bytes <= budget:
        return asked
    return max(min(asked, MIN_SIZED_TRIALS), min(asked, budget // set_bytes))


def _nbytes(outputs: list[Outputs]) -> int:
    return sum(t.numel() * t.element_size() for o in outputs for t in o.tensors)


def _nbytes_args(value: object) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (list, tuple)):
        return sum(_nbytes_args(v) for v in value)
    return 0
