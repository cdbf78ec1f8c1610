"""`kerneljudge submit | status | batch`: the client's command line (no torch needed).

  kerneljudge submit REF.py CAND.py [--wait] [--json]   (CAND may be a raw completion with --completion)
  kerneljudge status JOB_ID [--json]
  kerneljudge batch FOLDER|FILE.jsonl --out results.jsonl
      FOLDER: reference.py plus candidate files (*.py, *.md, *.txt; .md/.txt are sent as completions)
      FILE.jsonl: one object per line with reference|problem_id and candidate|completion (and options)
Server and key: --server / --api-key, or KERNELJUDGE_URL / KERNELJUDGE_API_KEY.
Exit status: 0 ok, 1 when a job failed or did not finish in time, 2 for usage or service errors.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from contract.http_objects import Job
from contract.statuses import JobStatus
from kerneljudge.client import KernelJudgeClient
from kerneljudge.errors import KernelJudgeError

MULTI_COMMAND = True
CANDIDATE_SUFFIXES = {".py": "candidate", ".md": "completion", ".txt": "completion"}


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument("--server", help="API base URL (default: $KERNELJUDGE_URL or http://127.0.0.1:8000)")
    parser.add_argument("--api-key", help="API key (default: $KERNELJUDGE_API_KEY)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for results (default 600)")
    if name == "submit":
        parser.add_argument("reference", type=Path, help="reference source file (Model, get_inputs, ...)")
        parser.add_argument("candidate", type=Path, help="candidate source file defining ModelNew")
        parser.add_argument("--completion", action="store_true", help="CANDIDATE is a raw model completion")
        parser.add_argument("--options", type=json.loads, default=None, help="EvalOptions as JSON")
        parser.add_argument("--wait", action="store_true", help="wait for the result")
        parser.add_argument("--json", action="store_true", help="print the job as JSON")
    elif name == "status":
        parser.add_argument("job_id")
        parser.add_argument("--json", action="store_true", help="print the job as JSON")
    elif name == "batch":
        parser.add_argument("source", type=Path, help="a folder (reference.py + candidates) or a .jsonl file")
        parser.add_argument("--out", type=Path, required=True, help="where to write one result per line")
        parser.add_argument("--options", type=json.loads, default=None, help="EvalOptions as JSON for every item")


def run(args: argparse.Namespace) -> int:
    try:
        with KernelJudgeClient(args.server, args.api_key, timeout=args.timeout) as client:
            return {"submit": _submit, "status": _status, "batch": _batch}[args.command](client, args)
    except (KernelJudgeError, OSError, ValueError) as exc:
        print(f"kerneljudge {args.command}: {exc}", file=sys.stderr)
        return 2


def _submit(client: KernelJudgeClient, args: argparse.Namespace) -> int:
    field = "completion" if args.completion else "candidate"
    job = client.submit(args.reference.read_text(), options=args.options,
                        **{field: args.candidate.read_text()})
    if args.wait and not job.finished:
        job = client.wait(job.id, timeout=args.timeout)
    _print_job(job, args.json)
    return _exit_code(job, args.wait)


def _status(client: KernelJudgeClient, args: argparse.Namespace) -> int:
    job = client.get(args.job_id)
    _print_job(job, args.json)
    return 0


def _print_job(job: Job, as_json: bool) -> None:
    if as_json:
        print(job.model_dump_json(indent=2))
        return
    print(f"{job.id}  {job.status.value}")
    if job.result is not None:
        r = job.result
        speed = f"{r.speedup:.3g}x" if r.speedup is not None else "-"
        print(f"  verdict {r.status.value}  correct={r.correct}  speedup={speed}  reward={r.reward:.4g}")
        if r.error is not None:
            print(f"  {r.error.kind}: {r.error.message}")
    if job.error_message:
        print(f"  error: {job.error_message}")


def _exit_code(job: Job, waited: bool) -> int:
    if job.status is JobStatus.done or (not waited and not job.finished):
        return 0
    return 1


def _batch(client: KernelJudgeClient, args: argparse.Namespace) -> int:
    names, items = _load_batch(args.source, args.options)
    print(f"submitting {len(items)} item(s) to {client.base_url}", file=sys.stderr)
    entries = client.submit_many(items)
    ids = [e.job.id for e in entries if e.job is not None]
    progress = _Progress()
    jobs = {job.id: job for job in client.wait_many(ids, timeout=args.timeout, on_progress=progress)} if ids else {}
    progress.close()
    failures = unfinished = 0
    with args.out.open("w") as out:
        for entry in entries:
            record: dict[str, Any] = {"name": names[entry.index]}
            if entry.job is None:
                record["error"] = entry.error.model_dump() if entry.error else None
                failures += 1
            else:
                job = jobs[entry.job.id]
                record["job"] = job.model_dump(mode="json")
                record["finished"] = job.finished
                if not job.finished:
                    record["unfinished"] = f"still {job.status.value} when --timeout {args.timeout:g}s passed"
                    unfinished += 1
                failures += job.status is not JobStatus.done
            out.write(json.dumps(record) + "\n")
    print(f"wrote {len(entries)} result(s) to {args.out}; {failures} without a verdict"
          + (f" ({unfinished} still unfinished at the timeout: read them later with `kerneljudge status`)"
             if unfinished else ""), file=sys.stderr)
    return 1 if failures else 0


def _load_batch(source: Path, options: dict | None) -> tuple[list[str], list[dict[str, Any]]]:
    if source.is_dir():
        reference_file = source / "reference.py"
        if not reference_file.exists():
            raise ValueError(f"{source} has no reference.py; put the reference there, candidates beside it")
        reference = reference_file.read_text()
        names, items = [], []
        for path in sorted(source.iterdir()):
            field = CANDIDATE_SUFFIXES.get(path.suffix)
            if path == reference_file or field is None or not path.is_file():
                continue
            names.append(path.name)
            items.append({"reference": reference, field: path.read_text(), **({"options": options} if options else {})})
        if not items:
            raise ValueError(f"{source} has no candidate files (*.py, *.md, *.txt besides reference.py)")
        return names, items
    names, items = [], []
    for number, line in enumerate(source.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError as exc:
            raise ValueError(f"{source}:{number}: not JSON ({exc})") from None
        if not isinstance(item, dict):
            raise ValueError(f"{source}:{number}: expected a JSON object")
        names.append(str(item.pop("name", f"line {number}")))
        if options and "options" not in item:
            item["options"] = options
        items.append(item)
    return names, items


class _Progress:
    """A one-line progress bar on stderr (redrawn in place on a terminal, one line per 10% otherwise)."""

    def __init__(self) -> None:
        self.last_decile = -1
        self.tty = sys.stderr.isatty()

    def __call__(self, done: int, total: int) -> None:
        filled = int(30 * done / total) if total else 30
        line = f"[{'#' * filled}{'.' * (30 - filled)}] {done}/{total} finished"
        if self.tty:
            print(f"\r{line}", end="", file=sys.stderr, flush=True)
        elif (decile := (10 * done // total) if total else 10) != self.last_decile:
            self.last_decile = decile
            print(line, file=sys.stderr)

    def close(self) -> None:
        if self.tty:
            print(file=sys.stderr)
