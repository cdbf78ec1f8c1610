"""In-process test double of the kerneljudge HTTP API (issue 3 contract) for the client's unit tests.

Jobs advance one state each time they are read (queued -> running -> done), so tests control
progress by polling rather than by time; a candidate marked `# never finishes` stays running.
`script` injects failures for the next requests. With `read_latency_s` and a `clock`, a read of
many jobs takes that long on the clock, and a read whose timeout is shorter times out (a slow server).
The verdict is computed from markers in the candidate: `# speedup=X`, `# wrong`, `# crash`.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Callable
from datetime import datetime, timezone

import httpx

from contract.http_objects import Job
from contract.requests import EvalOptions
from worker.engine.completions import extract_candidate
from worker.engine.verdict.reward import components, compute_reward

Scripted = httpx.Response | Exception | Callable[[httpx.Request], httpx.Response | None]


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


class FakeApi:
    def __init__(self, *, api_key: str | None = "secret", reads_to_finish: int = 2, max_batch: int = 50,
                 finish_on_wait: bool = False):
        self.api_key = api_key
        self.reads_to_finish = reads_to_finish
        self.max_batch = max_batch
        self.finish_on_wait = finish_on_wait
        self.jobs: dict[str, dict] = {}
        self.reads: dict[str, int] = {}
        self.idempotency: dict[str, str] = {}
        self.problems: dict[str, str] = {}
        self.script: list[Scripted] = []
        self.requests: list[httpx.Request] = []
        self.fail_jobs = False  # finished jobs become `failed` (the service could not evaluate)
        self.read_latency_s = 0.0  # how long a GET /v1/evaluations?ids= takes on `clock`
        self.clock = None  # the FakeClock the latency is spent on
        self._ids = itertools.count(1)

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    # --- dispatch -------------------------------------------------------------------------
    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if self.script:
            scripted = self.script.pop(0)
            if isinstance(scripted, Exception):
                raise scripted
            if isinstance(scripted, httpx.Response):
                return scripted
            answer = scripted(request)
            if answer is not None:
                return answer
        if self.api_key and request.headers.get("authorization") != f"Bearer {self.api_key}":
            return httpx.Response(401, json={"detail": "missing or invalid API key"})
        path, method = request.url.path, request.method
        if method == "POST" and path == "/v1/evaluations":
            return self._submit(request)
        if method == "POST" and path == "/v1/evaluations:batch":
            return self._batch(request)
        if method == "GET" and path == "/v1/evaluations":
            self._spend_read_latency(request)
            ids = [i for i in request.url.params.get("ids", "").split(",") if i]
            return httpx.Response(200, json={"items": [self._read(i) for i in ids if i in self.jobs]})
        if match := re.fullmatch(r"/v1/evaluations/([^/]+)", path):
            job_id = match[1]
            if job_id not in self.jobs:
                return httpx.Response(404, json={"detail": f"no job {job_id}"})
            if method == "GET":
                return httpx.Response(200, json=self._read(job_id))
            if method == "DELETE":
                return self._cancel(job_id)
        if method == "POST" and path == "/v1/problems":
            reference = json.loads(request.content)["reference"]
            problem_id = "p_" + hashlib.sha256(reference.encode()).hexdigest()[:16]
            self.problems[problem_id] = reference
            return httpx.Response(201, json={"id": problem_id, "created_at": _now()})
        if match := re.fullmatch(r"/v1/problems/([^/]+)", path):
            if match[1] not in self.problems:
                return httpx.Response(404, json={"detail": f"no problem {match[1]}"})
            return httpx.Response(200, json={"id": match[1]})
        return httpx.Response(404, json={"detail": "not found"})

    # --- endpoints ------------------------------------------------------------------------
    def _submit(self, request: httpx.Request) -> httpx.Response:
        key = request.headers.get("idempotency-key")
        if key and key in self.idempotency:
            return httpx.Response(202, json=self.jobs[self.idempotency[key]])
        error, job = self._create(json.loads(request.content))
        if error:
            return httpx.Response(422, json={"detail": [{"loc": ["body", error[0]], "msg": error[1]}]})
        if key:
            self.idempotency[key] = job["id"]
        if request.url.params.get("wait") and self.finish_on_wait:
            self._finish(self.jobs[job["id"]])
            return httpx.Response(200, json=self._public(self.jobs[job["id"]]))
        return httpx.Response(202, json=job)

    def _batch(self, request: httpx.Request) -> httpx.Response:
        items = json.loads(request.content)["items"]
        if len(items) > self.max_batch:
            return httpx.Response(413, json={"detail": f"at most {self.max_batch} items per batch"})
        out = []
        for index, body in enumerate(items):
            error, job = self._create(body)
            out.append({"index": index, "error": {"kind": "invalid_input", "message": error[1]}} if error else job)
        return httpx.Response(200, json={"items": out})

    def _create(self, body: dict) -> tuple[tuple[str, str] | None, dict]:
        if "reference" not in body and "problem_id" not in body:
            return ("reference", "give reference or problem_id"), {}
        if body.get("problem_id") is not None and body["problem_id"] not in self.problems:
            return ("problem_id", f"unknown problem {body['problem_id']}"), {}
        if "candidate" not in body and "completion" not in body:
            return ("candidate", "give candidate or completion"), {}
        job_id = f"job-{next(self._ids)}"
        reference = body.get("reference") or ""
        problem_id = body.get("problem_id") or hashlib.sha256(reference.encode()).hexdigest()
        job = {"id": job_id, "status": "queued", "created_at": _now(), "problem_id": problem_id, "result": None,
               "error": None, "_body": body}
        self.jobs[job_id] = job
        self.reads[job_id] = 0
        return None, self._public(job)

    def _spend_read_latency(self, request: httpx.Request) -> None:
        if not self.read_latency_s or self.clock is None:
            return
        allowed = (request.extensions.get("timeout") or {}).get("read")
        if allowed is not None and allowed < self.read_latency_s:
            self.clock.now += allowed
            raise httpx.ReadTimeout("the answer did not arrive within the read timeout", request=request)
        self.clock.now += self.read_latency_s

    def _cancel(self, job_id: str) -> httpx.Response:
        job = self.jobs[job_id]
        if job["status"] != "queued":
            return httpx.Response(409, json={"detail": f"job {job_id} is {job['status']}; only queued jobs cancel"})
        job["status"] = "cancelled"
        return httpx.Response(200, json=self._public(job))

    def _read(self, job_id: str) -> dict:
        job = self.jobs[job_id]
        if job["status"] in ("queued", "running"):
            self.reads[job_id] += 1
            if "# never finishes" in (job["_body"].get("candidate") or job["_body"].get("completion") or ""):
                job["status"] = "running"
                return self._public(job)
            if self.reads[job_id] >= self.reads_to_finish:
                self._finish(job)
            else:
                job["status"] = "running"
        return self._public(job)

    def _finish(self, job: dict) -> None:
        job["finished_at"] = _now()
        if self.fail_jobs:
            job.update(status="failed", error="worker died twice")
            return
        job.update(status="done", result=self._verdict(job["_body"]))

    @staticmethod
    def _public(job: dict) -> dict:
        """The job in the server's shape: the one model both sides share."""
        return Job.model_validate({k: v for k, v in job.items() if not k.startswith("_")}).model_dump(mode="json")

    @staticmethod
    def _verdict(body: dict) -> dict:
        options = EvalOptions.model_validate(body.get("options", {}))
        extracted = True
        code = body.get("candidate")
        if code is None:
            extraction = extract_candidate(body["completion"])
            extracted, code = extraction.ok, extraction.code or ""
        compiled = extracted and "# crash" not in code
        correct = compiled and "# wrong" not in code
        speed = re.search(r"# speedup=([0-9.]+)", code)
        speedup = float(speed[1]) if (speed and correct) else (1.0 if correct else None)
        comps = components(compiled=compiled, correct=correct, speedup=speedup, extracted=extracted)
        reward = compute_reward(options.reward_preset, comps, weights=options.reward_weights)
        status = "ok" if correct else ("incorrect" if compiled else ("invalid_input" if not extracted
                                                                      else "compile_error"))
        return {"status": status, "compiled": compiled, "correct": correct, "speedup": speedup, "reward": reward,
                "reward_preset": options.reward_preset, "reward_components": comps}
