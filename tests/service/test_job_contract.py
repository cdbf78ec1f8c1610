"""Client and server share one job model (contract.http_objects.Job): what the server sends is what the
client declares, field for field, with nothing left over as an undeclared extra and nothing declared
that the server never sends."""

from __future__ import annotations

from app.schemas import JobView
from contract.http_objects import Job
from contract.statuses import JobStatus
from kerneljudge.client import KernelJudgeClient
from service.helpers import USER_KEY
from service.sources import NO_CODE_COMPLETION, REFERENCE, TRITON_CANDIDATE
from worker.jobs.store import JobStatus as StoreJobStatus
from worker.jobs.store import public_job
from worker.jobs.store.records import Job as StoredJob


def test_the_server_answers_with_the_clients_model():
    assert JobView is Job
    assert StoreJobStatus is JobStatus
    stored = StoredJob(id="j", status="done", priority=0, created_at=1.0, updated_at=2.0, problem_id="p" * 64,
                       submission={}, api_key_id="k", building_at=1.1, built_at=1.2, running_at=1.3,
                       finished_at=2.0, verdict="ok", result=None)
    assert set(public_job(stored)) == set(Job.model_fields), "public_job and the shared Job model differ"


def test_a_served_job_has_every_declared_field_and_no_extras(queued_server):
    with KernelJudgeClient(queued_server.base_url, USER_KEY) as client:
        queued = client.submit(REFERENCE, TRITON_CANDIDATE)
        finished = client.submit(REFERENCE, completion=NO_CODE_COMPLETION)  # finishes at submission
        for job in (queued, finished, client.get(queued.id), *client.get_many([queued.id, finished.id])):
            assert job.model_extra == {}, f"undeclared fields: {sorted(job.model_extra)}"
            assert job.created_at is not None and job.problem_id
        assert finished.finished and finished.finished_at is not None and finished.result is not None
    with queued_server.client() as raw:
        sent = raw.get(f"/v1/evaluations/{queued.id}").json()
    assert set(sent) == set(Job.model_fields)
