"""Throughput of the real service: evaluations per GPU-hour, submit->verdict latency, stage times,
GPU busy %, and the same pairs through the old serial path (`engine.evaluate`, one at a time).

Starts `kerneljudge serve` (embedded workers) and, when a Redis answers at --redis-url,
`kerneljudge serve --broker` + `kerneljudge worker` (Celery), each as subprocesses sharing one
data directory (so CUDA builds are cached across modes), submits every pair over HTTP with the
client package, and reads the verdicts back. Pair sets:
  corpus   the shared KernelBench SFT pairs (CUDA: GPU only), read at run time from --corpus
  triton   the problem library's Triton candidates (honest and wrong), CPU sizes on --device cpu
  cpu-goal sequential submissions of one registered problem's small Triton candidate (warm p50)
The serial path runs first, in this process, on the same pairs (it also warms the build cache);
each phase stops submitting when its share of --budget-s is spent. Writes a markdown table.

GPU (one call of at most 9 minutes; the lead's command):
    python -m benchmarks.throughput --device cuda --corpus .carry/corpus --sets corpus,triton \
        --modes embedded,celery --redis-url redis://127.0.0.1:6379/0 --budget-s 480 \
        --out benchmarks/results/throughput_$(date +%F)_h100.md
CPU (development; Triton in its interpreter):
    python -m benchmarks.throughput --device cpu --sets triton,cpu-goal --budget-s 600 --out FILE.md
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from urllib.parse import urlparse

REPO = Path(__file__).resolve().parents[1]
KEY = "throughput-key"
DEFAULT_CORPUS = REPO.parent / "shared" / "corpora" / "kernelbench-sft"
CPU_GOAL_OPTIONS = {"trials": 3, "timing_budget_s": 0.5}  # the CPU measurement


@dataclass(frozen=True)
class Pair:
    name: str
    reference: str
    candidate: str


@dataclass
class PhaseResult:
    label: str
    verdicts: dict[str, str] = field(default_factory=dict)  # pair name -> result.status (or job failure)
    latencies: list[float] = field(default_factory=list)
    stages: dict[str, list[float]] = field(default_factory=dict)
    wall_s: float = 0.0
    busy: str = "n/a"
    note: str = ""

    def add_stages(self, stages: dict[str, float]) -> None:
        for name, seconds in stages.items():
            self.stages.setdefault(name, []).append(seconds)

    def per_gpu_hour(self, gpus: int) -> float:
        return len(self.verdicts) / self.wall_s * 3600 / max(1, gpus) if self.wall_s > 0 else 0.0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


# ---- pair sets ------------------------------------------------------------------------------

def corpus_pairs(corpus: Path, sample: int | None) -> list[Pair]:
    rows = (corpus / "MANIFEST.tsv").read_text().splitlines()[1:]
    pairs = []
    for row in rows:
        ident, cand_file, problem = row.split("\t")[:3]
        pairs.append(Pair(ident, (corpus / "problems" / f"{problem}.py").read_text(),
                          (corpus / cand_file).read_text()))
    return _sample(pairs, sample)


def triton_pairs(device: str, sample: int | None) -> list[Pair]:
    from worker.problem_library.catalog import load_library

    pairs = []
    for problem in load_library():
        reference = problem.reference_for_cpu() if device == "cpu" else problem.reference
        for kind in ("triton_ok", "triton_wrong"):
            if kind in problem.candidates:
                pairs.append(Pair(f"{problem.name}/{kind}", reference, problem.candidates[kind]))
    return _sample(pairs, sample)


def _sample(pairs: list[Pair], sample: int | None) -> list[Pair]:
    if sample is None or sample >= len(pairs):
        return pairs
    step = len(pairs) / sample  # spread over the list: every kernel class, not the first few
    return [pairs[int(i * step)] for i in range(sample)]


# ---- GPU busy -------------------------------------------------------------------------------

class BusySampler:
    """Mean GPU utilisation while running (NVML via pynvml, else nvidia-smi); 'n/a' on CPU."""

    def __init__(self, device: str):
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._read = self._reader() if device == "cuda" else None
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _reader(self):
        try:
            import pynvml

            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByIndex(0)
            return lambda: float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
        except Exception:
            smi = shutil.which("nvidia-smi")
            if smi is None:
                return None
            cmd = [smi, "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits", "-i", "0"]
            return lambda: float(subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout.split()[0])

    def __enter__(self) -> BusySampler:
        if self._read is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(15)

    def _loop(self) -> None:
        while not self._stop.wait(0.5):
            try:
                self.samples.append(self._read())
            except Exception:
                return

    def summary(self) -> str:
        return f"{statistics.fmean(self.samples):.0f}%" if self.samples else "n/a"


# ---- the serial path ------------------------------------------------------------------------

def run_serial(pairs: list[Pair], device: str, options: dict, data_dir: Path, deadline: float) -> PhaseResult:
    """The old path: one `engine.evaluate` at a time, in this process."""
    os.environ["KERNELJUDGE_DATA_DIR"] = str(data_dir)
    from worker import engine
    from worker.engine.settings import EngineSettings
    from worker.models import EvalRequest

    settings = EngineSettings.from_env()
    phase = PhaseResult("serial engine.evaluate")
    with BusySampler(device) as busy:
        for pair in pairs:
            if time.monotonic() > deadline:
                phase.note = f"budget spent after {len(phase.verdicts)} of {len(pairs)} pairs"
                break
            started = time.monotonic()
            request = EvalRequest(reference=pair.reference, candidate=pair.candidate,
                                  options={**options, "device": device})
            result = engine.evaluate(request, settings=settings)
            elapsed = time.monotonic() - started
            phase.wall_s += elapsed
            phase.latencies.append(elapsed)
            phase.verdicts[pair.name] = result.status.value
            phase.add_stages(result.stages)
    phase.busy = busy.summary()
    return phase


# ---- the service ----------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def redis_reachable(url: str) -> bool:
    parsed = urlparse(url)
    try:
        with socket.create_connection((parsed.hostname or "127.0.0.1", parsed.port or 6379), timeout=2) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class Service:
    """`kerneljudge serve` (and, for Celery, `kerneljudge worker`) as subprocesses."""

    def __init__(self, device: str, data_dir: Path, broker: str | None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = dict(os.environ, KERNELJUDGE_API_KEYS=KEY, KERNELJUDGE_DATA_DIR=str(data_dir),
                   KERNELJUDGE_RATE_LIMIT="0", KERNELJUDGE_MAX_ACTIVE_PER_KEY="1000000",
                   KERNELJUDGE_MAX_QUEUE="1000000")
        # One database per mode, one build cache for all (the data directory's).
        env["KERNELJUDGE_DATABASE_URL"] = f"sqlite:///{data_dir / ('celery' if broker else 'embedded')}.db"
        cli = [sys.executable, "-m", "kerneljudge.cli"]
        serve = [*cli, "serve", "--port", str(self.port), "--device", device, "--log-level", "warning"]
        self.procs: list[subprocess.Popen] = []
        if broker:
            serve += ["--broker", broker]
            self.procs.append(subprocess.Popen([*cli, "worker", "--broker", broker, "--device", device,
                                                "--loglevel", "WARNING"], cwd=REPO, env=env, start_new_session=True))
        self.procs.append(subprocess.Popen(serve, cwd=REPO, env=env, start_new_session=True))
        self._wait_ready()

    def _wait_ready(self) -> None:
        import httpx

        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if any(proc.poll() is not None for proc in self.procs):
                raise RuntimeError("the service exited while starting")
            try:
                if httpx.get(f"{self.url}/v1/ready", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError("the service did not become ready within 180 s")

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, 15)
        for proc in self.procs:
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait(10)


def run_service(label: str, pairs: list[Pair], device: str, options: dict, data_dir: Path, deadline: float,
                broker: str | None = None) -> PhaseResult:
    """Submit every pair at once (saturating load) and wait for the verdicts until `deadline`."""
    from kerneljudge.client import KernelJudgeClient

    phase = PhaseResult(label)
    service = Service(device, data_dir, broker)
    try:
        with KernelJudgeClient(service.url, KEY, timeout=600) as client, BusySampler(device) as busy:
            entries = client.submit_many([{"reference": p.reference, "candidate": p.candidate,
                                           "options": {**options, "device": device}} for p in pairs])
            ids = {entry.job.id: pair.name for entry, pair in zip(entries, pairs, strict=True) if entry.job}
            jobs = client.wait_many(list(ids), timeout=max(1.0, deadline - time.monotonic()))
        phase.busy = busy.summary()
    finally:
        service.stop()
    finished = [job for job in jobs if job.finished]
    for job in finished:
        phase.verdicts[ids[job.id]] = job.result.status.value if job.result else f"job {job.status.value}"
        if job.result is not None:
            phase.add_stages(job.result.stages)
        phase.latencies.append((job.finished_at - job.created_at).total_seconds())
    if finished:
        phase.wall_s = (max(j.finished_at for j in finished) - min(j.created_at for j in jobs)).total_seconds()
    if len(finished) < len(jobs):
        phase.note = f"budget spent: {len(finished)} of {len(jobs)} finished"
    return phase


def run_cpu_goal(device: str, data_dir: Path, count: int, deadline: float) -> PhaseResult:
    """Warm embedded service, one registered problem, small Triton candidates sent one at a time."""
    from kerneljudge.client import KernelJudgeClient
    from tests.service.sources import REFERENCE, TRITON_CANDIDATE

    phase = PhaseResult("cpu goal: warm embedded, one registered problem, sequential")
    service = Service(device, data_dir, None)
    try:
        with KernelJudgeClient(service.url, KEY, timeout=600) as client:
            problem_id = client.register_problem(REFERENCE).id
            for i in range(count + 1):  # the first one warms the service and is not counted
                if time.monotonic() > deadline:
                    phase.note = f"budget spent after {len(phase.latencies)} of {count}"
                    break
                # A distinct source each time (a comment), as an RL batch sends distinct candidates.
                candidate = f"# candidate {i}\n{TRITON_CANDIDATE}"
                started = time.monotonic()
                job = client.submit_and_wait(problem_id=problem_id, candidate=candidate,
                                             options={**CPU_GOAL_OPTIONS, "device": device}, timeout=300)
                elapsed = time.monotonic() - started
                if i == 0:
                    continue
                phase.latencies.append(elapsed)
                phase.wall_s += elapsed
                phase.verdicts[f"cand{i}"] = job.result.status.value if job.result else f"job {job.status.value}"
                if job.result is not None:
                    phase.add_stages(job.result.stages)
    finally:
        service.stop()
    return phase


# ---- report ---------------------------------------------------------------------------------

def phase_row(set_name: str, phase: PhaseResult, serial: PhaseResult | None, gpus: int) -> str:
    rate = phase.per_gpu_hour(gpus)
    ratio = (f"{rate / serial.per_gpu_hour(gpus):.2f}x" if serial is not None and serial is not phase
             and serial.per_gpu_hour(gpus) > 0 else "")
    stages = ", ".join(f"{name} {statistics.median(v):.2f}" for name, v in sorted(phase.stages.items()))
    return (f"| {set_name} | {phase.label} | {len(phase.verdicts)} | {rate:.0f} | {ratio} | "
            f"{percentile(phase.latencies, 0.5):.2f} | {percentile(phase.latencies, 0.95):.2f} | {phase.busy} | "
            f"{stages} | {phase.note} |")


def mismatches(serial: PhaseResult, phase: PhaseResult) -> list[str]:
    return [f"{name}: serial {serial.verdicts[name]}, {phase.label} {verdict}"
            for name, verdict in sorted(phase.verdicts.items())
            if name in serial.verdicts and serial.verdicts[name] != verdict]


def device_name(device: str) -> str:
    if device == "cuda" and shutil.which("nvidia-smi"):
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i", "0"],
                             capture_output=True, text=True, check=False).stdout.strip()
        return out or "GPU"
    return f"CPU ({os.cpu_count()} cores, {platform.processor() or platform.machine()})"


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, check=False, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=False, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return (out or "unknown") + (" (with uncommitted changes)" if dirty else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.throughput", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--sets", default="corpus,triton", help="comma-separated: corpus, triton, cpu-goal")
    parser.add_argument("--modes", default="embedded,celery", help="comma-separated: embedded, celery")
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--redis-url", default=os.environ.get("KERNELJUDGE_TEST_REDIS_URL"),
                        help="Redis for the Celery mode (skipped, with a note, when none answers)")
    parser.add_argument("--sample", type=int, default=None, help="pairs per set (spread over the set)")
    parser.add_argument("--cpu-goal-count", type=int, default=10)
    parser.add_argument("--trials", type=int, default=None, help="options.trials for every job (default: engine's)")
    parser.add_argument("--no-serial", action="store_true", help="skip the serial engine.evaluate comparison")
    parser.add_argument("--budget-s", type=float, default=480.0, help="total time; split evenly over the phases")
    parser.add_argument("--data-dir", type=Path, default=None, help="keep build caches here (default: a temp dir)")
    parser.add_argument("--out", type=Path, default=None, help="markdown file (rewritten after every phase)")
    args = parser.parse_args(argv)
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    started = time.monotonic()
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="kj-throughput-"))
    data_dir.mkdir(parents=True, exist_ok=True)
    options = {} if args.trials is None else {"trials": args.trials}
    sets = [s.strip() for s in args.sets.split(",") if s.strip()]
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    notes: list[str] = []
    if "celery" in modes and not (args.redis_url and redis_reachable(args.redis_url)):
        notes.append(f"Celery mode skipped: no Redis answers at {args.redis_url or '(no --redis-url)'}.")
        modes.remove("celery")
    plan: list[tuple[str, list[Pair]]] = []
    for name in sets:
        if name == "corpus":
            if args.device == "cpu":
                notes.append("corpus skipped: its candidates are CUDA and need a GPU.")
                continue
            plan.append((name, corpus_pairs(args.corpus, args.sample)))
        elif name == "triton":
            plan.append((name, triton_pairs(args.device, args.sample)))
    phases = sum(len(modes) + (not args.no_serial) for _ in plan) + ("cpu-goal" in sets)
    share = args.budget_s / max(1, phases)
    rows: list[str] = []
    all_mismatches: list[str] = []
    header = [f"# Throughput ({date.today().isoformat()})", "",
              f"- device: {device_name(args.device)}; host {socket.gethostname()}, {os.cpu_count()} cores",
              f"- commit: {git_commit()}",
              f"- command: `python -m benchmarks.throughput {' '.join(argv if argv is not None else sys.argv[1:])}`",
              f"- started: {datetime.now().isoformat(timespec='seconds')}; budget {args.budget_s:.0f} s "
              f"({share:.0f} s per phase)", ""]

    def write(final: bool = False) -> None:
        lines = [*header, *[f"- {n}" for n in notes], "",
                 "| set | path | evaluated | evals / GPU-hour | vs serial | p50 s | p95 s | GPU busy | "
                 "median stage s | note |", "|---|---|---|---|---|---|---|---|---|---|", *rows, ""]
        lines += ["Verdict mismatches against the serial engine: "
                  + ("none" if not all_mismatches else ""), *[f"- {m}" for m in all_mismatches], ""]
        if final:
            lines.append(f"Total time: {time.monotonic() - started:.0f} s.")
        text = "\n".join(lines) + "\n"
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(text)
        if final:
            print(text)

    for set_name, pairs in plan:
        serial = None
        if not args.no_serial:
            serial = run_serial(pairs, args.device, options, data_dir, time.monotonic() + share)
            rows.append(phase_row(set_name, serial, None, 1))
            write()
        for mode in modes:
            label = "service, embedded" if mode == "embedded" else "service, Celery + Redis"
            phase = run_service(label, pairs, args.device, options, data_dir, time.monotonic() + share,
                                broker=args.redis_url if mode == "celery" else None)
            rows.append(phase_row(set_name, phase, serial, 1))
            if serial is not None:
                all_mismatches.extend(f"{set_name} {m}" for m in mismatches(serial, phase))
            write()
    if "cpu-goal" in sets:
        goal = run_cpu_goal(args.device, data_dir, args.cpu_goal_count, time.monotonic() + share)
        rows.append(phase_row("one problem, small Triton", goal, None, 1))
        notes.append(f"CPU goal: p50 {percentile(goal.latencies, 0.5):.2f} s per sequential submission "
                     f"(options {CPU_GOAL_OPTIONS}; goal <= 3 s on 2 cores).")
    write(final=True)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    raise SystemExit(main())
