"""Submission logic shared by the single, batch and reward endpoints.

Turns a validated EvaluationCreate into a stored job: applies the key's job caps (worker/config/job_caps.py)
and checks the callback, registers the reference as a problem (owned by the key when new),
extracts code from a completion (a completion without code is finished at once with
format = 0, no worker needed), applies the queue quota and limits, and hands the job to the launcher.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from app.auth import Principal
from app.schemas import EvaluationCreate
from worker.config.api_section import ApiSection
from worker.jobs.callback_target import CallbackRefused, check_destination
from worker.jobs.launchers.launcher import Launcher, LaunchError
from worker.jobs.store import IdempotencyConflict, Job, JobStore, NewJob

log = logging.getLogger(__name__)

RETRY_AFTER_S = 5


@dataclass
class SubmissionError(Exception):
    status: int
    detail: Any
    headers: dict[str, str] | None = None


def field_error(loc: tuple, message: str) -> SubmissionError:
    return SubmissionError(422, [{"type": "value_error", "loc": list(loc), "msg": message}])


@dataclass
class Capacity:
    """Room left in the queue and in this key's quota, counted once per request."""

    queue_room: int
    key_room: int


class Submitter:
    def __init__(self, store: JobStore, api: ApiSection, launcher: Launcher, metrics, callbacks):
        self.store = store
        self.callbacks = callbacks
        self.api = api
        self.launcher = launcher
        self.metrics = metrics

    def capacity(self, principal: Principal) -> Capacity:
        queued, active = self.store.load(principal.key_id)
        return Capacity(queue_room=self.api.max_queue - queued,
                        key_room=self.api.max_active_per_key - active)

    def submit(self, body: EvaluationCreate, principal: Principal, capacity: Capacity,
               idempotency_key: str | None = None, loc_prefix: tuple = ("body",)) -> tuple[Job, bool]:
        """Store (and dispatch) one evaluation. Returns (job, created)."""
        new = self._new_job(body, principal, idempotency_key, loc_prefix)
        needs_worker = new.result is None
        if needs_worker:
            refusal = self._capacity_refusal(capacity)
            # A replayed Idempotency-Key adds no job, so it is answered even when full; the key
            # is looked up only when the request would otherwise be refused.
            if refusal is not None and not self._is_replay(principal, idempotency_key):
                raise refusal
        try:
            job, created = self.store.create_job(new)
        except IdempotencyConflict as conflict:
            raise SubmissionError(409, f"Idempotency-Key was already used for job {conflict.existing.id} "
                                       "with a different body; use a new key for a new submission") from None
        if created and needs_worker:
            capacity.queue_room -= 1
            capacity.key_room -= 1
            try:
                self.launcher.submitted([job])
            except LaunchError as exc:
                self.store.fail(job.id, str(exc))
                raise SubmissionError(503, f"{exc}; retry later", {"Retry-After": str(RETRY_AFTER_S)}) from None
        if created:
            self.metrics.submitted.inc()
            if job.terminal:  # finished at submission (no code in the completion)
                self.callbacks.job_finished(job)
        return job, created

    def _is_replay(self, principal: Principal, idempotency_key: str | None) -> bool:
        return idempotency_key is not None and self.store.has_idempotency_key(principal.key_id, idempotency_key)

    def _capacity_refusal(self, capacity: Capacity) -> SubmissionError | None:
        """The error refusing a new job when this key's quota or the queue is full, else None."""
        if capacity.key_room <= 0:
            return SubmissionError(
                429, f"this API key already has {self.api.max_active_per_key} unfinished jobs (its quota); "
                     "wait for some to finish", {"Retry-After": str(RETRY_AFTER_S)})
        if capacity.queue_room <= 0:
            return SubmissionError(503, "the queue is full; retry later", {"Retry-After": str(RETRY_AFTER_S)})
        return None

    def _new_job(self, body: EvaluationCreate, principal: Principal, idempotency_key: str | None,
                 loc_prefix: tuple) -> NewJob:
        if body.options.sandbox.value == "none" and not self.api.allow_unsandboxed:
            raise field_error((*loc_prefix, "options", "sandbox"),
                              "sandbox 'none' is disabled on this server (KERNELJUDGE_ALLOW_UNSANDBOXED)")
        options = body.options.model_dump(mode="json", exclude_unset=False)
        over_cap = principal.caps.violations({"options": options, "priority": body.priority}, loc_prefix)
        over_cap += _required_rules_switched_off(body.options.policy.disabled_rules, principal, loc_prefix)
        if over_cap:
            raise SubmissionError(422, over_cap)
        callback_url = self._checked_callback(body, loc_prefix)
        if body.problem_id is not None:
            problem = self.store.get_problem(body.problem_id)
            if problem is None:
                raise field_error((*loc_prefix, "problem_id"),
                                  "unknown problem_id; register the reference first with POST /v1/problems")
            problem_id = problem.id
        else:
            # Registered (owned) by this key when new; an existing problem is left as it is.
            problem, _ = self.store.put_problem(body.reference, key_id=principal.key_id)  # type: ignore[arg-type]
            problem_id = problem.id
        submission: dict[str, Any] = {"options": options}
        if callback_url is not None:
            submission["callback_url"] = callback_url
        result = verdict = None
        if body.completion is not None:
            submission["completion"] = body.completion
            extraction = _extract(body.completion)
            submission["extraction"] = extraction.message
            if extraction.ok:
                submission["candidate"] = extraction.code
            else:
                from worker.jobs.engine_call import extraction_failure_result

                result = extraction_failure_result(options, extraction.message)
                verdict = result["status"]
        else:
            submission["candidate"] = body.candidate
        return NewJob(problem_id=problem_id, submission=submission, api_key_id=principal.key_id,
                      priority=body.priority, idempotency_key=idempotency_key, result=result, verdict=verdict)

    def _checked_callback(self, body: EvaluationCreate, loc_prefix: tuple) -> str | None:
        """The callback URL, refused early (422) when it could never be delivered: no secret to sign it,
        or a destination that is not public. The check that counts runs again when it is sent."""
        if body.callback_url is None:
            return None
        url, loc = str(body.callback_url), (*loc_prefix, "callback_url")
        if not self.callbacks.config.enabled:
            raise field_error(loc, "callbacks are off on this server: it has no KERNELJUDGE_CALLBACK_SECRET to sign "
                                   "them; poll the job (or wait with ?wait=) instead")
        try:
            check_destination(url, self.callbacks.config.allow)
        except CallbackRefused as refused:
            raise field_error(loc, str(refused)) from None
        return url


def _required_rules_switched_off(disabled: list[str], principal: Principal, loc_prefix: tuple) -> list[dict]:
    """422 detail items for every entry of `disabled_rules` that switches off a rule this key must keep."""
    from worker.engine.policy.registry import short_id

    errors = []
    for index, entry in enumerate(disabled):
        rule = short_id(entry)
        if rule in principal.required_rules:
            errors.append({"type": "rule_required", "loc": [*loc_prefix, "options", "policy", "disabled_rules", index],
                           "msg": f"{entry!r} switches off {rule}, which this API key may not disable (the server "
                                  "requires it: KERNELJUDGE_REQUIRED_RULES or the key's required_rules); without it "
                                  "the job's timing or verdict would not be guaranteed (docs/api.md#disabled-rules)"})
    return errors


def _extract(completion: str):
    from worker.engine.completions import extract_candidate

    return extract_candidate(completion)
