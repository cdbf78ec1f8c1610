"""python -m benchmarks.redteam [--device cpu|cuda] [--only static] [--disable RULE ...] [--write]
[--jsonl PATH [--resume]]"""

from __future__ import annotations

import argparse
import datetime as dt
import fnmatch
import logging
import platform
import sys
from pathlib import Path

from contract.statuses import Device

from .corpus import load_corpus
from .record import append, finished
from .report import markdown, text_table
from .runner import run_engine, run_static, summarise

RESULTS_DIR = Path(__file__).resolve().parents[1] / "results"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.redteam", description=__doc__)
    parser.add_argument("--device", choices=[d.value for d in Device], default="cpu")
    parser.add_argument("--only", choices=["static"], help="run the static policy only (no engine, no GPU)")
    parser.add_argument("--disable", action="append", default=[], metavar="RULE",
                        help="switch a static rule off for every case (to measure the runtime layer alone)")
    parser.add_argument("--cases", default="*", help="glob over case ids (default: all)")
    parser.add_argument("--run-limit", type=float, default=60.0, help="per-stage run limit in seconds for the engine")
    parser.add_argument("--markdown", type=Path, help="write the table as markdown to this path")
    parser.add_argument("--gpu-only", action="store_true", help="only the cases that need a GPU")
    parser.add_argument("--write", action="store_true", help="write the markdown table to benchmarks/results/")
    parser.add_argument("--jsonl", type=Path, help="append each case's outcome to this file as it finishes")
    parser.add_argument("--resume", action="store_true",
                        help="skip the cases --jsonl already holds for this device and mode; the table has them all")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    cases = [c for c in load_corpus() if fnmatch.fnmatch(c.id, args.cases) and (c.needs_gpu or not args.gpu_only)]
    if not cases:
        print(f"no case id matches {args.cases!r}", file=sys.stderr)
        return 2
    device = Device(args.device)
    mode = "static" if args.only == "static" else "engine"
    earlier = finished(args.jsonl, cases, device.value, mode) if args.jsonl and args.resume else {}
    if earlier:
        print(f"  {len(earlier)} of {len(cases)} cases already in {args.jsonl}", file=sys.stderr)
    if args.only != "static":
        from worker.engine import evaluate
    outcomes = []
    for case in cases:
        if case.id in earlier:
            outcomes.append(earlier[case.id])
            continue
        if args.only == "static":
            outcomes.append(run_static(case, args.disable))
        else:
            outcomes.append(run_engine(case, args.disable, device, evaluate, args.run_limit))
            note = f" {outcomes[-1].note}" if outcomes[-1].note else ""
            print(f"  {case.id}: {outcomes[-1].got} ({outcomes[-1].seconds:.1f}s){note}", file=sys.stderr, flush=True)
        if args.jsonl:
            append(args.jsonl, outcomes[-1], device.value, mode)
    summary = summarise(outcomes)
    print(text_table(outcomes, summary))
    target = args.markdown
    if args.write and target is None:
        target = RESULTS_DIR / f"redteam-{mode}-{device.value}-{dt.date.today().isoformat()}.md"
    if target is not None:
        command = "python -m benchmarks.redteam " + " ".join(argv if argv is not None else sys.argv[1:])
        title = f"Red-team corpus, {mode} run on {device.value} ({dt.date.today().isoformat()}, {platform.node()})"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(markdown(outcomes, summary, title, command))
        print(f"\nwrote {target}")
    return 0 if summary.false_positives == 0 and summary.missed == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
