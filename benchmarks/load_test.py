"""Bounded load test of the reward service on loopback (embedded backend, CPU mode).

Starts `kerneljudge serve` twice in subprocesses:
  1. with no workers, to measure the API alone: submissions/s and status polls/s with C
     concurrent clients, and p50/p99 latency of each request;
  2. with one CPU worker, to measure end-to-end latency (submit -> result) of a trivial
     evaluation (Model.forward = x + 1, a Triton candidate run by the interpreter).
Writes a markdown table to benchmarks/results/ (date, machine, command).

    python benchmarks/load_test.py --submissions 2000 --polls 4000 --concurrency 32 --e2e 3
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests.service.sources import FAST_OPTIONS, REFERENCE, TRITON_CANDIDATE  # noqa: E402

KEY = "load-test-key"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    def __init__(self, workers: int):
        self.data_dir = tempfile.mkdtemp(prefix="kj-load-")
        self.port = free_port()
        env = dict(os.environ, KERNELJUDGE_API_KEYS=KEY, KERNELJUDGE_DATA_DIR=self.data_dir,
                   KERNELJUDGE_RATE_LIMIT="0", KERNELJUDGE_MAX_ACTIVE_PER_KEY="1000000",
                   KERNELJUDGE_MAX_QUEUE="1000000")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kerneljudge.cli", "serve", "--port", str(self.port), "--device", "cpu",
             "--workers", str(workers), "--log-level", "warning"], cwd=REPO, env=env)
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{self.url}/v1/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("server did not start")
            time.sleep(0.1)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def hammer(url: str, total: int, concurrency: int, make_request) -> tuple[float, list[float], int]:
    """Run `total` requests with `concurrency` clients; (seconds, latencies, non-2xx count)."""
    latencies: list[float] = []
    errors = 0
    counter = iter(range(total))
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, limits=limits,
                                 timeout=60) as client:
        async def one_client():
            nonlocal errors
            for i in counter:
                start = time.perf_counter()
                try:
                    response = await make_request(client, i)
                except httpx.TransportError:  # counted, not retried: the table shows them
                    errors += 1
                    continue
                latencies.append(time.perf_counter() - start)
                errors += not (200 <= response.status_code < 300)

        start = time.perf_counter()
        await asyncio.gather(*(one_client() for _ in range(concurrency)))
        return time.perf_counter() - start, latencies, errors


async def api_only(args) -> dict[str, tuple[float, float, float, int, int]]:
    server = Server(workers=0)
    try:
        body = {"reference": REFERENCE, "candidate": TRITON_CANDIDATE, "options": FAST_OPTIONS}
        ids: list[str] = []

        async def submit(client, _i):
            response = await client.post("/v1/evaluations", json=body)
            if response.status_code == 202:
                ids.append(response.json()["id"])
            return response

        async def poll(client, i):
            return await client.get(f"/v1/evaluations/{ids[i % len(ids)]}")

        results = {}
        seconds, lat, errors = await hammer(server.url, args.submissions, args.concurrency, submit)
        results["submit (POST /v1/evaluations)"] = (args.submissions / seconds, percentile(lat, 0.5),
                                                    percentile(lat, 0.99), errors, args.submissions)
        seconds, lat, errors = await hammer(server.url, args.polls, args.concurrency, poll)
        results["poll (GET /v1/evaluations/{id})"] = (args.polls / seconds, percentile(lat, 0.5),
                                                      percentile(lat, 0.99), errors, args.polls)
        return results
    finally:
        server.stop()


def end_to_end(count: int) -> tuple[list[float], list[str]]:
    server = Server(workers=1)
    try:
        latencies, verdicts = [], []
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=300) as client:
            for _ in range(count):
                start = time.perf_counter()
                job = client.post("/v1/evaluations", params={"wait": 240}, json={
                    "reference": REFERENCE, "candidate": TRITON_CANDIDATE, "options": FAST_OPTIONS}).json()
                latencies.append(time.perf_counter() - start)
                verdicts.append(f"{job['status']}/{(job.get('result') or {}).get('status')}")
        return latencies, verdicts
    finally:
        server.stop()


def machine() -> str:
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{platform.node()}: {os.cpu_count()} CPU cores ({cpu}), Python {platform.python_version()}, {platform.system()} {platform.release()}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--submissions", type=int, default=2000)
    parser.add_argument("--polls", type=int, default=4000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--e2e", type=int, default=3, help="end-to-end evaluations (each runs the engine)")
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "load_test.md"))
    args = parser.parse_args()

    load_before = os.getloadavg()[0]
    api = asyncio.run(api_only(args))
    e2e, verdicts = end_to_end(args.e2e) if args.e2e else ([], [])
    date = subprocess.run(["date"], capture_output=True, text=True).stdout.strip()
    command = "python " + " ".join(["benchmarks/load_test.py", *sys.argv[1:]])
    lines = [
        "# Reward service load test (loopback, embedded backend, CPU mode)", "",
        f"- Date: {date}", f"- Machine: {machine()}", f"- Command: `{command}`",
        f"- Concurrency: {args.concurrency} clients (httpx, keep-alive), SQLite store (WAL), one uvicorn process",
        f"- The load generator runs on the same cores as the server; 1-min load average before the run: "
        f"{load_before:.2f}", "",
        "| operation | requests | throughput (req/s) | p50 latency (ms) | p99 latency (ms) | errors (non-2xx or transport) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, (rate, p50, p99, errors, n) in api.items():
        lines.append(f"| {name} | {n} | {rate:.0f} | {p50 * 1000:.1f} | {p99 * 1000:.1f} | {errors} |")
    if e2e:
        lines += ["", "End-to-end latency of a trivial CPU evaluation (submit with ?wait, one worker, "
                  "trials=1, timing off):", "",
                  "| runs | p50 (s) | max (s) | outcomes (job/verdict) |", "|---:|---:|---:|---|",
                  f"| {len(e2e)} | {statistics.median(e2e):.2f} | {max(e2e):.2f} | {', '.join(verdicts)} |"]
    text = "\n".join(lines) + "\n"
    Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
