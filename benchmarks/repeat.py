"""Do speedups repeat? Every honest library candidate evaluated several times through the service, while
a batch of CUDA builds loads the host, and each compared with triton.testing.do_bench.

    python -m benchmarks.repeat --device cuda --repeats 5 --corpus ../shared/corpora/kernelbench-sft \
        --build-threads 12 --out benchmarks/results/repeat_DATE_h100.md

What it measures (issue 17, "speedups that repeat"):
- spread: max/min - 1 of one candidate's speedups over `--repeats` service evaluations (goal: <= 2% for
  kernels that run >= 20 us);
- agreement: the median service speedup against do_bench's, median against median, on the same inputs
  (goal: within 5%). do_bench runs in this process on our own library code (Triton candidates: CUDA ones
  would need a second, unsandboxed build of each extension).

The service is the real one (`kerneljudge serve`, embedded workers, default options); every round submits
all candidates at once in a shuffled order. The build load is `benchmarks.prebuild` over the corpus's CUDA
candidates into a scratch build cache (real compiles, never cache hits), started before the first round;
the table says whether it was still running when each round ended. The table is rewritten after every
round, so a run cut short keeps what it measured.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.source_modules import import_source
from benchmarks.throughput import KEY, REPO, Service, device_name, git_commit
from problem_library.catalog import load_library
from worker.engine.timing import clock_check

HONEST_KINDS = ("triton_ok", "cuda_ok")
SPREAD_GOAL = 0.02
AGREEMENT_GOAL = 0.05
MIN_KERNEL_MS = 0.020


@dataclass
class Row:
    problem: str
    kind: str
    reference: str
    candidate: str
    speedups: list[float] = field(default_factory=list)
    candidate_ms: list[float] = field(default_factory=list)
    window_s: list[float] = field(default_factory=list)  # each timed job's exclusive window (stages["timing"])
    # Each timed round's evidence, for a row whose speedups spread: "round N: speedup [ci95], pairs, medians".
    round_timings: list[str] = field(default_factory=list)
    verdicts: list[str] = field(default_factory=list)
    rejections: list[str] = field(default_factory=list)  # each rejecting rule with its evidence: why an honest one lost
    clock_retries: list[str] = field(default_factory=list)  # first windows that failed the clock check, measured again
    do_bench: float | None = None
    do_bench_note: str = ""

    @property
    def name(self) -> str:
        return f"{self.problem}/{self.kind}"

    @property
    def spread(self) -> float | None:
        return max(self.speedups) / min(self.speedups) - 1 if len(self.speedups) > 1 else None

    @property
    def median(self) -> float | None:
        return statistics.median(self.speedups) if self.speedups else None

    @property
    def agreement(self) -> float | None:
        return self.median / self.do_bench - 1 if self.median and self.do_bench else None

    @property
    def long_enough(self) -> bool:
        return bool(self.candidate_ms) and statistics.median(self.candidate_ms) >= MIN_KERNEL_MS


def do_bench_speedup(reference: str, candidate: str, seed: int = 0) -> float:
    """median(reference) / median(candidate) by triton.testing.do_bench on the same inputs."""
    import torch
    from triton.testing import do_bench

    ref_mod, cand_mod = import_source(reference, "kj_repeat_ref"), import_source(candidate, "kj_repeat_cand")
    torch.manual_seed(seed)
    init = list(ref_mod.get_init_inputs())
    torch.manual_seed(seed)
    ref_model = ref_mod.Model(*init).cuda()
    torch.manual_seed(seed)
    cand_model = cand_mod.ModelNew(*init).cuda()
    torch.manual_seed(seed + 1)
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in ref_mod.get_inputs()]
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False  # as the service's runners
    with torch.no_grad():
        ref_ms = do_bench(lambda: ref_model(*inputs), return_mode="median")
        cand_ms = do_bench(lambda: cand_model(*inputs), return_mode="median")
    return ref_ms / cand_ms


class BuildLoad:
    """`benchmarks.prebuild` over the corpus's CUDA candidates, into a scratch build cache."""

    def __init__(self, corpus: Path | None, threads: int):
        self.proc: subprocess.Popen | None = None
        self.scratch = tempfile.mkdtemp(prefix="kj-build-load-")
        if corpus is None or threads <= 0:
            return
        env = {**os.environ, "KERNELJUDGE_DATA_DIR": self.scratch}
        self.log = open(Path(self.scratch) / "prebuild.log", "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen([sys.executable, "-m", "benchmarks.prebuild", str(corpus / "cands" / "*.py"),
                                      "--threads", str(threads)], cwd=REPO, env=env, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(60)


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def job_options(device: str, timing_budget_s: float | None) -> dict:
    """The options of every job: the service's defaults, or a timing budget per model to compare with them (the
    budget sets how long each job holds its GPU alone, and so the batch's throughput)."""
    return {"device": device, **({"timing_budget_s": timing_budget_s} if timing_budget_s is not None else {})}


def write_table(path: Path, rows: list[Row], args: argparse.Namespace, rounds: list[str], started: str) -> None:
    timed = [r for r in rows if len(r.speedups) == args.repeats and r.long_enough]
    steady = [r for r in timed if r.spread is not None and r.spread <= SPREAD_GOAL]
    compared = [r for r in rows if r.agreement is not None and r.long_enough]
    agreeing = [r for r in compared if r.agreement is not None and abs(r.agreement) <= AGREEMENT_GOAL]
    lines = [
        f"# Repeatability of speedups through the service ({started})", "",
        f"- device: {device_name(args.device)}", f"- commit: {git_commit()}",
        f"- command: `python -m benchmarks.repeat {' '.join(sys.argv[1:])}`",
        f"- rounds: {'; '.join(rounds) or 'none finished'}",
        f"- timing budget per model: {args.timing_budget_s if args.timing_budget_s is not None else 'the default'} s",
        f"- spread <= {SPREAD_GOAL:.0%} (kernels >= {MIN_KERNEL_MS * 1e3:.0f} us, all {args.repeats} repeats ok): "
        f"**{len(steady)} of {len(timed)}**",
        f"- within {AGREEMENT_GOAL:.0%} of do_bench (kernels >= {MIN_KERNEL_MS * 1e3:.0f} us): "
        f"**{len(agreeing)} of {len(compared)}**", "",
        "| candidate | verdicts | speedups | median | spread | cand median ms | window s (median) | do_bench "
        "| vs do_bench |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append("| " + " | ".join([
            row.name, "/".join(sorted(set(row.verdicts))) or "-", " ".join(f"{s:.3f}" for s in row.speedups) or "-",
            _fmt(row.median, ".3f"), _fmt(row.spread, ".2%"),
            _fmt(statistics.median(row.candidate_ms) if row.candidate_ms else None, ".4f"),
            _fmt(statistics.median(row.window_s) if row.window_s else None, ".2f"),
            _fmt(row.do_bench, ".3f") if row.do_bench else (row.do_bench_note or "-"), _fmt(row.agreement, "+.2%"),
        ]) + " |")
    # Every kernel over the goal, short ones too: a launch-bound reference against a short kernel spreads with the
    # host's speed (giou_varlen), and its rounds' medians and host times are the evidence of why.
    spread = [row for row in rows if row.spread is not None and row.spread > SPREAD_GOAL]
    if spread:
        lines += ["", f"## Each round of the kernels over {SPREAD_GOAL:.0%} (any length): the job's own interval, pairs "
                  "and medians", ""]
        lines += [f"- `{row.name}` {timing}" for row in spread for timing in row.round_timings]
    rejected = [(row.name, why) for row in rows for why in row.rejections]
    if rejected:
        lines += ["", "## Rejections (honest candidates: each is a false reject)", ""]
        lines += [f"- `{name}` {why}" for name, why in rejected]
    retried = [(row.name, why) for row in rows for why in row.clock_retries]
    if retried:
        lines += ["", "## First windows that failed the clock check (each measured again; the second decided)", ""]
        lines += [f"- `{name}` {why}" for name, why in retried]
    path.write_text("\n".join(lines) + "\n")


def run_round(service: Service, rows: list[Row], options: dict, rng: random.Random, timeout_s: float) -> None:
    from kerneljudge.client import KernelJudgeClient

    order = rows[:]
    rng.shuffle(order)
    with KernelJudgeClient(service.url, KEY, timeout=timeout_s) as client:
        entries = client.submit_many([{"reference": r.reference, "candidate": r.candidate, "options": options}
                                      for r in order])
        refused = [entry.error for entry in entries if entry.job is None]
        if refused:  # a benchmark's own submission refused (its options, its sources): nothing to measure
            raise SystemExit(f"the service refused {len(refused)} of the round's jobs: {refused[0]}")
        ids = [entry.job.id for entry in entries if entry.job is not None]
        jobs = client.wait_many(ids, timeout=timeout_s)
    for row, job in zip(order, jobs, strict=True):
        result = job.result
        row.verdicts.append(result.status.value if result else f"job {job.status.value}")
        if result is not None:
            row.rejections += [f"round {len(row.verdicts)}: {hit.rule}: {hit.evidence}"
                               for hit in result.rules if hit.severity == "reject"]
            if (first := result.extra.clock_check_retried) is not None:
                row.clock_retries.append(f"round {len(row.verdicts)}: {clock_check.rule_hits(first)[0].evidence}")
        if result is not None and result.speedup is not None and result.timing is not None:
            row.speedups.append(result.speedup)
            row.candidate_ms.append(result.timing.candidate.median_ms)
            if "timing" in result.stages:
                row.window_s.append(result.stages["timing"])
            timing = result.timing
            low, high = timing.speedup_ci95
            row.round_timings.append(
                f"round {len(row.verdicts)}: speedup {result.speedup:.3f} [{low:.3f}, {high:.3f}], {timing.pairs} pairs, "
                f"reference {timing.reference.median_ms:.4f} ms (n {timing.reference.n}), candidate "
                f"{timing.candidate.median_ms:.4f} ms (n {timing.candidate.n}), window "
                f"{result.stages.get('timing', 0.0):.2f} s, host time to queue a call: reference "
                f"{_fmt(timing.reference_queue_ms, '.4f')} ms, candidate {_fmt(timing.candidate_queue_ms, '.4f')} ms")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--problems", nargs="*", help="library problems (default: all)")
    parser.add_argument("--corpus", type=Path, help="shared corpus folder: its CUDA candidates are the build load")
    parser.add_argument("--build-threads", type=int, default=12)
    parser.add_argument("--round-timeout-s", type=float, default=240.0)
    parser.add_argument("--timing-budget-s", type=float, default=None,
                        help="every job's timing budget per model (default: the service's)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)

    rows = []
    for problem in load_library():
        if args.problems and problem.name not in args.problems:
            continue
        reference = problem.reference if args.device == "cuda" else problem.reference_for_cpu()
        for kind in HONEST_KINDS:
            if kind in problem.candidates and not (kind == "cuda_ok" and args.device == "cpu"):
                rows.append(Row(problem.name, kind, reference, problem.candidates[kind]))
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    rng = random.Random(0)
    rounds: list[str] = []
    with tempfile.TemporaryDirectory(prefix="kj-repeat-") as data:
        load = BuildLoad(args.corpus, args.build_threads)
        service = Service(args.device, Path(data), None)
        try:
            for index in range(args.repeats):
                begun = time.monotonic()
                run_round(service, rows, job_options(args.device, args.timing_budget_s), rng, args.round_timeout_s)
                rounds.append(f"{index + 1}: {time.monotonic() - begun:.0f} s, builds "
                              f"{'running' if load.running else 'finished'}")
                write_table(args.out, rows, args, rounds, started)
                print(rounds[-1], flush=True)
        finally:
            service.stop()
            load.stop()
    if args.device == "cuda":
        for row in rows:
            if row.kind != "triton_ok":
                row.do_bench_note = "n/a (CUDA)"
                continue
            try:
                row.do_bench = do_bench_speedup(row.reference, row.candidate)
            except Exception as exc:  # noqa: BLE001 - reported in the table, the other rows go on
                row.do_bench_note = f"failed: {type(exc).__name__}: {exc}"[:100].replace("|", "/")
    write_table(args.out, rows, args, rounds, started)
    print(args.out.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
