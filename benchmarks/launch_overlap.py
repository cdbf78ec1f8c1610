"""Does the host's launch time leak into the timer's samples when the host is loaded?

    python -m benchmarks.launch_overlap --problems matmul mean_max layernorm --runs 300 --out FILE.md

For each library problem's reference and `triton_ok` candidate, in this process (no service, no sandbox),
under three host loads:
- idle;
- `others`: this process pinned to one core, loaders on every other core (the service's reserved timing
  cores, with a batch's builds elsewhere: worker/engine/cpu_plan.py);
- `all`: loaders on every core, this one included.

Loaders alternate a Python spin with 64 MiB memory copies (a compiler's cache and memory traffic).
Each load is measured by:
- `launch us`: the host's time in forward (perf_counter around the call, the device synchronised
  after it, outside the clock);
- `synced`: the loop before 2026-11-27, a device synchronisation after every call, so the flush alone
  (85 us) covers the next call's launch;
- `timer`: sandbox_side/timing/timer.time_model as the service runs it;
- `do_bench`: triton.testing.do_bench, median.

The medians are in ms, and each method's speedup (reference / candidate) is given under each load.
The question is whether a method's speedup moves when the host is loaded.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path

import torch

from benchmarks.source_modules import import_source
from problem_library.catalog import load_library
from sandbox_side.timing import timer

LOADER = r"""
import sys, time, torch
torch.set_num_threads(1)
a, b = torch.empty(16 << 20), torch.empty(16 << 20)
while True:
    t = time.perf_counter()
    while time.perf_counter() - t < 0.02:
        pass
    for _ in range(4):
        b.copy_(a)
"""
LOADS = ("idle", "others", "all")


def _model(module: types.ModuleType, class_name: str, init_inputs: list, device: torch.device):
    torch.manual_seed(0)
    model = getattr(module, class_name)(*init_inputs)
    return model.to(device) if isinstance(model, torch.nn.Module) else model


def _pool(module: types.ModuleType, device: torch.device, sets: int = 4) -> list[list]:
    torch.manual_seed(1)
    return [[x.to(device) if isinstance(x, torch.Tensor) else x for x in module.get_inputs()] for _ in range(sets)]


def launch_us(model, pool: list[list], runs: int) -> float:
    spent = []
    with torch.no_grad():
        for i in range(runs):
            args = pool[i % len(pool)]
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            model(*args)
            spent.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(spent)


def synced_ms(model, pool: list[list], runs: int, device: torch.device) -> float:
    """The loop the timer ran before: flush, events around the call, a device synchronisation after it."""
    flush = timer._gpu_timer(device).flush
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    with torch.no_grad():
        for i in range(runs + 3):
            args = pool[i % len(pool)]
            flush.zero_()
            start.record()
            model(*args)
            end.record()
            torch.cuda.synchronize()
            if i >= 3:
                samples.append(start.elapsed_time(end))
    return statistics.median(samples)


def timer_ms(model, pool: list[list], runs: int, device: torch.device) -> float:
    return statistics.median(timer.time_model(model, pool, device, runs=runs).device_ms)


def do_bench_ms(model, pool: list[list]) -> float:
    from triton.testing import do_bench
    with torch.no_grad():
        return float(do_bench(lambda: model(*pool[0]), return_mode="median"))


class Load:
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.processes: list[subprocess.Popen] = []
        cores = sorted(os.sched_getaffinity(0))
        self.mine = cores[-1]
        if kind == "idle":
            return
        targets = cores if kind == "all" else cores[:-1]
        for core in targets:
            self.processes.append(subprocess.Popen(
                ["taskset", "-c", str(core), sys.executable, "-c", LOADER],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        time.sleep(1.0)  # the loaders allocate and start spinning before anything is measured

    def __enter__(self) -> Load:
        os.sched_setaffinity(0, {self.mine} if self.kind != "idle" else set(os.sched_getaffinity(0)))
        return self

    def __exit__(self, *exc: object) -> None:
        for process in self.processes:
            process.kill()
        for process in self.processes:
            process.wait()


def measure(problems: list[str], runs: int, rounds: int) -> list[dict]:
    device = torch.device("cuda")
    library = {problem.name: problem for problem in load_library()}
    cases = []
    for name in problems:
        problem = library[name]
        reference = import_source(problem.reference, f"kj_overlap_ref_{name}")
        candidate = import_source(problem.candidate("triton_ok"), f"kj_overlap_cand_{name}")
        pool = _pool(reference, device)
        init = reference.get_init_inputs()
        cases.append((name, _model(reference, "Model", init, device), _model(candidate, "ModelNew", init, device), pool))
        with torch.no_grad():  # compiles the Triton kernels before anything is timed
            cases[-1][2](*pool[0])
        torch.cuda.synchronize()
    all_cores = set(os.sched_getaffinity(0))
    rows = []
    for kind in LOADS:
        with Load(kind):
            for name, ref_model, cand_model, pool in cases:
                for round_index in range(rounds):
                    row = {"problem": name, "load": kind, "round": round_index + 1}
                    for side, model in (("ref", ref_model), ("cand", cand_model)):
                        row[f"{side}_launch_us"] = launch_us(model, pool, min(runs, 100))
                        row[f"{side}_synced"] = synced_ms(model, pool, runs, device)
                        row[f"{side}_timer"] = timer_ms(model, pool, runs, device)
                        row[f"{side}_do_bench"] = do_bench_ms(model, pool)
                    rows.append(row)
                    print(row, flush=True)
        os.sched_setaffinity(0, all_cores)
    return rows


def write_table(rows: list[dict], out: Path, command: str) -> None:
    lines = [
        f"# Host launch time against the timer's samples ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})",
        "",
        f"- device: {torch.cuda.get_device_name()}, host cores: {len(os.sched_getaffinity(0))}",
        f"- command: `{command}`",
        "- speedup = reference / candidate, each by the named method; launch us = host time in forward (median).",
        "",
        "| problem | load | round | ref launch us | cand launch us | synced | timer | do_bench | cand synced ms "
        "| cand timer ms | cand do_bench ms |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        speedups = [row[f"ref_{m}"] / row[f"cand_{m}"] for m in ("synced", "timer", "do_bench")]
        lines.append(
            f"| {row['problem']} | {row['load']} | {row['round']} | {row['ref_launch_us']:.0f} "
            f"| {row['cand_launch_us']:.0f} | " + " | ".join(f"{s:.3f}" for s in speedups)
            + f" | {row['cand_synced']:.4f} | {row['cand_timer']:.4f} | {row['cand_do_bench']:.4f} |")
    lines += ["", "Spread of each method's speedup over all loads and rounds (max/min - 1):", "",
              "| problem | synced | timer | do_bench |", "|---|---|---|---|"]
    for name in dict.fromkeys(row["problem"] for row in rows):
        mine = [row for row in rows if row["problem"] == name]
        cells = []
        for method in ("synced", "timer", "do_bench"):
            values = [row[f"ref_{method}"] / row[f"cand_{method}"] for row in mine]
            cells.append(f"{max(values) / min(values) - 1:.2%}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    out.write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", nargs="+", default=["matmul", "mean_max", "layernorm", "conv2d", "softmax"])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    rows = measure(args.problems, args.runs, args.rounds)
    write_table(rows, args.out, "python -m benchmarks.launch_overlap " + " ".join(sys.argv[1:]))
    print(args.out.read_text())


if __name__ == "__main__":
    main()
