"""Callbacks leave on background threads: a slow receiver never holds the worker (or its GPU)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

from worker.jobs.store.callbacks import CallbackSender
from worker.jobs.store.records import Job


def _finished_job(callback_url: str | None) -> Job:
    submission = {"callback_url": callback_url} if callback_url else {}
    return Job(id="job-1", status="done", priority=0, created_at=1.0, updated_at=2.0, problem_id="p" * 64,
               submission=submission, api_key_id="k", finished_at=2.0, verdict="ok")


def test_a_slow_receiver_does_not_hold_the_caller():
    arrived, release = threading.Event(), threading.Event()
    bodies: list[dict] = []

    class SlowReceiver(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's naming)
            bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            arrived.set()
            release.wait(60)  # answers only when the test says so
            self.send_response(204)
            self.end_headers()

        def log_message(self, *_args):
            pass

    receiver = HTTPServer(("127.0.0.1", 0), SlowReceiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    sender = CallbackSender()
    try:
        delivery = sender.job_finished(_finished_job(f"http://127.0.0.1:{receiver.server_address[1]}/hook"))
        assert arrived.wait(60), "the callback never reached the receiver"
        # The receiver holds the request, and job_finished has already returned to its caller.
        assert not delivery.done()
        release.set()
        assert delivery.result(timeout=60) is True
        assert bodies[0]["id"] == "job-1" and bodies[0]["status"] == "done"
    finally:
        release.set()
        sender.stop()
        receiver.shutdown()


def test_a_job_without_a_callback_sends_nothing():
    sender = CallbackSender()
    try:
        assert sender.job_finished(_finished_job(None)) is None
    finally:
        sender.stop()
