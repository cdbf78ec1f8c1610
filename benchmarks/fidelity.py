"""Fidelity benchmark: the engine's verdicts on real LLM-written kernels against a plain check.

For each (reference, candidate) pair of a corpus (default: ../shared/corpora/kernelbench-sft, read
at run time) it runs the whole engine (sandbox, attribution, correctness, timing) and, apart, an
independent plain check (benchmarks/fidelity_check.py: both modules in one process, identical
inputs, allclose at the problem's tolerance). A pair agrees when the engine accepts (ok, not
flagged: a positive reward) exactly when the plain check finds the candidate correct.

Phases, resumable across calls (rows are appended to --jsonl as pairs finish):
  build   validate and build every candidate (CPU cores, no GPU needed), filling the build cache
  eval    evaluate the pairs not yet in --jsonl, with the plain check beside each
  report  write the markdown table and summary to --out
  python -m benchmarks.fidelity --phases build,eval,report --jsonl data/fid.jsonl --out results.md
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TextIO

from contract.requests import EvalOptions, EvalRequest
from contract.results import EvalResult
from contract.statuses import Device, EvalStatus
from worker import engine
from worker.engine.engine_settings import EngineSettings

DEFAULT_CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpora" / "kernelbench-sft"
CHECK_TIMEOUT_S = 600
STARTED = time.monotonic()


@dataclass
class Pair:
    id: str
    category: str
    reference: Path
    candidate: Path


def load_pairs(corpus: Path, ids: list[str] | None, limit: int | None) -> list[Pair]:
    with open(corpus / "MANIFEST.tsv") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    pairs = [Pair(row["id"], row["category"], corpus / "problems" / f"{row['problem']}.py", corpus / row["file"])
             for row in rows if not ids or row["id"] in ids]
    return pairs[:limit] if limit else pairs


def _request(pair: Pair, args) -> EvalRequest:
    # The torch.compile baseline changes no verdict (the reward's speedup is against eager by default), and the
    # engine alone waits for it: 30-110 s of a pair's 26-154 s on an H100. Off unless asked for.
    options = EvalOptions(device=Device(args.device), trials=args.trials, timing=True,
                          timing_budget_s=args.timing_budget, timing_max_runs=args.timing_max_runs,
                          compile_baseline=args.compile_baseline)
    return EvalRequest(reference=pair.reference.read_text(), candidate=pair.candidate.read_text(), options=options)


def build_all(pairs: list[Pair], args, settings: EngineSettings) -> None:
    def build(pair: Pair) -> str:
        start = time.monotonic()
        prepared = engine.prepare(_request(pair, args), settings=settings)
        if isinstance(prepared, EvalResult):
            return f"{pair.id}: {prepared.status.value} ({time.monotonic() - start:.1f} s)"
        build = prepared.builder.extra.build
        path = (build.path if build else None) or "?"
        prepared.discard()
        return f"{pair.id}: built ({path}, {time.monotonic() - start:.1f} s)"

    with ThreadPoolExecutor(args.build_jobs) as pool:
        for line in pool.map(build, pairs):
            print("build", line, flush=True)


class PlainCheck:
    """The independent check of one pair (benchmarks/fidelity_check.py), in a process of its own, started
    beside the engine's evaluation of the same pair: the two share nothing but the built extension."""

    def __init__(self, pair: Pair, ext_dir: Path | None, args) -> None:
        command = [sys.executable, "-m", "benchmarks.fidelity_check", str(pair.reference), str(pair.candidate),
                   "--device", args.device, "--trials", "3"]
        if ext_dir is not None:
            command += ["--ext-dir", str(ext_dir)]
        self.started = time.monotonic()
        self.deadline = self.started + CHECK_TIMEOUT_S
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                        cwd=Path(__file__).resolve().parents[1])

    def result(self) -> dict:
        try:
            stdout, stderr = self.process.communicate(timeout=max(self.deadline - time.monotonic(), 0.0))
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.communicate()
            return {"correct": False, "max_abs_error": None, "message": "check timed out"}
        seconds = round(time.monotonic() - self.started, 1)
        lines = [line for line in stdout.splitlines() if line.startswith("{")]
        if lines:
            return {**json.loads(lines[-1]), "seconds": seconds}
        return {"correct": False, "max_abs_error": None, "message": f"check crashed: {stderr[-300:]}",
                "seconds": seconds}


def evaluate_pair(pair: Pair, args, settings: EngineSettings) -> dict:
    start = time.monotonic()
    prepared = engine.prepare(_request(pair, args), settings=settings)
    ext_dir = None if isinstance(prepared, EvalResult) else prepared.ext_dir
    check = PlainCheck(pair, ext_dir, args)  # runs while the engine evaluates
    try:
        result = prepared if isinstance(prepared, EvalResult) else engine.execute(prepared, settings=settings)
    except BaseException:
        check.process.kill()
        check.process.communicate()
        raise
    engine_s = time.monotonic() - start
    independent = check.result()
    coverage = result.coverage
    return {
        "id": pair.id, "category": pair.category, "status": result.status.value, "flagged": result.flagged,
        "reward": round(result.reward, 4), "speedup": result.speedup,
        "coverage": coverage.share if coverage else None,
        "own_kernels": [k.name for k in coverage.own_kernels] if coverage else [],
        "library_kernels": [f"{k.name[:60]} ({k.share:.0%})" for k in coverage.library_kernels[:3]] if coverage else [],
        "rules": [{"rule": h.rule, "severity": h.severity, "evidence": (h.evidence or h.message)[:300]}
                  for h in result.rules],
        "error": (result.error.message[:300] if result.error else None),
        "degenerate": bool(result.correctness and result.correctness.degenerate_reference),
        "precision": result.correctness.precision.model_dump() if result.correctness and result.correctness.precision
        else None,
        "probes": [{"kind": p.kind, "outcome": p.outcome, "ratio": p.ratio, "message": p.message}
                   for p in (result.correctness.probes if result.correctness else [])],
        "shape_trial": (result.correctness.shape_trial.message if result.correctness and
                        result.correctness.shape_trial else None),
        "judged": result.judged,
        "build": result.extra.build.model_dump() if result.extra.build else None, "stages": result.stages, "engine_s": round(engine_s, 1),
        "independent": independent,
        "gpu": result.environment.gpu_name if result.environment else None,
    }


def eval_all(pairs: list[Pair], args, settings: EngineSettings) -> None:
    done = {row["id"] for row in _rows(args.jsonl)}
    todo = [pair for pair in pairs if pair.id not in done]
    print(f"eval: {len(todo)} pairs to go ({len(done)} done before)", flush=True)
    deadline = STARTED + args.eval_budget_s if args.eval_budget_s else None

    def run(pair: Pair) -> dict | None:
        if deadline is not None and time.monotonic() > deadline:
            return None  # left for the next call
        return evaluate_pair(pair, args, settings)

    # A plain check that ran out of device memory beside the other pairs' jobs has no verdict: its pair is
    # evaluated again once the others are done, alone on the device (S141: 9.4 GiB asked beside five pairs).
    alone: list[Pair] = []
    by_id = {pair.id: pair for pair in todo}
    with open(args.jsonl, "a") as out:
        with ThreadPoolExecutor(args.eval_jobs) as pool:
            for row in pool.map(run, todo):
                if row is not None and row["independent"].get("out_of_memory"):
                    print(f"eval {row['id']}: the plain check ran out of device memory beside the other pairs: "
                          "evaluated again alone at the end", flush=True)
                    alone.append(by_id[row["id"]])
                elif row is not None:
                    _write(out, row)
        for pair in alone:
            row = evaluate_pair(pair, args, settings)
            row["independent"]["alone"] = True
            _write(out, row)


def _write(out: TextIO, row: dict) -> None:
    out.write(json.dumps(row) + "\n")
    out.flush()
    print(f"eval {row['id']}: {row['status']}{' flagged' if row['flagged'] else ''} reward {row['reward']} "
          f"independent {'correct' if row['independent']['correct'] else 'incorrect'} ({row['engine_s']} s)",
          flush=True)


def _rows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    rows = {}
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            rows[row["id"]] = row
    return sorted(rows.values(), key=lambda r: r["id"])


def accepted(row: dict) -> bool:
    return row["status"] == EvalStatus.ok.value and not row["flagged"]


def explain(row: dict) -> str:
    if row["rules"]:
        return "; ".join(f"{h['rule']} ({h['severity']}): {h['evidence']}" for h in row["rules"])
    if row["error"]:
        return row["error"]
    failed = [f"probe {p['kind']}: {p['message']}" for p in row.get("probes") or [] if p["outcome"] == "fail"]
    if failed:
        return "; ".join(failed)
    return f"engine {row['status']}, plain check: {row['independent'].get('message')}"


def probe_summary(row: dict) -> str:
    """`scaled ok 1.2, offset flag 3e+03, spikes -`: each probe's outcome and error ratio ('-': left out)."""
    return ", ".join(f"{p['kind']} {p['outcome'] or '-'}" + (f" {p['ratio']:.3g}" if p["ratio"] is not None else "")
                     for p in row.get("probes") or [])


def report(args, command: str) -> str:
    rows = _rows(args.jsonl)
    agree = [row for row in rows if accepted(row) == bool(row["independent"]["correct"])]
    gpu = next((row["gpu"] for row in rows if row.get("gpu")), "?")
    lines = [
        f"# Fidelity: engine verdicts vs an independent plain check ({datetime.now(timezone.utc):%Y-%m-%d})",
        "",
        f"- Device: {gpu}",
        f"- Command: `{command}`",
        f"- Corpus: {args.corpus} ({len(rows)} pairs evaluated)",
        "- Agreement: engine accepts (ok, not flagged) exactly when the plain check (same inputs, allclose at the "
        "problem's tolerance) finds the candidate correct.",
        "",
        f"**Agreement: {len(agree)}/{len(rows)} ({len(agree) / max(len(rows), 1):.1%})**",
        "",
    ]
    honest_zero = [row for row in rows if row["independent"]["correct"] and row["reward"] <= 0]
    lines.append(f"Independently correct but reward 0: {len(honest_zero)}")
    lines += ["", "## Disagreements", ""]
    for row in rows:
        if row not in agree:
            side = "engine rejects/flags, plain check correct" if row["independent"]["correct"] \
                else "engine accepts, plain check incorrect"
            lines.append(f"- {row['id']} ({side}): {explain(row)}")
    lines += ["", "## Pairs", "",
              "| id | cat | engine | reward | speedup | coverage | own kernels | library kernels | rules | probes | "
              "plain | build | s |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        verdict = row["status"] + (" (flagged)" if row["flagged"] else "")
        rules = ", ".join(h["rule"].split("-")[0] + "-" + h["rule"].split("-")[1] for h in row["rules"]) or ""
        cov = "" if row["coverage"] is None else f"{row['coverage']:.2f}"
        speed = "" if row["speedup"] is None else f"{row['speedup']:.2f}"
        plain = "correct" if row["independent"]["correct"] else "incorrect"
        build = (row.get("build") or {}).get("path", "")
        lines.append(f"| {row['id']} | {row['category']} | {verdict} | {row['reward']} | {speed} | {cov} | "
                     f"{', '.join(row['own_kernels'])[:60]} | {', '.join(row['library_kernels'])[:90]} | {rules} | "
                     f"{probe_summary(row)} | {plain} | {build} | {row['engine_s']} |")
    return "\n".join(lines) + "\n"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--phases", default="build,eval,report")
    parser.add_argument("--ids", nargs="*")
    parser.add_argument("--limit", type=int)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--timing-budget", type=float, default=0.5)
    parser.add_argument("--timing-max-runs", type=int, default=500)
    parser.add_argument("--build-jobs", type=int, default=max((os.cpu_count() or 2) - 2, 1))
    parser.add_argument("--eval-jobs", type=int, default=4)
    parser.add_argument("--compile-baseline", action="store_true",
                        help="also time torch.compile of each reference (no verdict depends on it)")
    parser.add_argument("--eval-budget-s", type=float, default=0.0,
                        help="start no new pair this long after the benchmark started (0: no limit)")
    parser.add_argument("--jsonl", type=Path, required=True)
    parser.add_argument("--out", type=Path)
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    settings = EngineSettings.configured()
    pairs = load_pairs(args.corpus, args.ids, args.limit)
    phases = args.phases.split(",")
    if "build" in phases:
        build_all(pairs, args, settings)
    if "eval" in phases:
        eval_all(pairs, args, settings)
    if "report" in phases and args.out:
        args.out.write_text(report(args, "python -m benchmarks.fidelity " + " ".join(sys.argv[1:])))
        print(args.out.read_text().split("## Pairs")[0])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
