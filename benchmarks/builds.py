"""Build every CUDA candidate through the fast path and the full path; write a markdown table.

    python -m benchmarks.builds --out benchmarks/results/builds_DATE.md                  # CPU or GPU host
    python -m benchmarks.builds --device-check --out builds_device_DATE.md               # GPU host

Candidates: the real corpus (../shared/corpora/kernelbench-sft/cands/*.py, read where it lies) and
the repository's own CUDA candidates (*/cuda_*.py of the problem set). Builds run as the service runs
them (sandboxed, no GPU visible, the build pool's parallelism), each path with its own cache entry, so
both really build. Reported: per-candidate time, path and fallback reason; p50/p95; builds per minute
at full parallelism (candidates / wall time of the fast phase). On a CPU-only torch the full path stops
at the compiled objects (there are no CUDA libraries to link against), and the fast path's host half
is loaded into CPU torch instead.

--device-check (GPU host): every candidate with a reference is then evaluated twice on the GPU, once
with its fast build and once with its full build; the table says whether the verdicts are the same and
whether the candidate's kernel times agree within noise.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import platform
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import torch

from contract.statuses import SandboxKind
from worker.engine.build import builder as build
from worker.engine.build import pool
from worker.engine.engine_settings import EngineSettings
from worker.engine.launch import UserFailure

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO.parent / "shared" / "corpora" / "kernelbench-sft"
# The repository's problem set (moving from benchmarks/problems to problem_library).
PROBLEM_DIRS = (REPO / "problem_library", REPO / "benchmarks" / "problems")
BUILD_LIMIT_S = 900.0
TIME_NOISE = 0.10  # kernel times within 10% (or 3 relative standard errors) count as the same


@dataclass(frozen=True)
class Candidate:
    name: str
    source: Path
    reference: Path | None


@dataclass
class PathResult:
    path: str = ""
    reason: str = ""
    seconds: float = 0.0
    status: str = ""  # built | <error kind>
    error: str = ""


@dataclass
class Row:
    candidate: Candidate
    fast: PathResult = field(default_factory=PathResult)
    full: PathResult | None = None
    check: dict = field(default_factory=dict)


def evenly_spaced(items: list, count: int | None) -> list:
    if not count or count >= len(items):
        return items
    return [items[round(index * (len(items) - 1) / (count - 1))] for index in range(count)] if count > 1 else items[:1]


def candidates(corpus: Path, limit: int | None, sample: int | None) -> list[Candidate]:
    found = []
    for source in sorted((corpus / "cands").glob("*.py")):
        reference = corpus / "problems" / source.name
        found.append(Candidate(f"corpus/{source.stem}", source, reference if reference.exists() else None))
    problems = next((directory for directory in PROBLEM_DIRS if directory.is_dir()), PROBLEM_DIRS[-1])
    for source in sorted(problems.glob("*/cuda_*.py")):
        found.append(Candidate(f"repo/{source.parent.name}/{source.stem}", source, source.parent / "reference.py"))
    return evenly_spaced(found[:limit] if limit else found, sample)


def build_one(candidate: Candidate, settings: EngineSettings, build_path: str) -> PathResult:
    text = candidate.source.read_text()
    started = time.monotonic()
    try:
        outcome = build.build_cuda_candidate(candidate.source, text, settings=settings, limit_s=BUILD_LIMIT_S,
                                             sandbox=SandboxKind.bwrap, torch_version=torch.__version__,
                                             build_path=build_path)
        record = outcome.record
        return PathResult(record.path, record.reason, record.seconds, "built")
    except UserFailure as failure:
        record = getattr(failure, "record", None)
        return PathResult(record.path if record else "?", record.reason if record else "",
                          round(time.monotonic() - started, 2), failure.kind, failure.message[:200])


def run_phase(rows: list[Row], settings: EngineSettings, build_path: str, jobs: int) -> float:
    started = time.monotonic()

    def build_and_log(row: Row) -> PathResult:
        result = build_one(row.candidate, settings, build_path)
        print(f"{build_path} {row.candidate.name} {result.status} {result.path} {result.seconds:.1f}s {result.reason}",
              file=sys.stderr, flush=True)
        return result

    with ThreadPoolExecutor(max_workers=jobs) as executor:
        results = list(executor.map(build_and_log, rows))
    for row, result in zip(rows, results, strict=True):
        if build_path == "full":
            row.full = result
        else:
            row.fast = result
    return time.monotonic() - started


def percentile(values: list[float], share: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(share * (len(ordered) - 1))))]


def run_seconds(result) -> float:
    return sum(result.stages.get(stage, 0.0) for stage in ("reference", "inputs", "load", "candidate"))


def device_check(rows: list[Row], settings: EngineSettings, deadline: float, write) -> None:
    """Evaluate each candidate with its fast build and with its full build; compare (until `deadline`)."""
    from contract.requests import EvalOptions, EvalRequest
    from worker.engine import evaluate

    for row in rows:
        if time.monotonic() > deadline:
            print("device check: time budget spent; the rest is not checked", file=sys.stderr)
            return
        if row.candidate.reference is None or row.fast.status != "built" or not row.full or row.full.status != "built":
            continue
        results = {}
        for build_path in ("auto", "full"):
            request = EvalRequest(reference=row.candidate.reference.read_text(),
                                  candidate=row.candidate.source.read_text(),
                                  options=EvalOptions(device="cuda", trials=2, timing_budget_s=0.5))
            forced = dataclasses.replace(settings, build_path=build_path)
            results[build_path] = evaluate(request, settings=forced)
        fast, full = results["auto"], results["full"]
        check = {"fast_verdict": fast.status.value, "full_verdict": full.status.value,
                 "same_verdict": fast.status == full.status and fast.correct == full.correct,
                 # reference + candidate stages: the candidate's import (its load_inline) overlaps them
                 "fast_run_s": run_seconds(fast), "full_run_s": run_seconds(full)}
        if fast.timing and full.timing:
            ratio = fast.timing.candidate.median_ms / full.timing.candidate.median_ms
            noise = max(TIME_NOISE, 3 * max(fast.timing.candidate.rse, full.timing.candidate.rse))
            check.update(fast_ms=fast.timing.candidate.median_ms, full_ms=full.timing.candidate.median_ms,
                         ratio=ratio, same_time=abs(ratio - 1) <= noise)
        row.check = check
        print(f"check {row.candidate.name} {check}", file=sys.stderr, flush=True)
        write()


def markdown(rows: list[Row], args: argparse.Namespace, walls: dict[str, float]) -> str:
    fast_built = [row for row in rows if row.fast.status == "built"]
    fast_path = [row for row in fast_built if row.fast.path == "fast"]
    times = [row.fast.seconds for row in fast_built]
    fast_times = [row.fast.seconds for row in fast_path]
    full_times = [row.full.seconds for row in rows if row.full and row.full.status == "built"]
    failed = [row for row in rows if row.fast.status != "built"]
    lines = [
        f"# Candidate builds: fast path vs full load_inline build ({datetime.date.today().isoformat()})",
        "",
        f"- machine: {platform.node()}, {os.cpu_count()} cores, {platform.platform()}, python {platform.python_version()}",
        f"- torch {torch.__version__} ({'CUDA ' + torch.version.cuda if torch.version.cuda else 'CPU build'}), "
        f"host compiler for the fast path: {build.find_toolchain().fast_cxx}, CUDA toolkit: {build.find_toolchain().cuda_home}",
        f"- command: `{' '.join(['python', '-m', 'benchmarks.builds', *sys.argv[1:]])}`",
        f"- parallel builds: {args.jobs} (build pool slots on this machine: {args.pool_slots})",
        "",
        "## Summary",
        "",
        f"- candidates: {len(rows)}; built: {len(fast_built)}; failed to build: {len(failed)}",
        f"- fast path served: {len(fast_path)}/{len(fast_built)} built candidates "
        f"({100 * len(fast_path) / max(1, len(fast_built)):.0f}%)",
        f"- build time, service path (fast, else fallback): p50 {percentile(times, 0.5):.1f} s, "
        f"p95 {percentile(times, 0.95):.1f} s",
        f"- build time, fast path only: p50 {percentile(fast_times, 0.5):.1f} s, p95 {percentile(fast_times, 0.95):.1f} s",
        f"- builds/min at {args.jobs} parallel: {60 * len(rows) / walls['auto']:.1f} "
        f"({len(rows)} builds in {walls['auto']:.0f} s wall)",
    ]
    if full_times:
        lines.append(f"- full build ({len(full_times)} candidates): p50 {percentile(full_times, 0.5):.1f} s, "
                     f"p95 {percentile(full_times, 0.95):.1f} s"
                     + ("" if torch.version.cuda else " (objects only: a CPU torch cannot link CUDA extensions)"))
    if args.device_check:
        checked = [row for row in rows if row.check]
        lines.append(f"- device check: {len(checked)} candidates evaluated twice; same verdict: "
                     f"{sum(row.check['same_verdict'] for row in checked)}; same kernel time within noise: "
                     f"{sum(bool(row.check.get('same_time')) for row in checked)} of "
                     f"{sum('ratio' in row.check for row in checked)} timed")
    reasons: dict[str, int] = {}
    for row in fast_built:
        if row.fast.path != "fast":
            reason = row.fast.reason.split(": ", 1)[-1].split(" (")[0][:90]
            reasons[reason] = reasons.get(reason, 0) + 1
    if reasons:
        lines += ["", "## Why the fast path declined", "", "| count | reason |", "| ---: | --- |"]
        lines += [f"| {count} | {reason} |" for reason, count in sorted(reasons.items(), key=lambda item: -item[1])]
    header = "| candidate | path | seconds | fallback reason / error |"
    rule = "| --- | --- | ---: | --- |"
    if any(row.full for row in rows):
        header = "| candidate | path | seconds | full build s | fallback reason / error |"
        rule = "| --- | --- | ---: | ---: | --- |"
    if args.device_check:
        header = header[:-1] + "fast verdict | full verdict | same verdict | fast ms | full ms | same time | run s fast/full |"
        rule = rule[:-1] + " --- | --- | --- | ---: | ---: | --- | --- |"
    lines += ["", "## Per candidate", "", header, rule]
    for row in rows:
        note = row.fast.reason if row.fast.status == "built" else f"{row.fast.status}: {row.fast.reason or row.fast.error}"
        cells = [row.candidate.name, row.fast.path, f"{row.fast.seconds:.1f}"]
        if any(r.full for r in rows):
            cells.append(f"{row.full.seconds:.1f}" if row.full else "")
        cells.append(note.replace("|", "\\|")[:160])
        if args.device_check:
            c = row.check
            cells += [c.get("fast_verdict", ""), c.get("full_verdict", ""), str(c.get("same_verdict", "")),
                      f"{c['fast_ms']:.4f}" if "fast_ms" in c else "", f"{c['full_ms']:.4f}" if "full_ms" in c else "",
                      str(c.get("same_time", "")), f"{c.get('fast_run_s') or 0:.1f}/{c.get('full_run_s') or 0:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="markdown table to write")
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--limit", type=int, default=None, help="only the first N candidates")
    parser.add_argument("--sample", type=int, default=None,
                        help="N candidates spread evenly over the list (a machine too slow for all of them)")
    parser.add_argument("--full-limit", type=int, default=None,
                        help="full builds for the first N candidates only (default: all)")
    parser.add_argument("--jobs", type=int, default=None, help="builds at once (default: the pool's)")
    parser.add_argument("--cache", type=Path, default=None,
                        help="build cache (default: a fresh one under $KERNELJUDGE_DATA_DIR or /tmp, so all build)")
    parser.add_argument("--device-check", action="store_true", help="GPU host: compare fast and full builds on the GPU")
    parser.add_argument("--budget-s", type=float, default=None,
                        help="stop the device check after this many seconds of the whole run (a device call's limit)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    settings = EngineSettings.configured()
    args.pool_slots = pool.build_slots(settings)
    args.jobs = args.jobs or args.pool_slots
    if args.cache:
        settings.build_cache = args.cache
    run_cache = settings.build_cache.parent / f"benchmark-builds-{int(time.time())}"
    run_cache.mkdir(parents=True)
    if not (run_cache / "pch").exists():
        (run_cache / "pch").symlink_to(build.pch_root(settings, torch.__version__).resolve())
    settings.build_cache = run_cache
    rows = [Row(candidate) for candidate in candidates(args.corpus, args.limit, args.sample)]
    print(f"{len(rows)} candidates, {args.jobs} at a time", file=sys.stderr)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    walls = {"auto": run_phase(rows, settings, "auto", args.jobs)}

    def write() -> None:  # after every phase: a run cut short still leaves its table
        args.out.write_text(markdown(rows, args, walls))

    write()
    full_rows = rows[:args.full_limit] if args.full_limit is not None else rows
    if full_rows:
        walls["full"] = run_phase(full_rows, settings, "full", args.jobs)
        write()
    if args.device_check:
        device_check(rows, settings, started + args.budget_s if args.budget_s else float("inf"), write)
    write()
    print(args.out.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
