"""Real evaluations through the real engine (sandboxed, CPU, Triton interpreter): kept few."""

from __future__ import annotations

import hmac
import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import httpx

from service.helpers import USER_KEY, make_config, poll_until, start_server
from service.sources import (
    COMPLETION,
    FAST_OPTIONS,
    NO_CODE_COMPLETION,
    REFERENCE,
    TRITON_CANDIDATE,
    WRONG_CANDIDATE,
)
from worker.config.jobs_section import CallbackConfig
from worker.jobs.callback_target import CallbackAllowList
from worker.jobs.callbacks import SIGNATURE_HEADER, TIMESTAMP_HEADER, sign

SECRET = "test-callback-secret"


class _Receiver(BaseHTTPRequestHandler):
    received: list[tuple[dict, bytes]] = []

    def do_POST(self):  # noqa: N802 (http.server's naming)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append((dict(self.headers), body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *_args):
        pass


def test_submit_wait_poll_and_signed_callback(serve):
    # The receiver is on loopback: the allow-list names it (callbacks go to public addresses only).
    working_server = serve(local_workers=1,
                           callbacks=CallbackConfig(secret=SECRET, allow=CallbackAllowList.parse("127.0.0.1")))
    receiver = HTTPServer(("127.0.0.1", 0), _Receiver)
    _Receiver.received = []
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    callback_url = f"http://127.0.0.1:{receiver.server_address[1]}/hook"
    try:
        with working_server.client() as client:
            good = client.post("/v1/evaluations", params={"wait": 170}, json={
                "reference": REFERENCE, "candidate": TRITON_CANDIDATE, "options": FAST_OPTIONS,
                "callback_url": callback_url})
            wrong = client.post("/v1/evaluations", json={
                "reference": REFERENCE, "candidate": WRONG_CANDIDATE, "options": FAST_OPTIONS}).json()
            assert good.status_code == 200, good.text
            job = good.json()
            assert job["status"] == "done", job
            assert job["result"]["status"] == "ok" and job["result"]["correct"] is True
            assert job["result"]["reward"] > 0
            assert job["worker"].startswith("embedded@") and job["attempts"] == 1
            assert job["created_at"] <= job["building_at"] <= job["running_at"] <= job["finished_at"]

            polled = poll_until(lambda: client.get(f"/v1/evaluations/{wrong['id']}").json(),
                                lambda j: j["status"] in ("done", "failed"))
            assert polled["status"] == "done" and polled["result"]["status"] == "incorrect"
            assert polled["result"]["reward"] == 0.0

            metrics = client.get("/metrics").text
            assert 'kerneljudge_job_outcomes{status="done",verdict="ok"} 1.0' in metrics
            assert "kerneljudge_stage_seconds_count" in metrics

        headers, raw = poll_until(lambda: list(_Receiver.received), lambda r: len(r) >= 1, timeout_s=30)[0]
        assert json.loads(raw)["id"] == job["id"] and json.loads(raw)["status"] == "done"
        expected = sign(SECRET, headers[TIMESTAMP_HEADER], raw)
        assert hmac.compare_digest(headers[SIGNATURE_HEADER], expected)
    finally:
        receiver.shutdown()


def test_get_reward_evaluates_completions(working_server):
    body = {"query": [COMPLETION, NO_CODE_COMPLETION], "prompts": ["", ""], "labels": [REFERENCE, REFERENCE]}
    response = httpx.post(f"{working_server.base_url}/get_reward", params={"key": USER_KEY, "timeout": 170},
                          json=body, timeout=200)
    assert response.status_code == 200
    answer = response.json()
    assert answer["rewards"][0] > 0 and answer["rewards"][1] == 0.0
    assert answer["scores"] == [1.0, 0.0]
    assert answer["extra_logs"]["kerneljudge/correct"] == [1.0, 0.0]
    assert answer["extra_logs"]["kerneljudge/format"] == [1.0, 0.0]
    assert answer["reasons"] == [None, None]


def test_queued_job_runs_after_restart(tmp_path):
    live = start_server(make_config(tmp_path, local_workers=0))
    with live.client() as client:
        job_id = client.post("/v1/evaluations", json={
            "reference": REFERENCE, "candidate": TRITON_CANDIDATE, "options": FAST_OPTIONS}).json()["id"]
    live.stop()

    live = start_server(make_config(tmp_path, local_workers=1))
    try:
        with live.client() as client:
            finished = client.get(f"/v1/evaluations/{job_id}", params={"wait": 170}).json()
            assert finished["status"] == "done" and finished["result"]["status"] == "ok"
    finally:
        live.stop()
