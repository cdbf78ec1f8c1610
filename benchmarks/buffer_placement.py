"""Does an honest kernel's time move with where its buffers lie? (Issue 23: on an H100, softmax/cuda_ok and
layernorm/cuda_ok moved by +-1.5% from job to job, each job a new candidate process, while the reference's median,
one judge process for the whole run, stayed within 0.5%.)

    python -m benchmarks.buffer_placement --problems softmax layernorm --kinds cuda_ok triton_ok reference \\
        --processes 6 --out FILE.md

Each side is timed with sandbox_side/timing/timer.time_model, as the service times it, the reference and the
candidate in turn. There are two ways:
- **fresh processes:** each loads the pair anew (new allocations, new physical pages) and times both sides `--rounds`
  times;
- **offsets in one process:** the inputs are placed as views at byte offsets into larger buffers (0 B to 2 MiB +
  4 KiB), each offset timed once.

Kind `reference` times the reference against itself: it is the control, the method's own noise.

If a side's median spreads across processes or offsets far more than between rounds in one place, its time depends
on where its buffers lie. A job's median would then average over placements (input sets in allocations of their
own), instead of taking one placement per job.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

OFFSETS = (0, 256, 4096, 65536, 1 << 20, (2 << 20) + 4096)


def spread(values: list[float]) -> float:
    return max(values) / min(values) - 1 if values and min(values) > 0 else float("nan")


def child(problem_name: str, kind: str, device_name: str, runs: int, rounds: int, offsets: bool) -> list[dict]:
    """One process's measurements of one pair (run by the parent as a subprocess)."""
    import torch

    from benchmarks.source_modules import import_source
    from problem_library.catalog import load_library
    from sandbox_side.timing import timer

    device = torch.device(device_name)
    problem = {p.name: p for p in load_library()}[problem_name]
    reference_source = problem.reference if device.type == "cuda" else problem.reference_for_cpu()
    stamp = f"{problem_name}_{kind}_{time.monotonic_ns()}"
    reference = import_source(reference_source, f"kj_place_ref_{stamp}")
    candidate = reference if kind == "reference" else import_source(problem.candidate(kind), f"kj_place_cand_{stamp}")
    torch.manual_seed(0)
    init = reference.get_init_inputs()
    models = {}
    for side, module, name in (("ref", reference, "Model"), ("cand", candidate, "Model" if kind == "reference"
                                                                     else "ModelNew")):
        torch.manual_seed(0)
        model = getattr(module, name)(*init)
        models[side] = model.to(device) if isinstance(model, torch.nn.Module) else model
    torch.manual_seed(1)
    base = [[x.to(device) if isinstance(x, torch.Tensor) else x for x in reference.get_inputs()] for _ in range(4)]

    def placed(args: list, offset: int) -> list:
        out = []
        for x in args:
            if not isinstance(x, torch.Tensor):
                out.append(x)
                continue
            skip = offset // x.element_size()
            buffer = torch.empty(x.numel() + skip, dtype=x.dtype, device=x.device)
            view = buffer[skip:skip + x.numel()].view(x.shape)
            view.copy_(x)
            out.append(view)
        return out

    def median_ms(model, pool: list[list]) -> float:
        with torch.no_grad():
            return statistics.median(timer.time_model(model, pool, device, runs=runs).device_ms)

    with torch.no_grad():  # builds, JIT compiles and first-call set-up happen before anything is timed
        for model in models.values():
            model(*base[0])
    rows = []
    for round_index in range(rounds):
        rows.append({"where": "as allocated", "round": round_index + 1,
                     **{side: median_ms(model, base) for side, model in models.items()}})
    if offsets:
        for offset in OFFSETS:
            pool = [placed(args, offset) for args in base]
            rows.append({"where": f"offset {offset} B", "round": 1,
                         **{side: median_ms(model, pool) for side, model in models.items()}})
    return rows


def run_child(problem: str, kind: str, args: argparse.Namespace, offsets: bool) -> list[dict]:
    command = [sys.executable, "-m", "benchmarks.buffer_placement", "--child", problem, kind, "--device", args.device,
               "--runs", str(args.runs), "--rounds", str(args.rounds)] + (["--offsets"] if offsets else [])
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=args.child_timeout_s)
    if done.returncode != 0:
        raise RuntimeError(f"{problem}/{kind}: the child failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def report(results: dict[tuple[str, str], list[list[dict]]], command: str, device: str) -> str:
    lines = [f"# Kernel time against buffer placement ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})", "",
             f"- device: {device}", f"- command: `{command}`",
             "- medians in ms (sandbox_side/timing/timer.time_model); ratio = reference / candidate", ""]
    lines += ["| pair | spread of cand across processes | ref across processes | ratio across processes | "
              "cand between rounds, worst process | cand across offsets | ref across offsets |",
              "|---|---|---|---|---|---|---|"]
    for (problem, kind), processes in results.items():
        per_process = [[row for row in rows if row["where"] == "as allocated"] for rows in processes]
        cand = [statistics.median(r["cand"] for r in rows) for rows in per_process]
        ref = [statistics.median(r["ref"] for r in rows) for rows in per_process]
        ratio = [r / c for r, c in zip(ref, cand, strict=True)]
        within = max(spread([r["cand"] for r in rows]) for rows in per_process)
        placed = [row for row in processes[0] if row["where"].startswith("offset")]
        lines.append(f"| {problem}/{kind} | {spread(cand):.2%} | {spread(ref):.2%} | {spread(ratio):.2%} | "
                     f"{within:.2%} | {spread([r['cand'] for r in placed]):.2%} | "
                     f"{spread([r['ref'] for r in placed]):.2%} |")
    lines += ["", "Every measurement:", "", "| pair | process | where | round | ref ms | cand ms | ratio |",
              "|---|---|---|---|---|---|---|"]
    for (problem, kind), processes in results.items():
        for index, rows in enumerate(processes, start=1):
            for row in rows:
                lines.append(f"| {problem}/{kind} | {index} | {row['where']} | {row['round']} | {row['ref']:.5f} | "
                             f"{row['cand']:.5f} | {row['ref'] / row['cand']:.4f} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.buffer_placement", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problems", nargs="+", default=["softmax", "layernorm"])
    parser.add_argument("--kinds", nargs="+", default=["cuda_ok", "triton_ok", "reference"])
    parser.add_argument("--processes", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=200, help="timed calls per median")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--child-timeout-s", type=float, default=600.0)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--child", nargs=2, metavar=("PROBLEM", "KIND"), help=argparse.SUPPRESS)
    parser.add_argument("--offsets", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        problem, kind = args.child
        print(json.dumps(child(problem, kind, args.device, args.runs, args.rounds, args.offsets)))
        return 0
    results: dict[tuple[str, str], list[list[dict]]] = {}
    command = "python -m benchmarks.buffer_placement " + " ".join(sys.argv[1:])
    for problem in args.problems:
        for kind in args.kinds:
            # The first process also times the offsets; every process times the pair as allocated.
            results[(problem, kind)] = [run_child(problem, kind, args, offsets=index == 0)
                                        for index in range(args.processes)]
            text = report(results, command, args.device)
            if args.out:
                args.out.write_text(text)
    print(report(results, command, args.device))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
