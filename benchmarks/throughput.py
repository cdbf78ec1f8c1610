"""Throughput of the real service on what RL trainers send, against the serial engine on the same pairs.

Starts `kerneljudge serve` (embedded workers; Celery + `kerneljudge worker` with --broker) as a
subprocess on one data directory, submits a workload at once with `POST /v1/evaluations:batch` in
shuffled order (default options, builds included in the wall time), waits for the verdicts, then runs
the same pairs through the serial path in this process (`engine.prepare` of every pair first, in
parallel on the host's cores, untimed: builds done beforehand; then `engine.execute` one at a time,
timed), and compares verdicts and the honest candidates' speedups. Workloads:

  rl           P problems x C candidates (default 16 x 8 on cuda: library problems and, with --corpus,
               shared-corpus problems; 6 x 4 library Triton problems on cpu): honest and wrong Triton and
               CUDA candidates, exact duplicates and distinct samples of the same candidate (a comment
               line); corpus candidates get a wrong variant made here (their output scaled by 1.01)
  rl-again     the same batch against a fresh server process on the same --data-dir (problems, builds,
               Triton caches and persisted baselines seen before); run `rl` first with that --data-dir
  distinct     every job a different problem (the shared corpus on cuda; one library Triton candidate per
               problem on cpu), compile baseline on by default (cuda)
  triton-warm  one Triton job at a time on a warm registered problem, idle service: submit->verdict p50

Each row: evaluations per GPU-hour (first submit to last verdict), p50/p95 submit->verdict, stage
medians, reference cache hits/misses, compile baseline states, GPU busy %, verdict agreement with
the serial path, and the share of honest candidates whose speedup is within 5% of the serial one.
The table (and --jsonl, one row per job) is rewritten as results come in, so a run cut off by a time
limit keeps what it measured; the service phase stops waiting at --service-share of --budget-s and the
serial phase stops at the budget (pairs it did not reach are left out of the comparison, and said so).

GPU (H100, one call each, well inside 10 minutes; see benchmarks/run_device.sh `throughput`):
    python3 -m benchmarks.throughput --workload rl --device cuda --corpus .carry/corpus \\
        --data-dir .bench/tp-data --budget-s 500 --out $OUT/throughput_rl_h100.md
CPU (development; Triton in its interpreter):
    python -m benchmarks.throughput --workload rl --device cpu --budget-s 900 --out FILE.md
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import date, datetime
from pathlib import Path

from benchmarks.host_sched import SchedSampler

REPO = Path(__file__).resolve().parents[1]
KEY = "throughput-key"
DEFAULT_CORPUS = REPO.parent / "shared" / "corpora" / "kernelbench-sft"
WORKLOADS = ("rl", "rl-again", "distinct", "triton-warm")
# Library problems whose Triton candidates take seconds, not minutes, in the CPU interpreter.
CPU_PROBLEMS = ("elementwise", "silu", "softmax", "reduction", "mean_max", "layernorm")
# CPU runs shorten the timing so that the interpreter's candidates stay within the budget.
CPU_OPTIONS = {"trials": 3, "timing_budget_s": 0.5}
SPEEDUP_TOLERANCE = 0.05
WRONG_SUFFIX = '''


class _BenchmarkWrong(ModelNew):
    """A wrong variant made by the throughput benchmark: the candidate's own output, slightly off."""

    def forward(self, *args):
        return super().forward(*args) * 1.01 + 0.01


ModelNew = _BenchmarkWrong
'''


@dataclass(frozen=True)
class Pair:
    name: str  # unique per job: problem/kind#slot
    problem: str
    reference: str
    candidate: str
    honest: bool

    @property
    def source_key(self) -> tuple[str, str]:
        return (self.reference, self.candidate)


@dataclass
class Outcome:
    verdict: str
    speedup: float | None = None
    latency_s: float | None = None
    stages: dict = field(default_factory=dict)
    reference_cache: str | None = None
    reference_judge: str | None = None  # how the job got its judge: started ahead, waited, or why it started one
    candidate_cpu_s: float | None = None  # the candidate sandbox's host CPU seconds (its warm start and the job)
    runner_start_cpu_s: dict | None = None  # of which its runner's warm start, by part (result.extra)
    candidate_run_s: dict | None = None  # the `candidate` stage's wall seconds by part (result.extra)
    cuda_sync_wait: str | None = None  # how the judge's CUDA waited for the device (result.environment)
    compile_baseline: str | None = None
    error: str | None = None  # the verdict's reason, when it has one
    device_wait_s: float | None = None  # waits for the device's hold (result.extra.device_wait_s)
    timing_wait_s: float | None = None  # of which waiting to time alone (result.extra.timing_wait_s)
    # Seconds from the batch's first submit to the job's claim, prepared (built), first device stage, verdict.
    timeline: dict = field(default_factory=dict)
    # How many timed calls each side ran (result.extra.timing_runs), where the job was timed.
    timing_runs: dict | None = None
    # Where the start of the judge it started (or was the first to use) went (result.extra.judge_start).
    judge_start: dict | None = None
    judge_lost: str | None = None  # why the judge it shared could not serve it (it ran again with another)
    gpu: int | None = None  # the host GPU that ran it (result.environment.gpu_index): a lane, on several GPUs
    # Each rule that fired, with its evidence (result.rules): why a sample was rejected or flagged.
    rules: list[str] = field(default_factory=list)
    # A first timing window that failed the clock check and was measured again (result.extra.clock_check_retried).
    clock_check_retried: dict | None = None
    # The window's two sides (result.timing): which one moved when a speedup does not repeat.
    timed: dict | None = None


def timed_summary(timing) -> dict | None:
    """The medians of both sides, the interval, the pairs, the supervisor's per-call time of a timing report, and
    each side's host time per call to queue its blocks (a launch-bound side's samples follow its host)."""
    if timing is None:
        return None
    return {"reference_ms": timing.reference.median_ms, "candidate_ms": timing.candidate.median_ms,
            "speedup_ci95": list(timing.speedup_ci95), "pairs": timing.pairs,
            "candidate_host_ms": timing.candidate_host_median_ms, "reference_queue_ms": timing.reference_queue_ms,
            "candidate_queue_ms": timing.candidate_queue_ms}


@dataclass
class Phase:
    workload: str
    path: str
    jobs: int = 0
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    wall_s: float = 0.0
    busy: str = "n/a"
    note: str = ""
    server_finished: int | None = None  # the same jobs finished by the server's own store
    gpus: int = 1  # GPUs the service used (evaluations per GPU-hour divide by it)
    count_error: str | None = None  # set when the benchmark read fewer finished jobs than the server holds
    sched: str = ""  # the host's CPU and run-queue seconds by class of thread over the batch (host_sched)

    def per_hour(self, gpus: int = 1) -> float:
        return len(self.outcomes) / self.wall_s * 3600 / max(gpus, 1) if self.wall_s > 0 else 0.0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


# ---- workloads -------------------------------------------------------------------------------

def _variants(bases: list[tuple[str, str, bool]], slots: int, problem: str, reference: str) -> list[Pair]:
    """`slots` jobs of one problem from its distinct candidates: each once, then exact duplicates and
    distinct samples of the same candidate (a comment line: a new source, the same kernels)."""
    pairs = []
    for slot in range(slots):
        kind, source, honest = bases[slot % len(bases)]
        if slot >= len(bases) and slot % 3 != 0:
            source = f"# sample {slot}\n{source}"
        pairs.append(Pair(f"{problem}/{kind}#{slot}", problem, reference, source, honest))
    return pairs


def library_problems(device: str, names: list[str] | None, count: int):
    from problem_library.catalog import load_library

    problems = [p for p in load_library() if names is None or p.name in names]
    if device == "cpu" and names is None:
        problems = [p for p in problems if p.name in CPU_PROBLEMS]
    return problems[:count]


def corpus_rows(corpus: Path) -> list[tuple[str, str, str]]:
    """(id, reference, candidate) of the shared corpus, read at run time."""
    rows = []
    for line in (corpus / "MANIFEST.tsv").read_text().splitlines()[1:]:
        ident, cand_file, problem = line.split("\t")[:3]
        rows.append((ident, (corpus / "problems" / f"{problem}.py").read_text(), (corpus / cand_file).read_text()))
    return rows


def rl_pairs(device: str, corpus: Path | None, problems: int, per_problem: int, library_share: float,
             names: list[str] | None) -> list[Pair]:
    from_library = problems if (device == "cpu" or corpus is None) else max(1, round(problems * library_share))
    pairs: list[Pair] = []
    for problem in library_problems(device, names, from_library):
        reference = problem.reference_for_cpu() if device == "cpu" else problem.reference
        kinds = [k for k in ("triton_ok", "triton_wrong", "cuda_ok", "cuda_wrong")
                 if k in problem.candidates and (device == "cuda" or k.startswith("triton"))]
        bases = [(k, problem.candidates[k], k.endswith("_ok")) for k in kinds]
        pairs += _variants(bases, per_problem, problem.name, reference)
    if device == "cuda" and corpus is not None:
        rows = corpus_rows(corpus)
        wanted = problems - len({p.problem for p in pairs})
        step = max(1, len(rows) // max(wanted, 1))
        for ident, reference, candidate in rows[::step][:wanted]:
            bases = [("cuda", candidate, True), ("cuda_wrong", candidate + WRONG_SUFFIX, False)]
            pairs += _variants(bases, per_problem, ident, reference)
    return pairs


def distinct_pairs(device: str, corpus: Path | None, count: int | None) -> list[Pair]:
    if device == "cuda":
        if corpus is None:
            raise SystemExit("--workload distinct on cuda reads the shared corpus: give --corpus")
        rows = corpus_rows(corpus)
        return [Pair(f"{i}/cuda#0", i, ref, cand, True) for i, ref, cand in rows[:count]]
    return [Pair(f"{p.name}/triton_ok#0", p.name, p.reference_for_cpu(), p.candidates["triton_ok"], True)
            for p in library_problems(device, None, count or 99)]


# ---- GPU busy -------------------------------------------------------------------------------

def host_cpu_times() -> tuple[float, float] | None:
    """(busy, total) jiffies of every core since boot, from /proc/stat; None where there is none."""
    try:
        fields = [float(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError, IndexError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


class BusySampler:
    """GPU utilisation and memory of every visible GPU while running (one `nvidia-smi -lms` stream);
    'n/a' on CPU. Busy is nvidia-smi's utilization.gpu: the share of time a kernel was running. Beside it,
    the host's cores' busy share over the same time (a lane can be bound by its host, not its GPU)."""

    def __init__(self, device: str):
        self._cpu_start = host_cpu_times()
        self.busy: dict[int, list[float]] = {}
        self.memory_peak: dict[int, float] = {}  # highest used / total seen, per GPU
        smi = shutil.which("nvidia-smi") if device == "cuda" else None
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        self._cmd = [smi, "--query-gpu=index,utilization.gpu,memory.used,memory.total",
                     "--format=csv,noheader,nounits", "-lms", "500",
                     *(["-i", visible] if visible else [])] if smi else None
        self._proc: subprocess.Popen | None = None
        self._thread = threading.Thread(target=self._read, daemon=True)

    def __enter__(self) -> BusySampler:
        if self._cmd is not None:
            self._proc = subprocess.Popen(self._cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None:
            self._proc.terminate()
            self._proc.wait(15)
            self._thread.join(15)

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            try:
                index, busy, used, total = (float(x) for x in line.split(","))
            except ValueError:
                continue
            self.busy.setdefault(int(index), []).append(busy)
            self.memory_peak[int(index)] = max(self.memory_peak.get(int(index), 0.0), used / total if total else 0.0)

    @property
    def gpus(self) -> int:
        return max(len(self.busy), 1)

    def host_cpu_share(self) -> float | None:
        """The host's cores' busy share since this sampler started."""
        now = host_cpu_times()
        if now is None or self._cpu_start is None or now[1] <= self._cpu_start[1]:
            return None
        return (now[0] - self._cpu_start[0]) / (now[1] - self._cpu_start[1])

    def summary(self) -> str:
        cpu = self.host_cpu_share()
        host = f"host cores {100 * cpu:.0f}%" if cpu is not None else ""
        if not self.busy:
            return host or "n/a"
        per_gpu = [f"{statistics.fmean(v):.0f}%" for _, v in sorted(self.busy.items())]
        peak = max(self.memory_peak.values(), default=0.0)
        return f"{' / '.join(per_gpu)} (memory peak {100 * peak:.0f}%" + (f"; {host})" if host else ")")


class StoreWatcher:
    """Beside a batch: the server's store read with sqlite every `every_s` (a log line each), and, when
    nothing finished for `stall_s` while jobs remain, `kill -USR1` of the server (its threads' stacks go
    to its log). What the server's own store says, independent of the benchmark's client."""

    def __init__(self, database: Path, pid: int, log_path: Path | None, every_s: float = 20.0, stall_s: float = 120.0):
        self.database, self.pid, self.log_path = database, pid, log_path
        self.every_s, self.stall_s = every_s, stall_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self.lines: list[str] = []
        self.dumps = 0

    def __enter__(self) -> StoreWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _loop(self) -> None:
        import sqlite3

        started = time.monotonic()
        last_done, last_change = -1, time.monotonic()
        while not self._stop.wait(self.every_s):
            try:
                with sqlite3.connect(self.database, timeout=10) as connection:
                    counts = dict(connection.execute("SELECT status, count(*) FROM jobs GROUP BY status").fetchall())
            except sqlite3.Error as exc:
                counts = {"unreadable": str(exc)}
            line = f"{time.monotonic() - started:6.0f} s  store: {json.dumps(counts, sort_keys=True)}"
            self.lines.append(line)
            if self.log_path is not None:
                with open(self.log_path, "a") as handle:
                    handle.write(line + "\n")
            done = sum(v for k, v in counts.items() if k in ("done", "failed", "cancelled") and isinstance(v, int))
            open_jobs = sum(v for k, v in counts.items() if k in ("queued", "building", "running") and isinstance(v, int))
            if done != last_done:
                last_done, last_change = done, time.monotonic()
            elif open_jobs and time.monotonic() - last_change > self.stall_s:
                try:
                    os.kill(self.pid, signal.SIGUSR1)
                    self.dumps += 1
                except ProcessLookupError:
                    return
                last_change = time.monotonic()


# ---- the service ----------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Service:
    """`kerneljudge serve` (and, for Celery, `kerneljudge worker`) as subprocesses on one data directory."""

    def __init__(self, device: str, data_dir: Path, broker: str | None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = dict(os.environ, KERNELJUDGE_API_KEYS=KEY, KERNELJUDGE_DATA_DIR=str(data_dir),
                   KERNELJUDGE_RATE_LIMIT="0", KERNELJUDGE_MAX_ACTIVE_PER_KEY="1000000",
                   KERNELJUDGE_MAX_QUEUE="1000000")
        self.database = data_dir / f"{'celery' if broker else 'embedded'}.db"
        env["KERNELJUDGE_DATABASE_URL"] = f"sqlite:///{self.database}"
        cli = [sys.executable, "-m", "kerneljudge.cli"]
        # KJ_BENCH_SERVER_LOG=FILE: the servers' log at info level goes there (appended), not to this terminal.
        log_path = os.environ.get("KJ_BENCH_SERVER_LOG")
        self.log_path = Path(log_path) if log_path else None
        level = "info" if log_path else "warning"
        self._log = open(log_path, "a") if log_path else None  # noqa: SIM115 - open for the servers' lives
        serve = [*cli, "serve", "--port", str(self.port), "--device", device, "--log-level", level]
        self.procs: list[subprocess.Popen] = []
        if broker:
            serve += ["--broker", broker]
            self.procs.append(subprocess.Popen([*cli, "worker", "--broker", broker, "--device", device,
                                                "--loglevel", level.upper()], cwd=REPO, env=env,
                                               start_new_session=True, stdout=self._log, stderr=self._log))
        self.procs.append(subprocess.Popen(serve, cwd=REPO, env=env, start_new_session=True, stdout=self._log,
                                           stderr=self._log))
        self.server_pid = self.procs[-1].pid
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
            time.sleep(0.2)  # polling a server that is starting: nothing to wait on but its port
        raise RuntimeError("the service did not become ready within 180 s")

    def finished_in_store(self, job_ids: list[str]) -> int:
        """How many of `job_ids` the server's own store holds as finished (read with sqlite, beside it)."""
        import sqlite3

        marks = ",".join("?" * len(job_ids))
        with sqlite3.connect(self.database, timeout=30) as connection:
            (count,) = connection.execute(
                f"SELECT count(*) FROM jobs WHERE id IN ({marks}) AND status IN ('done', 'failed', 'cancelled')",
                job_ids).fetchone()
        return int(count)

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
        if self._log is not None:
            self._log.close()


def server_samples(url: str, family_name: str, label: str, suffix: str = "") -> dict[str, float]:
    """One metric family of the server's /metrics, by `label` (its samples named with `suffix`, e.g.
    `_total` for a counter); {} when the server has none (GPU metrics on CPU)."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"{url}/metrics", timeout=30).text
    for family in text_string_to_metric_families(text):
        if family.name == family_name:
            return {s.labels[label]: s.value for s in family.samples if s.name == family_name + suffix}
    return {}


def server_gpu_busy_s(url: str) -> dict[str, float]:
    """The server's own busy seconds per GPU (kerneljudge_gpu_busy_seconds); {} on CPU."""
    return server_samples(url, "kerneljudge_gpu_busy_seconds", "gpu", suffix="_total")


def cancel_queued(client, job_ids: list[str]) -> int:
    """Cancel what is still queued when the budget ends (a running job finishes); how many were cancelled.
    Left queued, they ran first in the next phase on the same data dir (rl-again counted 0 of 128)."""
    from kerneljudge.errors import ApiError

    cancelled = 0
    for job_id in job_ids:
        try:
            cancelled += client.cancel(job_id).status.value == "cancelled"
        except ApiError:
            pass  # started meanwhile: only queued jobs cancel
    return cancelled


def outcome_of(job, origin=None) -> Outcome:
    """What the client read of a job: its verdict, speedup, latency, stages and, from `origin` (the batch's
    first submit), its timeline."""
    if job.result is None:
        return Outcome(verdict=f"job {job.status.value}")
    result = job.result
    latency = (job.finished_at - job.created_at).total_seconds() if job.finished_at else None
    compile_info = result.extra.compile_baseline
    error = f"{result.error.kind}: {result.error.message[:400]}" if result.error else None
    if result.error and result.error.log_excerpt:  # why a sandbox died, where it said
        error += f" | output: {result.error.log_excerpt[-600:]}"
    moments = {"claimed": job.building_at, "built": job.built_at, "running": job.running_at,
               "finished": job.finished_at}
    timeline = {name: round((at - origin).total_seconds(), 2) for name, at in moments.items()
                if at is not None and origin is not None}
    return Outcome(verdict=result.status.value, speedup=result.speedup, latency_s=latency, stages=dict(result.stages),
                   error=error, device_wait_s=result.extra.device_wait_s,
                   timing_wait_s=result.extra.timing_wait_s, timeline=timeline,
                   reference_cache=result.extra.reference_cache, reference_judge=result.extra.reference_judge,
                   candidate_cpu_s=result.extra.candidate_cpu_s, runner_start_cpu_s=result.extra.runner_start_cpu_s,
                   candidate_run_s=result.extra.candidate_run_s,
                   timing_runs=result.extra.timing_runs.model_dump() if result.extra.timing_runs else None,
                   judge_start=result.extra.judge_start.model_dump() if result.extra.judge_start else None,
                   judge_lost=result.extra.judge_lost,
                   compile_baseline=compile_info.get("state") if isinstance(compile_info, dict) else None,
                   gpu=result.environment.gpu_index if result.environment else None,
                   cuda_sync_wait=result.environment.cuda_sync_wait if result.environment else None,
                   rules=[f"{hit.rule} ({hit.severity}): {hit.evidence or hit.message}"[:1500] for hit in result.rules],
                   clock_check_retried=retried.model_dump() if (retried := result.extra.clock_check_retried) else None,
                   timed=timed_summary(result.timing))


def run_batch(phase: Phase, pairs: list[Pair], device: str, options: dict, data_dir: Path, deadline: float,
              broker: str | None, seed: int, progress, baseline_until: float = 0.0) -> None:
    """Submit every pair at once, in shuffled order, and collect the verdicts until `deadline`; then check
    the count against the server's own store (a benchmark that miscounts fails loudly)."""
    from kerneljudge.client import KernelJudgeClient

    order = list(pairs)
    random.Random(seed).shuffle(order)
    phase.jobs = len(order)
    service = Service(device, data_dir, broker)
    try:
        with KernelJudgeClient(service.url, KEY, timeout=600) as client, BusySampler(device) as busy, \
                StoreWatcher(service.database, service.server_pid, service.log_path) as watch, \
                SchedSampler(service.server_pid) as sched:
            busy_before = server_gpu_busy_s(service.url)
            entries = client.submit_many([{"reference": p.reference, "candidate": p.candidate,
                                           "options": {**options, "device": device}} for p in order])
            ids = {entry.job.id: pair.name for entry, pair in zip(entries, order, strict=True) if entry.job}
            first_submit = min(entry.job.created_at for entry in entries if entry.job)

            def record(jobs) -> list[str]:
                for job in jobs:
                    if job.finished and ids[job.id] not in phase.outcomes:
                        phase.outcomes[ids[job.id]] = outcome_of(job, first_submit)
                        phase.wall_s = max(phase.wall_s, (job.finished_at - first_submit).total_seconds())
                return [job.id for job in jobs if not job.finished]

            pending = list(ids)
            while pending and time.monotonic() < deadline:
                # wait_many returns every job's latest state at its timeout (it never raises for it).
                pending = record(client.wait_many(pending, timeout=min(60.0, max(0.0, deadline - time.monotonic()))))
                phase.busy = busy.summary()
                phase.note = f"{len(phase.outcomes)} of {phase.jobs} finished" + (" (still running)" if pending else "")
                progress()
            phase.server_finished = service.finished_in_store(list(ids))
            busy_after = server_gpu_busy_s(service.url)
            phase.gpus = busy.gpus if device == "cuda" else 1
            if watch.dumps:
                phase.note += f" (stalled: {watch.dumps} stack dump(s) in the server log)"
            left = record(client.get_many(list(ids)))  # read after the server's count: ours can only be larger
            cancelled = cancel_queued(client, left)
        phase.sched = sched.summary()
        phase.busy = busy.summary()
        if busy_after and phase.wall_s > 0:  # the server's own measure over the batch
            busy_s = sum(busy_after[g] - busy_before.get(g, 0.0) for g in busy_after)
            phase.busy += f"; server: {100 * busy_s / (phase.wall_s * len(busy_after)):.0f}%"
        phase.note = "" if len(phase.outcomes) == phase.jobs else \
            f"budget spent: {len(phase.outcomes)} of {phase.jobs} finished"
        if cancelled:
            phase.note += f" ({cancelled} queued jobs cancelled at the budget, so that a later run starts clean)"
        if len(phase.outcomes) < phase.server_finished:
            phase.count_error = (f"COUNT MISMATCH: the server's store says {phase.server_finished} of these jobs "
                                 f"finished, the benchmark read {len(phase.outcomes)}")
        if baseline_until > time.monotonic():
            phase.note += " " + wait_for_baselines(service.database, {p.reference for p in pairs},
                                                   baseline_until - time.monotonic())
    finally:
        service.stop()


def wait_for_baselines(database: Path, references: set[str], limit_s: float) -> str:
    """After the batch (outside its wall time): let the service measure the compile baselines it deferred
    while the batch ran (baseline_worker: once the lane is quiet), so that a later run finds them."""
    import hashlib
    import sqlite3

    wanted = {hashlib.sha256(ref.encode()).hexdigest() for ref in references}
    deadline = time.monotonic() + limit_s
    found: set[str] = set()
    while time.monotonic() < deadline and found != wanted:
        try:
            with sqlite3.connect(database, timeout=10) as connection:
                found = {row[0] for row in connection.execute(
                    "SELECT reference_sha256 FROM baselines WHERE kind = 'compile_baseline'")} & wanted
        except sqlite3.Error:
            pass  # the table appears with the service's store
        time.sleep(2.0)  # polling another process's database: nothing to wait on
    return f"(compile baselines persisted after the batch: {len(found)} of {len(wanted)} problems)"


def run_triton_warm(phase: Phase, device: str, data_dir: Path, count: int, deadline: float, progress) -> None:
    """One registered problem, warmed by a first job, then `count` Triton jobs one at a time."""
    from kerneljudge.client import KernelJudgeClient

    if device == "cpu":
        from tests.service.sources import REFERENCE as reference
        from tests.service.sources import TRITON_CANDIDATE as candidate
        options = dict(CPU_OPTIONS)
    else:
        from problem_library.catalog import get_problem

        problem = get_problem("softmax")
        reference, candidate, options = problem.reference, problem.candidates["triton_ok"], {}
    phase.jobs = count
    service = Service(device, data_dir, None)
    try:
        with KernelJudgeClient(service.url, KEY, timeout=600) as client:
            problem_id = client.register_problem(reference).id
            for i in range(count + 1):  # the first one warms the problem's judge and is not counted
                if time.monotonic() > deadline:
                    phase.note = f"budget spent after {len(phase.outcomes)} of {count}"
                    break
                started = time.monotonic()
                job = client.submit_and_wait(problem_id=problem_id, candidate=f"# sample {i}\n{candidate}",
                                             options={**options, "device": device}, timeout=300)
                elapsed = time.monotonic() - started
                if i == 0:
                    continue
                outcome = outcome_of(job)
                outcome.latency_s = elapsed
                phase.outcomes[f"triton#{i}"] = outcome
                phase.wall_s += elapsed
                progress()
    finally:
        service.stop()


# ---- the serial path ------------------------------------------------------------------------

def run_serial(phase: Phase, pairs: list[Pair], device: str, options: dict, deadline: float, progress) -> None:
    """Every distinct pair prepared first (builds in parallel, untimed), then executed one at a time (timed):
    the serial evaluator with its builds done beforehand. The compile baseline is off here (a serial
    evaluator does not compile the reference; the comparison is of verdicts and eager speedups)."""
    from contract.requests import EvalRequest
    from contract.results import EvalResult
    from worker import engine
    from worker.engine.build.pool import build_slots
    from worker.engine.engine_settings import EngineSettings

    settings = EngineSettings.configured()
    settings.compile_baseline = False
    by_source: dict[tuple[str, str], list[Pair]] = {}
    for pair in pairs:
        by_source.setdefault(pair.source_key, []).append(pair)
    # One of each problem first, so that a budget cut leaves every problem compared.
    order: list[tuple[str, str]] = []
    per_problem: dict[str, list[tuple[str, str]]] = {}
    for key, group in by_source.items():
        per_problem.setdefault(group[0].problem, []).append(key)
    while any(per_problem.values()):
        for keys in per_problem.values():
            if keys:
                order.append(keys.pop(0))
    phase.jobs = len(pairs)

    def prepare(key: tuple[str, str]):
        request = EvalRequest(reference=key[0], candidate=key[1], options={**options, "device": device})
        return engine.prepare(request, settings=settings)

    with ThreadPoolExecutor(build_slots(settings)) as pool:
        prepared = dict(zip(order, pool.map(prepare, order), strict=True))
    with BusySampler(device) as busy:
        for key in order:
            if time.monotonic() > deadline:
                phase.note = f"budget spent: {len(phase.outcomes)} of {len(pairs)} jobs compared"
                break
            ready = prepared[key]
            started = time.monotonic()
            result = ready if isinstance(ready, EvalResult) else engine.execute(ready, settings=settings)
            elapsed = time.monotonic() - started
            phase.wall_s += elapsed
            for pair in by_source[key]:
                phase.outcomes[pair.name] = Outcome(verdict=result.status.value, speedup=result.speedup,
                                                    latency_s=elapsed, stages=dict(result.stages))
            phase.busy = busy.summary()
            progress()
    for ready in prepared.values():
        if not isinstance(ready, EvalResult):
            ready.discard()


# ---- report ---------------------------------------------------------------------------------

@dataclass
class Agreement:
    compared: int = 0
    same_verdict: int = 0
    honest_timed: int = 0
    speedup_within: int = 0
    mismatches: list[str] = field(default_factory=list)


def agreement(service: Phase, serial: Phase, pairs: list[Pair]) -> Agreement:
    honest = {p.name for p in pairs if p.honest}
    found = Agreement()
    for name, outcome in sorted(service.outcomes.items()):
        other = serial.outcomes.get(name)
        if other is None:
            continue
        found.compared += 1
        if outcome.verdict == other.verdict:
            found.same_verdict += 1
        else:
            found.mismatches.append(f"{name}: service {outcome.verdict}, serial {other.verdict}")
        if name in honest and outcome.verdict == other.verdict == "ok" and outcome.speedup and other.speedup:
            found.honest_timed += 1
            if abs(outcome.speedup / other.speedup - 1) <= SPEEDUP_TOLERANCE:
                found.speedup_within += 1
            else:
                found.mismatches.append(f"{name}: speedup service {outcome.speedup:.3f}, serial {other.speedup:.3f}")
    return found


def judges_line(phase: Phase) -> str | None:
    """How many judges the batch's jobs started, and what became of them (a job that started one, or was the
    first a judge started ahead served, says so in `judge_start`); None where no job said."""
    starts = [o for o in phase.outcomes.values() if o.judge_start]
    lost = sum(1 for o in phase.outcomes.values() if o.judge_lost)
    if not starts and not lost:
        return None
    ahead = sum(1 for o in starts if (o.reference_judge or "").startswith("started ahead"))
    cpu = [o.judge_start["cpu_s"] for o in starts if o.judge_start.get("cpu_s") is not None]
    cpu_text = f", {sum(cpu):.0f} CPU s in their starts ({len(cpu)} measured)" if cpu else ""
    return (f"Judges during {phase.workload} ({phase.path}): {len(starts)} started ({ahead} ahead of their jobs, "
            f"{len(starts) - ahead} by a job){cpu_text}; {lost} job(s) lost a shared judge and ran again.")


def _part_medians(parts: list[dict]) -> str:
    """"name median, ..." over reports of seconds by part, in the order the parts first appear."""
    names = list(dict.fromkeys(name for part in parts for name in part))
    return ", ".join(f"{name} {statistics.median(p[name] for p in parts if name in p):.2f}" for name in names)


def candidate_run_line(phase: Phase) -> str | None:
    """Where the `candidate` stage's wall time went: the median of each part its runners reported, beside the
    stage's own median; None where no job said."""
    runs = [o for o in phase.outcomes.values() if o.candidate_run_s]
    if not runs:
        return None
    stage = [o.stages["candidate"] for o in runs if "candidate" in o.stages]
    whole = f"; the stage, median {statistics.median(stage):.2f}" if stage else ""
    return (f"The candidate stage during {phase.workload} ({phase.path}), median wall s by part over {len(runs)} "
            f"jobs: {_part_medians([o.candidate_run_s for o in runs if o.candidate_run_s])}{whole}.")


def starts_line(phase: Phase) -> str | None:
    """Where the sandboxes' starts spent the host's CPU: the median CPU seconds of each part of a candidate
    runner's warm start and of a judge's (as each reported them before any user code), beside the median of
    each whole; None where no job said."""
    runners = [o.runner_start_cpu_s for o in phase.outcomes.values() if o.runner_start_cpu_s]
    judges = [o.judge_start for o in phase.outcomes.values() if o.judge_start and o.judge_start.get("start_cpu_s")]
    if not runners and not judges:
        return None
    texts = []
    if runners:
        whole = [o.candidate_cpu_s for o in phase.outcomes.values() if o.runner_start_cpu_s and o.candidate_cpu_s]
        texts.append(f"{len(runners)} candidate runners ({_part_medians(runners)}"
                     + (f"; the whole sandbox, job included, {statistics.median(whole):.2f}" if whole else "") + ")")
    if judges:
        launch = [j["launch_cpu_s"] for j in judges if j.get("launch_cpu_s") is not None]
        whole = [j["cpu_s"] for j in judges if j.get("cpu_s") is not None]
        texts.append(f"{len(judges)} judges ({_part_medians([j['start_cpu_s'] for j in judges])}"
                     + (f"; to the reference imported, {statistics.median(launch):.2f}" if launch else "")
                     + (f"; the whole start, {statistics.median(whole):.2f}" if whole else "") + ")")
    return (f"Sandbox starts during {phase.workload} ({phase.path}), median CPU s by part: " + "; ".join(texts)
            + ".")


def pace_line(phase: Phase) -> str | None:
    """The batch's pace once it was under way: verdicts per hour from its tenth percentile of finish times to its
    last, beside the whole-window rate of the table. The first verdicts of a batch wait for the server's warm-up,
    the first builds and the judges' starts, a fixed delay that weighs more the faster the service is (on two
    H200s the whole-window rate read 1.62x one GPU's, this pace 1.86x). None for fewer than ten."""
    finished = sorted(o.timeline["finished"] for o in phase.outcomes.values() if "finished" in o.timeline)
    if len(finished) < 10:
        return None
    start = math.ceil(0.1 * len(finished))
    span = finished[-1] - finished[start]
    if span <= 0:
        return None
    per_hour = (len(finished) - 1 - start) / span * 3600
    gpus = max(phase.gpus, 1)
    return (f"Pace during {phase.workload} ({phase.path}): the first verdict at {finished[0]:.1f} s, the tenth "
            f"percentile at {finished[start]:.1f} s, the last at {finished[-1]:.1f} s; from the tenth percentile "
            f"on, {per_hour:.0f} verdicts an hour, {per_hour / gpus:.0f} per GPU-hour ({gpus} GPU"
            f"{'s' if gpus > 1 else ''}).")


def row(phase: Phase, found: Agreement | None) -> str:
    latencies = [o.latency_s for o in phase.outcomes.values() if o.latency_s is not None]
    stages: dict[str, list[float]] = {}
    for outcome in phase.outcomes.values():
        for name, seconds in outcome.stages.items():
            stages.setdefault(name, []).append(seconds)
    stage_text = ", ".join(f"{name} {statistics.median(v):.2f}" for name, v in sorted(stages.items()))
    cache = Counter(o.reference_cache for o in phase.outcomes.values() if o.reference_cache)
    compile_states = Counter(o.compile_baseline for o in phase.outcomes.values() if o.compile_baseline)
    cache_text = f"{cache.get('hit', 0)} / {cache.get('miss', 0)}" if cache else ""
    compile_text = ", ".join(f"{k} {v}" for k, v in sorted(compile_states.items()))
    agree = speed = ""
    if found is not None and found.compared:
        agree = f"{found.same_verdict}/{found.compared}"
        speed = f"{found.speedup_within}/{found.honest_timed}" if found.honest_timed else ""
    server = "" if phase.server_finished is None else str(phase.server_finished)
    # While a job is in its "timing" stage it holds its GPU alone: this share of the GPUs' wall time caps the rate.
    alone_s = sum(o.stages.get("timing", 0.0) for o in phase.outcomes.values())
    alone = f"{100 * alone_s / (phase.wall_s * phase.gpus):.0f}%" if phase.wall_s > 0 and alone_s else ""
    note = f"**{phase.count_error}** {phase.note}" if phase.count_error else phase.note
    return (f"| {phase.workload} | {phase.path} | {len(phase.outcomes)}/{phase.jobs} | {server} | "
            f"{phase.per_hour(phase.gpus):.0f} ({phase.gpus} GPU{'s' if phase.gpus > 1 else ''}) | "
            f"{percentile(latencies, 0.5):.2f} | {percentile(latencies, 0.95):.2f} | {cache_text} | {compile_text} | "
            f"{phase.busy} | {alone} | {agree} | {speed} | {stage_text} | {note} |")


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


class Report:
    """The markdown table (and the per-job JSON lines), rewritten at every change."""

    HEADER = ("| workload | path | finished | server's count | evals / GPU-hour | p50 s | p95 s | ref cache hit / miss | compile "
              "baseline | GPU busy | held alone (timing) | verdicts = serial | speedups within 5% | median stage s | note |")

    def __init__(self, args: argparse.Namespace, argv: list[str]) -> None:
        self.args = args
        self.started = time.monotonic()
        self.lines = [f"# Throughput: {args.workload} ({date.today().isoformat()})", "",
                      f"- device: {device_name(args.device)}; host {socket.gethostname()}, {os.cpu_count()} cores",
                      f"- commit: {git_commit()}",
                      f"- command: `python -m benchmarks.throughput {' '.join(argv)}`",
                      f"- started: {datetime.now().isoformat(timespec='seconds')}; budget {args.budget_s:.0f} s"]
        self.notes: list[str] = []
        self.phases: list[tuple[Phase, Agreement | None]] = []
        self.mismatches: list[str] = []
        self.lock = threading.Lock()

    def write(self, final: bool = False) -> None:
        with self.lock:
            lines = [*self.lines, *[f"- {n}" for n in self.notes], "", self.HEADER,
                     "|" + "---|" * (self.HEADER.count("|") - 1),
                     *[row(phase, found) for phase, found in self.phases], ""]
            for phase, _ in self.phases:
                if (pace := pace_line(phase)) is not None:
                    lines += [pace, ""]
                if (judges := judges_line(phase)) is not None:
                    lines += [judges, ""]
                if (starts := starts_line(phase)) is not None:
                    lines += [starts, ""]
                if (run := candidate_run_line(phase)) is not None:
                    lines += [run, ""]
                if phase.sched:
                    lines += [f"Host threads during {phase.workload} ({phase.path}), by class (benchmarks/host_sched.py):",
                              phase.sched, ""]
            lines += ["Disagreements with the serial path: " + ("none" if not self.mismatches else ""),
                      *[f"- {m}" for m in self.mismatches], ""]
            lines.append(f"Elapsed: {time.monotonic() - self.started:.0f} s" + ("" if final else " (running)") + ".")
            text = "\n".join(lines) + "\n"
            if self.args.out:
                self.args.out.parent.mkdir(parents=True, exist_ok=True)
                self.args.out.write_text(text)
            if self.args.jsonl:
                with self.args.jsonl.open("w") as handle:
                    for phase, _ in self.phases:
                        for name, outcome in phase.outcomes.items():
                            handle.write(json.dumps({"workload": phase.workload, "path": phase.path, "pair": name,
                                                     **asdict(outcome)}) + "\n")
            if final:
                print(text)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m benchmarks.throughput", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", choices=WORKLOADS, required=True)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--corpus", type=Path, default=None, help="the shared corpus, read at run time")
    parser.add_argument("--problems", type=int, default=None, help="rl: problems (16 on cuda, 6 on cpu)")
    parser.add_argument("--per-problem", type=int, default=None, help="rl: candidates per problem (8 cuda, 4 cpu)")
    parser.add_argument("--library-share", type=float, default=0.625, help="rl on cuda: share of library problems")
    parser.add_argument("--names", default=None, help="comma-separated library problems to use")
    parser.add_argument("--count", type=int, default=None,
                        help="distinct: jobs (default 40 on cuda, every CPU problem on cpu); triton-warm: jobs (10)")
    parser.add_argument("--broker", default=None, help="redis://...: run the service with Celery workers")
    parser.add_argument("--no-serial", action="store_true", help="skip the serial engine comparison")
    parser.add_argument("--budget-s", type=float, default=500.0, help="the whole run, service and serial")
    parser.add_argument("--service-share", type=float, default=0.7, help="of the budget, for the service phase")
    parser.add_argument("--seed", type=int, default=16, help="submission order")
    parser.add_argument("--baseline-wait-s", type=float, default=None,
                        help="after the batch, let the service persist the compile baselines it deferred (not in the "
                             "wall time; default 120 on cuda for rl, else 0)")
    parser.add_argument("--data-dir", type=Path, default=None, help="builds, store and baselines (rl-again reuses)")
    parser.add_argument("--out", type=Path, default=None, help="markdown table (rewritten as results come in)")
    parser.add_argument("--jsonl", type=Path, default=None, help="one JSON row per job")
    args = parser.parse_args(argv)
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    started = time.monotonic()
    deadline = started + args.budget_s
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="kj-throughput-"))
    data_dir.mkdir(parents=True, exist_ok=True)
    os.environ["KERNELJUDGE_DATA_DIR"] = str(data_dir.resolve())  # the serial engine shares the build cache
    options = dict(CPU_OPTIONS) if args.device == "cpu" else {}
    corpus = args.corpus if args.corpus is not None and args.corpus.exists() else None
    report = Report(args, argv)
    cuda = args.device == "cuda"
    names = args.names.split(",") if args.names else None
    if args.workload in ("rl", "rl-again"):
        pairs = rl_pairs(args.device, corpus, args.problems or (16 if cuda else 6),
                         args.per_problem or (8 if cuda else 4), args.library_share, names)
        kinds = Counter(p.name.split("/")[1].split("#")[0] for p in pairs)
        report.notes.append(f"{len(pairs)} jobs over {len({p.problem for p in pairs})} problems "
                            f"({', '.join(f'{k} {v}' for k, v in sorted(kinds.items()))}); "
                            f"{len(pairs) - len({p.source_key for p in pairs})} exact duplicates")
        if args.workload == "rl-again":
            seen = (data_dir / "embedded.db").exists()
            report.notes.append("the same batch, a fresh server process on a data dir that served it before"
                                if seen else "NOTE: the data dir has not served `rl` before: this is a cold run")
    elif args.workload == "distinct":
        pairs = distinct_pairs(args.device, corpus, args.count or (40 if cuda else None))
        report.notes.append(f"{len(pairs)} jobs, each a different problem")
    else:
        pairs = []
    if options:
        report.notes.append(f"options for every job (cpu): {options}")
    report.write()

    if args.workload == "triton-warm":
        phase = Phase(args.workload, "service, embedded: one at a time, warm problem")
        report.phases.append((phase, None))
        run_triton_warm(phase, args.device, data_dir, args.count or 10, deadline, report.write)
        latencies = [o.latency_s for o in phase.outcomes.values() if o.latency_s is not None]
        report.notes.append(f"submit->verdict p50 {percentile(latencies, 0.5):.2f} s over {len(latencies)} jobs")
        report.write(final=True)
        return 0

    service = Phase(args.workload, "service, Celery + Redis" if args.broker else "service, embedded")
    report.phases.append((service, None))
    service_deadline = started + args.budget_s * (args.service_share if not args.no_serial else 1.0)
    baseline_wait = args.baseline_wait_s if args.baseline_wait_s is not None else \
        (120.0 if cuda and args.workload == "rl" and not args.broker else 0.0)
    # At most until a quarter of the budget is left for the serial path.
    baseline_until = min(time.monotonic() + baseline_wait, deadline - 0.25 * args.budget_s) if baseline_wait else 0.0
    run_batch(service, pairs, args.device, options, data_dir, service_deadline, args.broker, args.seed, report.write,
              baseline_until)
    report.write()
    if not args.no_serial:
        serial = Phase(args.workload, "serial engine (builds done beforehand)")
        report.phases.append((serial, None))

        def compared() -> None:
            found = agreement(service, serial, pairs)
            report.phases[0] = (service, found)
            report.mismatches = found.mismatches
            report.write()

        run_serial(serial, pairs, args.device, options, deadline, compared)
        compared()
    report.write(final=True)
    if service.count_error:
        print(f"throughput: {service.count_error}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    raise SystemExit(main())
