"""`kerneljudge eval REFERENCE.py CANDIDATE.py`: one local, sandboxed evaluation.

Exit code 0 whenever an evaluation was produced (whatever its verdict); 2 for bad usage
(unreadable files); 3 when the evaluator itself failed.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from contract.requests import (
    DEFAULT_REWARD_BASELINE,
    REWARD_BASELINES,
    EvalOptions,
    EvalRequest,
    PolicyConfig,
)
from contract.results import EvalResult
from contract.statuses import Device, SandboxKind


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("reference", type=Path, help="KernelBench reference file (Model, get_inputs, ...)")
    parser.add_argument("candidate", type=Path, help="candidate file defining ModelNew")
    parser.add_argument("--device", choices=[d.value for d in Device], default="cpu")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--atol", type=float, default=None)
    parser.add_argument("--rtol", type=float, default=None)
    parser.add_argument("--no-timing", action="store_true", help="check correctness only")
    parser.add_argument("--timing-budget", type=float, default=3.0, help="seconds of timing per model")
    parser.add_argument("--backend", choices=["cuda", "triton", "numba", "pytorch"], default=None)
    parser.add_argument("--sandbox", choices=[s.value for s in SandboxKind], default="bwrap",
                        help="'none' runs user code without isolation (debugging only)")
    parser.add_argument("--reward-preset", default="default")
    parser.add_argument("--reward-baseline", choices=REWARD_BASELINES, default=DEFAULT_REWARD_BASELINE,
                        help="the speedup the reward uses: against the eager reference or torch.compile of it")
    parser.add_argument("--compile-baseline", action=argparse.BooleanOptionalAction, default=None,
                        help="also time torch.compile of the reference (default: on for cuda, off for cpu)")
    parser.add_argument("--disable-rule", action="append", default=[], metavar="RULE",
                        help="switch a policy or runtime rule off for this run (full id or short number, "
                             "e.g. KJ302 or KJ-R09); repeatable")
    parser.add_argument("--profile", choices=["partial", "full"],
                        help="policy profile: partial (default) or full (every compute kernel must be the candidate's)")
    parser.add_argument("--json", action="store_true", help="print the JSON result")
    parser.add_argument("-v", "--verbose", action="store_true")


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise SystemExit(f"kerneljudge eval: cannot read {path}: {exc.strerror}") from None


def summary(result: EvalResult) -> str:
    lines = [f"verdict:   {result.status.value}" + ("  (flagged)" if result.flagged else ""),
             f"reward:    {result.reward:.4f}  [{result.reward_preset}]",
             f"backend:   {result.backend.value if result.backend else '?'}   compiled: {result.compiled}   "
             f"correct: {result.correct}"]
    if result.error:
        lines.append(f"error:     [{result.error.kind}] {result.error.message}")
        if result.error.log_excerpt:
            lines += ["  | " + line for line in result.error.log_excerpt.splitlines()[:25]]
    if result.correctness:
        for trial in result.correctness.trials:
            detail = trial.message or f"max abs {trial.max_abs_error:.3g}, max rel {trial.max_rel_error:.3g}"
            lines.append(f"trial {trial.trial}:   {'pass' if trial.passed else 'FAIL'}  {detail}")
        shape = result.correctness.shape_trial
        if shape is not None:
            state = "not run" if not shape.ran else ("pass" if shape.passed else "FAIL")
            where = f" {shape.problem_shapes} -> {shape.shapes}" if shape.ran else ""
            lines.append(f"shapes:    {state}{where}" + (f"  {shape.message}" if shape.message else ""))
        for probe in result.correctness.probes:
            state = probe.outcome or "not run"
            errors = f"  ratio {probe.ratio:g} to the reference's error" if probe.ratio is not None else ""
            lines.append(f"probe:     {probe.kind:7s} {state}{errors}" + (f"  {probe.message}" if probe.message else ""))
    if result.coverage:
        c = result.coverage
        own = ", ".join(k.name for k in c.own_kernels[:3]) or "none"
        lines.append(f"coverage:  {c.share:.1%} of compute time in own kernels ({own}; {c.method})")
        if c.library_kernels:
            lines.append("library:   " + ", ".join(f"{k.name[:50]} {k.share:.0%}" for k in c.library_kernels[:3]))
    if result.timing:
        t = result.timing
        lines.append(f"timing:    {t.method} on {t.device}")
        lines.append(f"  reference  median {t.reference.median_ms:.4f} ms  (n={t.reference.n}, "
                     f"rse {t.reference.rse:.2%})")
        lines.append(f"  candidate  median {t.candidate.median_ms:.4f} ms  (n={t.candidate.n}, "
                     f"rse {t.candidate.rse:.2%})")
        lines.append(f"  speedup    {t.speedup:.3f}x  (95% CI {t.speedup_ci95[0]:.3f} - {t.speedup_ci95[1]:.3f})")
        if t.compile_speedup is not None and t.compile_reference_median_ms is not None:
            lines.append(f"  compiled   median {t.compile_reference_median_ms:.4f} ms  (torch.compile of the reference; "
                         f"speedup against it {t.compile_speedup:.3f}x)")
        elif t.compile_baseline_missing:
            lines.append(f"  compiled   none: {t.compile_baseline_missing}")
    for hit in result.rules:
        lines.append(f"rule:      {hit.severity} {hit.rule} (line {hit.line}): {hit.message}")
    lines.append("stages:    " + ", ".join(f"{k} {v:.2f}s" for k, v in result.stages.items()))
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING)
    from worker.engine.sandbox.spawner import start_spawner

    start_spawner()  # before any thread: every sandbox of this process starts through it
    from worker.engine.evaluation import evaluate

    options = EvalOptions(
        device=args.device, trials=args.trials, seed=args.seed, atol=args.atol, rtol=args.rtol,
        timing=not args.no_timing, timing_budget_s=args.timing_budget, backend=args.backend,
        sandbox=args.sandbox, reward_preset=args.reward_preset, reward_baseline=args.reward_baseline,
        compile_baseline=args.compile_baseline,
        policy=PolicyConfig(disabled_rules=args.disable_rule, profile=args.profile),
    )
    request = EvalRequest(reference=_read(args.reference), candidate=_read(args.candidate), options=options)
    progress = None if args.json else (lambda stage: print(f"... {stage}", file=sys.stderr, flush=True))
    from worker.config.tree import load_config
    from worker.engine.engine_settings import EngineSettings

    settings = EngineSettings.from_config(load_config())
    # One evaluation and exit: a warm runner started for a next job would only be thrown away.
    settings.warm_sandboxes = 0
    result = evaluate(request, settings=settings, on_stage=progress)
    print(result.model_dump_json(indent=2) if args.json else summary(result))
    return 0 if result.judged else 3  # no verdict: the harness failed
