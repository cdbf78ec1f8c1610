"""Soak: RL batches back to back against one service for a long time (issue 22: 20 minutes on the GPU, on
every GPU the host lends), and whether it stays up.

One `kerneljudge serve` (embedded workers, a fresh data dir) serves every round. Each round is the `rl`
batch of benchmarks/throughput.py (P problems x C samples, honest and wrong, exact duplicates, shuffled,
submitted at once), its candidates marked with the round's number, as a trainer's next step sends new
samples of the same problems: new sources, new builds, problems seen before. The next round is sent when
every job of this one is finished or its --round-limit-s passes (then it is sent anyway: a trainer does
not wait forever). No round starts after --duration-s; then the soak drains (--drain-s) and counts.

It passes when:
- no job is lost: every submitted job is finished in the server's own store at the end (read with sqlite
  beside it, not through the API), and the client read each one;
- no lane stalled: the server's watchdog never showed a stalled lane or restarted one (/metrics, sampled
  every --sample-s), and the store never went --stall-s without a job finishing while jobs were open
  (then the server's stacks go to its log: SIGUSR1);
- device memory never passed 90% of any card (nvidia-smi every 0.5 s, and the server's own peak).

The report (markdown, rewritten after every round and sample) has one row per round and the verdict; with
--jsonl, one JSON row per job. Exit status 0 when it passes, 3 when it does not.

A soak outlives one device call (10 minutes at most): benchmarks/run_device.sh `soak` starts it detached
(setsid) on the warm machine and waits, `soak-wait` waits for it again in the next call; its files stay on
that machine's disk until the last call copies them out.

    python -m benchmarks.soak --device cuda --corpus .carry/corpus --duration-s 1200 \\
        --data-dir data/soak --out data/soak-out/soak.md --jsonl data/soak-out/soak.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import date, datetime
from pathlib import Path

from benchmarks.throughput import (
    CPU_OPTIONS,
    KEY,
    BusySampler,
    Outcome,
    Pair,
    Service,
    StoreWatcher,
    device_name,
    git_commit,
    outcome_of,
    percentile,
    rl_pairs,
    server_samples,
)

MEMORY_LIMIT = 0.9  # of each card: what the service's memory admission must never pass (issue 22)
FINISHED = ("done", "failed", "cancelled")


@dataclass
class Round:
    number: int
    jobs: int = 0
    submitted_at: float = 0.0  # monotonic
    first_submit: datetime | None = None  # the server's creation time of its first job
    left_open: int = 0  # its jobs still open when its round limit (or the soak's duration) passed
    outcomes: dict[str, Outcome] = field(default_factory=dict)  # job id -> what the client read
    wall_s: float = 0.0  # first submit to last verdict of this round, by the server's clock

    def per_hour(self, gpus: int) -> float:
        return len(self.outcomes) / self.wall_s * 3600 / max(gpus, 1) if self.wall_s > 0 else 0.0


@dataclass
class LaneWatch:
    """What the server's /metrics said over the soak: its watchdog's view of the lanes and its memory peak."""

    samples: int = 0
    stalled_seen: dict[str, int] = field(default_factory=dict)  # lane -> samples in which it was stalled
    restarts: dict[str, float] = field(default_factory=dict)  # lane -> restarts counted by the server
    memory_peak: dict[str, float] = field(default_factory=dict)  # gpu -> highest used / total the server saw
    unreadable: int = 0

    def read(self, url: str) -> None:
        try:
            stalled = server_samples(url, "kerneljudge_lane_stalled", "lane")
            restarts = server_samples(url, "kerneljudge_lane_restarts", "lane", suffix="_total")
            peak = server_samples(url, "kerneljudge_gpu_memory_peak_ratio", "gpu")
        except Exception:  # noqa: BLE001 - a scrape that fails is counted, not fatal: the store still counts
            self.unreadable += 1
            return
        self.samples += 1
        for lane, value in stalled.items():
            self.stalled_seen[lane] = self.stalled_seen.get(lane, 0) + int(value > 0)
        self.restarts.update(restarts)
        for gpu, value in peak.items():
            self.memory_peak[gpu] = max(self.memory_peak.get(gpu, 0.0), value)


@dataclass
class Verdict:
    """The soak's pass/fail and why (what an operator reads first)."""

    lost: int
    stalls: int
    memory_peak: float
    problems: list[str]

    @property
    def passed(self) -> bool:
        return not self.problems


def judge_soak(submitted: int, finished_in_store: int, read_by_client: int, watch: LaneWatch, store_dumps: int,
               memory_peak: float) -> Verdict:
    """Pass or fail from what the server's store, its /metrics and nvidia-smi said (never from the client alone)."""
    problems = []
    lost = submitted - finished_in_store
    if lost:
        problems.append(f"{lost} of {submitted} jobs not finished in the server's store")
    if read_by_client < finished_in_store:
        problems.append(f"the client read {read_by_client} finished jobs, the store holds {finished_in_store}")
    stalled_lanes = sorted(lane for lane, count in watch.stalled_seen.items() if count)
    restarted = sorted(lane for lane, count in watch.restarts.items() if count)
    stalls = sum(watch.stalled_seen.values()) + int(sum(watch.restarts.values())) + store_dumps
    if stalled_lanes:
        problems.append(f"the watchdog showed a stalled lane ({', '.join(stalled_lanes)})")
    if restarted:
        problems.append(f"the watchdog restarted a lane ({', '.join(restarted)})")
    if store_dumps:
        problems.append(f"the store saw no job finish for the stall limit {store_dumps} time(s) (stacks in the "
                        f"server log)")
    if memory_peak > MEMORY_LIMIT:
        problems.append(f"device memory reached {100 * memory_peak:.1f}% of a card (limit {100 * MEMORY_LIMIT:.0f}%)")
    return Verdict(lost=lost, stalls=stalls, memory_peak=memory_peak, problems=problems)


def round_pairs(pairs: list[Pair], number: int, seed: int) -> list[Pair]:
    """This round's batch: every candidate a new sample (the round's mark on its first line; exact duplicates
    within the round stay duplicates), shuffled."""
    marked = [Pair(f"r{number}/{p.name}", p.problem, p.reference, f"# rl step {number}\n{p.candidate}", p.honest)
              for p in pairs]
    random.Random(seed + number).shuffle(marked)
    return marked


@dataclass(frozen=True)
class Repeats:
    """One candidate's runs over the soak's rounds (its samples in every round): do its verdicts and speedups
    repeat under a full batch (issue 23, section 4)?"""

    name: str  # the pair without its round and sample number: "softmax/triton_ok"
    verdicts: tuple[str, ...]  # distinct verdicts seen
    speedups: tuple[float, ...]
    reference_ms: tuple[float, ...]  # each timed run's two medians: which side moved
    candidate_ms: tuple[float, ...]

    @property
    def spread(self) -> float | None:
        """max / min - 1 of its speedups; None with fewer than two."""
        if len(self.speedups) < 2 or min(self.speedups) <= 0:
            return None
        return max(self.speedups) / min(self.speedups) - 1


def base_name(pair: str) -> str:
    """'r3/softmax/triton_ok#2' -> 'softmax/triton_ok'."""
    return pair.split("/", 1)[-1].split("#", 1)[0]


def repeats_of(rows: list[tuple[str, Outcome]]) -> list[Repeats]:
    """(pair name, outcome) of every job -> each candidate's runs, widest speedup spread first."""
    grouped: dict[str, list[Outcome]] = {}
    for pair, outcome in rows:
        grouped.setdefault(base_name(pair), []).append(outcome)
    found = []
    for name, outcomes in grouped.items():
        timed = [o for o in outcomes if o.speedup is not None]
        found.append(Repeats(name, tuple(sorted({o.verdict for o in outcomes})),
                             tuple(o.speedup for o in timed if o.speedup is not None),
                             tuple(o.timed["reference_ms"] for o in timed if o.timed),
                             tuple(o.timed["candidate_ms"] for o in timed if o.timed)))
    return sorted(found, key=lambda r: (-(r.spread or 0.0), r.name))


def _range(values: tuple[float, ...], digits: int) -> str:
    return f"{min(values):.{digits}f}-{max(values):.{digits}f}" if values else "n/a"


def repeats_table(repeats: list[Repeats]) -> list[str]:
    lines = ["## Repeats across rounds", "",
             "Each candidate's runs over every round: verdicts seen, and the spread of its speedups (max/min - 1); "
             "the two sides' medians say which one moved.", "",
             "| candidate | verdicts | timed runs | speedups | spread | reference ms | candidate ms |",
             "|---|---|---|---|---|---|---|"]
    for r in repeats:
        spread = f"{100 * r.spread:.1f}%" if r.spread is not None else "-"
        lines.append(f"| {r.name} | {', '.join(r.verdicts)} | {len(r.speedups)} | {_range(r.speedups, 3)} | "
                     f"{spread} | {_range(r.reference_ms, 4)} | {_range(r.candidate_ms, 4)} |")
    return [*lines, ""]


class Soak:
    def __init__(self, args: argparse.Namespace, argv: list[str]) -> None:
        self.args = args
        self.argv = argv
        self.rounds: list[Round] = []
        self.names: dict[str, str] = {}  # job id -> pair name
        self.round_of: dict[str, Round] = {}  # job id -> its round
        self.watch = LaneWatch()
        self.verdict: Verdict | None = None
        self.started = time.monotonic()
        self.started_at = datetime.now().isoformat(timespec="seconds")
        self.commit = git_commit()
        self.state = "starting"
        self.busy = "n/a"
        self.lock = threading.Lock()

    # -- report ------------------------------------------------------------------------------
    def _round_row(self, rnd: Round, gpus: int) -> str:
        latencies = [o.latency_s for o in rnd.outcomes.values() if o.latency_s is not None]
        verdicts = Counter(o.verdict for o in rnd.outcomes.values())
        verdict_text = ", ".join(f"{k} {v}" for k, v in sorted(verdicts.items()))
        return (f"| {rnd.number} | {rnd.jobs} | {rnd.left_open} | {len(rnd.outcomes)} | {rnd.wall_s:.0f} | "
                f"{rnd.per_hour(gpus):.0f} | "
                f"{percentile(latencies, 0.5):.1f} | {percentile(latencies, 0.95):.1f} | {verdict_text} |")

    def write(self, gpus: int = 1) -> None:
        args = self.args
        with self.lock:
            elapsed = time.monotonic() - self.started
            jobs = sum(r.jobs for r in self.rounds)
            finished = sum(len(r.outcomes) for r in self.rounds)
            lines = [f"# Soak ({date.today().isoformat()})", "",
                     f"- device: {device_name(args.device)}, {os.cpu_count()} cores",
                     f"- commit: {self.commit}",
                     f"- command: `python -m benchmarks.soak {' '.join(self.argv)}`",
                     f"- started {self.started_at}; {elapsed:.0f} s of {args.duration_s:.0f} s; state: {self.state}",
                     f"- {len(self.rounds)} round(s), {jobs} jobs submitted, {finished} read finished by the client",
                     f"- GPU busy (nvidia-smi, over the soak): {self.busy}",
                     f"- the server's /metrics: {self.watch.samples} samples ({self.watch.unreadable} unreadable); "
                     f"stalled-lane samples {sum(self.watch.stalled_seen.values())}, restarts "
                     f"{int(sum(self.watch.restarts.values()))}, memory peak "
                     + (", ".join(f"GPU {g} {100 * v:.0f}%" for g, v in sorted(self.watch.memory_peak.items()))
                        or "n/a"), ""]
            if self.verdict is not None:
                lines += [f"**{'PASS' if self.verdict.passed else 'FAIL'}**: {self.verdict.lost} lost, "
                          f"{self.verdict.stalls} stalls, device memory peak {100 * self.verdict.memory_peak:.0f}% "
                          f"(limit {100 * MEMORY_LIMIT:.0f}%)", *[f"- {p}" for p in self.verdict.problems], ""]
            lines += ["| round | jobs | open at its limit | finished | wall s | evals / GPU-hour | p50 s | p95 s | verdicts |",
                      "|---|---|---|---|---|---|---|---|---|", *[self._round_row(r, gpus) for r in self.rounds], ""]
            if self.state == "finished":
                lines += repeats_table(repeats_of([(self.names.get(job_id, job_id), outcome) for rnd in self.rounds
                                                   for job_id, outcome in rnd.outcomes.items()]))
            text = "\n".join(lines) + "\n"
            if args.out:
                args.out.parent.mkdir(parents=True, exist_ok=True)
                tmp = args.out.with_suffix(".tmp")
                tmp.write_text(text)
                tmp.replace(args.out)  # a reader in another call never sees half a report
            if args.jsonl:
                args.jsonl.parent.mkdir(parents=True, exist_ok=True)
                with args.jsonl.open("w") as handle:
                    for rnd in self.rounds:
                        for job_id, outcome in rnd.outcomes.items():
                            handle.write(json.dumps({"round": rnd.number, "job": job_id,
                                                     "pair": self.names.get(job_id), **asdict(outcome)}) + "\n")

    # -- run -----------------------------------------------------------------------------------
    def _sample_metrics(self, url: str, stop: threading.Event) -> None:
        while not stop.wait(self.args.sample_s):
            self.watch.read(url)

    def _record(self, jobs) -> list[str]:
        """Record the finished ones among `jobs` in their rounds; the ids of those still open."""
        for job in jobs:
            rnd = self.round_of[job.id]
            if job.finished and job.id not in rnd.outcomes:
                rnd.outcomes[job.id] = outcome_of(job, rnd.first_submit)  # its timeline from the round's start
                rnd.wall_s = max(rnd.wall_s, (job.finished_at - rnd.first_submit).total_seconds())
        return [job.id for job in jobs if not job.finished]

    def _collect(self, client, pending: list[str], until: float) -> list[str]:
        """Wait for `pending` (of any rounds) until `until` (wait_many returns their states at its timeout)."""
        while pending and time.monotonic() < until:
            pending = self._record(client.wait_many(pending, timeout=min(30.0, max(0.0, until - time.monotonic()))))
        return pending

    def run(self) -> int:
        from kerneljudge.client import KernelJudgeClient

        args = self.args
        options = dict(CPU_OPTIONS) if args.device == "cpu" else {}
        base = rl_pairs(args.device, args.corpus, args.problems, args.per_problem, args.library_share,
                        args.names.split(",") if args.names else None)
        service = Service(args.device, args.data_dir, None)
        stop = threading.Event()
        sampler = threading.Thread(target=self._sample_metrics, args=(service.url, stop), daemon=True)
        still_open: list[str] = []  # jobs of earlier rounds not finished when the next round was sent
        try:
            with KernelJudgeClient(service.url, KEY, timeout=600) as client, BusySampler(args.device) as busy, \
                    StoreWatcher(service.database, service.server_pid, service.log_path,
                                 stall_s=args.stall_s) as store_watch:
                sampler.start()
                self.state = "running"
                end = self.started + args.duration_s
                number = 0
                while time.monotonic() < end and (args.rounds is None or number < args.rounds):
                    number += 1
                    rnd = Round(number, submitted_at=time.monotonic())
                    pairs = round_pairs(base, number, args.seed)
                    entries = client.submit_many([{"reference": p.reference, "candidate": p.candidate,
                                                   "options": {**options, "device": args.device}} for p in pairs])
                    ids = [entry.job.id for entry in entries if entry.job]
                    if len(ids) != len(pairs):
                        raise RuntimeError(f"round {number}: {len(pairs) - len(ids)} submissions refused: "
                                           f"{[e.error for e in entries if not e.job][:3]}")
                    self.names.update({entry.job.id: p.name for entry, p in zip(entries, pairs, strict=True)
                                       if entry.job})
                    self.round_of.update(dict.fromkeys(ids, rnd))
                    rnd.jobs = len(ids)
                    rnd.first_submit = min(entry.job.created_at for entry in entries if entry.job)
                    self.rounds.append(rnd)
                    pending = self._collect(client, ids, min(end, rnd.submitted_at + args.round_limit_s))
                    rnd.left_open = len(pending)
                    still_open = self._record(client.get_many(still_open)) if still_open else []
                    still_open += pending
                    self.busy = busy.summary()
                    self.write(busy.gpus)
                self.state = "draining"
                self.write(busy.gpus)
                self._collect(client, still_open, time.monotonic() + args.drain_s)
                all_ids = list(self.names)
                in_store = service.finished_in_store(all_ids)
                self._record(client.get_many(all_ids))  # read after the store's count: ours can only be larger
                self.watch.read(service.url)
                self.busy = busy.summary()
                gpus = busy.gpus
                memory_peak = max([*busy.memory_peak.values(), *self.watch.memory_peak.values(), 0.0])
                self.verdict = judge_soak(len(all_ids), in_store, sum(len(r.outcomes) for r in self.rounds),
                                          self.watch, store_watch.dumps, memory_peak)
        finally:
            stop.set()
            service.stop()
        self.state = "finished"
        self.write(gpus)
        print((args.out.read_text() if args.out else "") or json.dumps(asdict(self.verdict)))
        return 0 if self.verdict.passed else 3


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--corpus", type=Path, default=None, help="the shared corpus, read at run time (cuda)")
    parser.add_argument("--duration-s", type=float, default=1200.0, help="no round starts after this")
    parser.add_argument("--rounds", type=int, default=None, help="at most this many rounds")
    parser.add_argument("--round-limit-s", type=float, default=600.0,
                        help="the next round is sent after this even if jobs of this one are open")
    parser.add_argument("--drain-s", type=float, default=300.0, help="after the last round, wait this long")
    parser.add_argument("--stall-s", type=float, default=180.0,
                        help="no job finishing for this long while jobs are open counts as a stall")
    parser.add_argument("--sample-s", type=float, default=10.0, help="how often /metrics is read")
    parser.add_argument("--problems", type=int, default=None, help="problems per round (16 on cuda, 6 on cpu)")
    parser.add_argument("--per-problem", type=int, default=None, help="samples per problem (8 on cuda, 4 on cpu)")
    parser.add_argument("--library-share", type=float, default=0.625, help="share of library problems (cuda)")
    parser.add_argument("--names", default=None, help="comma-separated library problems to use")
    parser.add_argument("--seed", type=int, default=16, help="submission order")
    parser.add_argument("--data-dir", type=Path, required=True, help="the service's data dir (emptied first)")
    parser.add_argument("--out", type=Path, default=None, help="markdown report (rewritten as it goes)")
    parser.add_argument("--jsonl", type=Path, default=None, help="one JSON row per job")
    args = parser.parse_args(argv)
    cuda = args.device == "cuda"
    args.problems = args.problems or (16 if cuda else 6)
    args.per_problem = args.per_problem or (8 if cuda else 4)
    args.corpus = args.corpus if args.corpus is not None and args.corpus.exists() else None
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    if args.data_dir.exists() and any(args.data_dir.iterdir()):
        raise SystemExit(f"soak: {args.data_dir} is not empty: a soak starts on a fresh data dir")
    args.data_dir.mkdir(parents=True, exist_ok=True)
    return args


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    return Soak(parse_args(argv), argv).run()


if __name__ == "__main__":
    raise SystemExit(main())
