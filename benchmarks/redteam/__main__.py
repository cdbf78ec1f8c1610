"""python -m benchmarks.redteam [--device cpu|cuda] [--only static] [--disable RULE ...] [--write]"""

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
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    cases = [c for c in load_corpus() if fnmatch.fnmatch(c.id, args.cases) and (c.needs_gpu or not args.gpu_only)]
    if not cases:
        print(f"no case id matches {args.cases!r}", file=sys.stderr)
        return 2
    device = Device(args.device)
    if args.only == "static":
        outcomes = [run_static(case, args.disable) for case in cases]
    else:
        from worker.engine import evaluate

        outcomes = []
        for case in cases:
            try:
                outcomes.append(run_engine(case, args.disable, device, evaluate, args.run_limit))
            except NotImplementedError:
                print("worker.engine.evaluate is not implemented yet; run with --only static", file=sys.stderr)
                return 2
            note = f" {outcomes[-1].note}" if outcomes[-1].note else ""
            print(f"  {case.id}: {outcomes[-1].got} ({outcomes[-1].seconds:.1f}s){note}", file=sys.stderr, flush=True)
    summary = summarise(outcomes)
    print(text_table(outcomes, summary))
    mode = "static" if args.only == "static" else "engine"
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
