"""Run the engine over the problem set on a GPU and write a markdown table.

    python -m benchmarks.gpu_eval --device cuda --repeats 5 --out benchmarks/results/gpu_eval.md

For every problem in the problem library (problem_library/): the honest Triton, CUDA (and, where the
problem has them, Numba) candidates are
evaluated `--repeats` times (the spread of their speedup over repeated evaluations is the
timing noise a trainer sees), the wrong ones once. All CUDA builds run first, in parallel on
CPU threads with no GPU visible (as the service does), then every device stage runs one at a
time; repeated evaluations find their build in the cache.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from contract.requests import EvalOptions, EvalRequest
from contract.results import EvalResult
from contract.statuses import Device
from problem_library.catalog import LIBRARY_DIR
from worker import engine
from worker.engine.engine_settings import EngineSettings
from worker.engine.sandbox.bwrap import gpu_device_nodes
from worker.engine.sandbox.selfcheck import check_sandbox

PROBLEMS = LIBRARY_DIR
HONEST = ("triton_ok", "cuda_ok", "numba_ok")  # Numba candidates exist for some problems only
WRONG = ("triton_wrong", "cuda_wrong", "numba_wrong")


def _sh(command: str) -> str:
    done = subprocess.run(command, shell=True, capture_output=True, text=True, check=False)
    return (done.stdout or done.stderr).strip()


def _cv(values: list[float]) -> float | None:
    if len(values) < 2:
        return None
    return statistics.stdev(values) / statistics.fmean(values)


def _prepare(req: EvalRequest, settings: EngineSettings):
    start = time.monotonic()
    prepared = engine.prepare(req, settings=settings)
    return prepared, time.monotonic() - start


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _row(name: str, kind: str, runs: list[tuple[EvalResult, float]]) -> str:
    res = [r for r, _ in runs]
    first = res[0]
    speedups = [r.speedup for r in res if r.speedup is not None]
    verdicts = "/".join(sorted({r.status.value + ("+flagged" if r.flagged else "") for r in res}))
    ci = first.timing.speedup_ci95 if first.timing else None
    rep_prep = [p for _, p in runs[1:]]
    rules = ", ".join(sorted({h.rule for r in res for h in r.rules}))
    error = f"{first.error.kind}: {first.error.message[:120]}".replace("|", "/") if first.error else ""
    cells = [
        name, kind, verdicts, str(len(res)),
        _fmt(statistics.median(speedups) if speedups else None, ".3f"),
        _fmt(_cv(speedups), ".2%"),
        f"{ci[0]:.3f}-{ci[1]:.3f}" if ci else "-",
        _fmt(first.timing.reference.median_ms if first.timing else None, ".4f"),
        _fmt(first.timing.candidate.median_ms if first.timing else None, ".4f"),
        _fmt(first.stages.get("build"), ".1f"),
        _fmt(statistics.fmean(rep_prep) if rep_prep else None, ".2f"),
        *(_fmt(statistics.fmean(r.stages.get(k, 0.0) for r in res), ".2f")
          for k in ("reference", "candidate", "timing")),
        rules, error,
    ]
    return "| " + " | ".join(cells) + " |"


def _write_table(out, results, firsts, args, parallel_build_s, lines) -> None:
    env = next((r.environment for rs in results.values() for r, _ in rs if r.environment), None)
    header = [
        "# GPU evaluation of the problem set",
        "",
        f"- date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}",
        f"- device: {env.gpu_name if env else '?'}, driver {env.driver if env else '?'}, "
        f"torch {env.torch if env else '?'}, triton {env.triton if env else '?'}, CUDA {env.cuda if env else '?'}",
        f"- host: {_sh('nproc')} CPU cores; sandbox: bubblewrap {_sh('$KERNELJUDGE_BWRAP --version 2>/dev/null || bwrap --version')}",
        f"- command: `{' '.join([os.path.basename(sys.executable), '-m', 'benchmarks.gpu_eval', *sys.argv[1:]])}`",
        f"- {len(firsts)} candidates prepared in parallel ({args.build_threads} threads, no GPU visible): "
        f"{parallel_build_s:.1f} s wall",
        *lines,
        "",
        "Speedup = reference median / candidate median (CUDA events, L2 flushed before every call). "
        "CV = coefficient of variation of the speedup over the repeated evaluations of the same candidate. "
        "Stage columns are means over the repeats, in seconds; build is the first (cold) build, "
        "prepare(rep) the later ones (cache hit).",
        "",
        "| problem | candidate | verdict | n | speedup (median) | speedup CV | 95% CI (first run) | ref ms | cand ms "
        "| build cold s | prepare (rep) s | reference s | candidate s | timing s | rules | error |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    rows = [_row(name, kind, runs) for (name, kind), runs in results.items()]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join([*header, *rows]) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--problems", nargs="*", default=None)
    parser.add_argument("--kinds", nargs="*", default=[*HONEST, *WRONG])
    parser.add_argument("--timing-budget", type=float, default=1.0)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--jsonl", type=Path, default=None)
    parser.add_argument("--build-threads", type=int, default=8)
    parser.add_argument("--trials", type=int, default=5)
    args = parser.parse_args()

    settings = EngineSettings.configured()
    device = Device(args.device)
    lines: list[str] = []
    if device == Device.cuda:
        check = check_sandbox(gpu_nodes=gpu_device_nodes(settings.gpu_index), isolate_network=True)
        print("sandbox self-check (network isolated):", check.message, check.report, flush=True)
        lines.append(f"- sandbox self-check with network namespace: {check.message} ({check.seconds:.1f} s) "
                     f"{json.dumps(check.report)}")
        if not check.ok:
            fallback = check_sandbox(gpu_nodes=gpu_device_nodes(settings.gpu_index), isolate_network=False)
            lines.append(f"- sandbox self-check without network namespace: {fallback.message} {fallback.report}")
            print("sandbox self-check (network shared):", fallback.message, fallback.report, flush=True)
            settings.isolate_network = False

    names = args.problems or sorted(p.name for p in PROBLEMS.iterdir() if (p / "reference.py").exists())
    jobs = []  # (problem, kind, repeat, request)
    for name in names:
        reference = (PROBLEMS / name / "reference.py").read_text()
        for kind in args.kinds:
            path = PROBLEMS / name / f"{kind}.py"
            if not path.exists():
                continue
            repeats = args.repeats if kind in HONEST else 1
            options = EvalOptions(device=device, timing_budget_s=args.timing_budget, trials=args.trials)
            request = EvalRequest(reference=reference, candidate=path.read_text(), options=options)
            for repeat in range(repeats):
                jobs.append((name, kind, repeat, request))

    # Builds first, in parallel, no GPU visible (the first of each candidate builds; the
    # repeats then hit the cache).
    t0 = time.monotonic()
    firsts = [j for j in jobs if j[2] == 0]
    with ThreadPoolExecutor(args.build_threads) as pool:
        built = list(pool.map(lambda j: _prepare(j[3], settings), firsts))
    parallel_build_s = time.monotonic() - t0
    print(f"built {len(firsts)} candidates in {parallel_build_s:.1f}s", flush=True)
    first_prepared = {(j[0], j[1]): b for j, b in zip(firsts, built, strict=True)}

    results: dict[tuple[str, str], list[tuple[EvalResult, float]]] = {}
    jsonl = open(args.jsonl, "w") if args.jsonl else None
    for name, kind, repeat, request in jobs:
        if repeat == 0:
            prepared, prep_s = first_prepared[(name, kind)]
        else:
            prepared, prep_s = _prepare(request, settings)
        start = time.monotonic()
        if isinstance(prepared, EvalResult):
            result = prepared
        else:
            result = engine.execute(prepared, settings=settings)
        total = prep_s + time.monotonic() - start
        results.setdefault((name, kind), []).append((result, prep_s))
        summary = f"{name:12s} {kind:13s} #{repeat} {result.status.value:14s} speedup={result.speedup} " \
                  f"total={total:.1f}s stages={result.stages}"
        if result.error:
            summary += f" error=[{result.error.kind}] {result.error.message[:300]}"
        print(summary, flush=True)
        _write_table(args.out, results, firsts, args, parallel_build_s, lines)
        if jsonl:
            jsonl.write(json.dumps({"problem": name, "kind": kind, "repeat": repeat,
                                    "prepare_s": prep_s, "result": result.model_dump(mode="json")}) + "\n")
    if jsonl:
        jsonl.close()

    print(args.out.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
