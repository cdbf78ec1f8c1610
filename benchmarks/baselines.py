"""Eager and torch.compile baselines for the whole problem library, as a markdown table.

    python -m benchmarks.baselines --device cuda --out benchmarks/results/baselines_h100.md
    python -m benchmarks.baselines --device cpu --problems elementwise silu   # a quick CPU check

For every problem (problem_library/) each honest candidate (`triton_ok`, `cuda_ok`,
`numba_ok` where the problem has one; `cuda_ok` only on cuda) goes through the engine with the
compile baseline on: the judge times the eager reference and torch.compile of it (default mode)
with the same protocol, and the candidate's speedup against each is reported. The compile is
paid once per problem (measured by a judge of its own while the first candidate waits, and kept in
the baseline book for the others: the `compile s` column is empty on their rows). On cpu the references run at their `cpu_sizes`.
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from contract.requests import EvalOptions, EvalRequest
from contract.results import EvalResult
from contract.statuses import Device
from problem_library.catalog import LibraryProblem, select
from worker import engine
from worker.engine.engine_settings import EngineSettings

HONEST = ("triton_ok", "cuda_ok", "numba_ok")
COLUMNS = ("problem", "candidate", "verdict", "eager ref ms", "compiled ref ms", "compile vs eager",
           "candidate ms", "speedup vs eager", "speedup vs compile", "compile s", "note")


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def row(problem: str, kind: str, result: EvalResult) -> list[str]:
    """One table row: the candidate's speedup against both baselines, and why one is missing."""
    timing = result.timing
    compiled = result.extra.compile_baseline or {}
    eager_ms = timing.reference.median_ms if timing else None
    compile_ms = timing.compile_reference_median_ms if timing else None
    note = ""
    if result.error is not None:
        note = f"{result.error.kind}: {result.error.message[:160]}"
    elif timing is not None and timing.compile_baseline_missing:
        note = timing.compile_baseline_missing[:160]
    return [
        problem, kind, result.status.value, _fmt(eager_ms, ".4f"), _fmt(compile_ms, ".4f"),
        _fmt(eager_ms / compile_ms if eager_ms and compile_ms else None, ".2f"),
        _fmt(timing.candidate.median_ms if timing else None, ".4f"),
        _fmt(timing.speedup if timing else None, ".3f"), _fmt(timing.compile_speedup if timing else None, ".3f"),
        _fmt(compiled.get("compile_s") if compiled.get("state") == "waited" else None, ".1f"),
        note.replace("|", "/").replace("\n", " "),
    ]


def table(rows: list[list[str]], header_lines: list[str]) -> str:
    lines = [*header_lines, "", "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    return "\n".join(lines) + "\n"


def requests_for(problem: LibraryProblem, device: Device, kinds: tuple[str, ...], options: EvalOptions
                 ) -> list[tuple[str, EvalRequest]]:
    reference = problem.reference if device == Device.cuda else problem.reference_for_cpu()
    usable = [k for k in kinds if k in problem.candidates and (device == Device.cuda or not k.startswith("cuda"))]
    return [(kind, EvalRequest(reference=reference, candidate=problem.candidates[kind], options=options))
            for kind in usable]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--problems", nargs="*", default=["all"], help="problem or set names (default: all)")
    parser.add_argument("--kinds", nargs="*", default=list(HONEST))
    parser.add_argument("--timing-budget", type=float, default=1.0)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None, help="also write the table here")
    parser.add_argument("--build-threads", type=int, default=8)
    args = parser.parse_args(argv)

    device = Device(args.device)
    settings = EngineSettings.configured()
    settings.compile_baseline = True
    options = EvalOptions(device=device, timing_budget_s=args.timing_budget, trials=args.trials,
                          compile_baseline=True)
    rows: list[list[str]] = []
    environment = None
    started = time.monotonic()
    jobs = [(problem.name, kind, request) for problem in select(args.problems)
            for kind, request in requests_for(problem, device, tuple(args.kinds), options)]
    # Builds first, in parallel on CPU threads (as the service does); then one device stage at a time.
    with ThreadPoolExecutor(args.build_threads) as pool:
        prepared_jobs = list(pool.map(lambda job: engine.prepare(job[2], settings=settings), jobs))
    print(f"prepared {len(jobs)} candidates in {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    for (name, kind, _), prepared in zip(jobs, prepared_jobs, strict=True):
        start = time.monotonic()
        result = prepared if isinstance(prepared, EvalResult) else engine.execute(prepared, settings=settings)
        environment = environment or result.environment
        rows.append(row(name, kind, result))
        print(f"{name:14s} {kind:10s} {result.status.value:10s} "
              f"{time.monotonic() - start:6.1f}s  " + " | ".join(rows[-1][3:]), file=sys.stderr, flush=True)
        text = table(rows, _header(environment, args, argv, started))
        if args.out is not None:  # after every row: a run cut off by a time limit keeps what it measured
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(text)
    print(table(rows, _header(environment, args, argv, started)))
    return 0


def _header(env, args: argparse.Namespace, argv: list[str] | None, started: float) -> list[str]:
    return [
        "# Eager and torch.compile baselines of the problem library",
        "",
        f"- date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}",
        f"- device: {(env.gpu_name if env else None) or args.device}, torch {env.torch if env else '?'}, "
        f"triton {env.triton if env else '?'}, CUDA {env.cuda if env else '?'}",
        f"- command: `python -m benchmarks.baselines {' '.join(argv if argv is not None else sys.argv[1:])}`",
        f"- wall: {time.monotonic() - started:.0f} s",
        "",
        "Medians of device time per forward (CUDA events, L2 flushed before each call; host clock on cpu). "
        "compile vs eager = eager reference / torch.compile(reference) (default mode); speedup vs X = "
        "X's median / the candidate's. compile s: torch.compile's first call, paid once per problem.",
    ]


if __name__ == "__main__":
    raise SystemExit(main())
