"""Callbacks: sent on background threads, only when signed, only to destinations that pass the
check after DNS resolution at send time, connected to the address checked, never redirected."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from service.helpers import USER_KEY
from service.sources import REFERENCE, TRITON_CANDIDATE
from worker.config.jobs_section import CallbackConfig
from worker.jobs.callback_target import CallbackAllowList, check_destination
from worker.jobs.callbacks import CallbackSender
from worker.jobs.store.records import Job

SECRET = "test-callback-secret"
LOOPBACK_ALLOWED = CallbackConfig(secret=SECRET, allow=CallbackAllowList.parse("127.0.0.1"))
PUBLIC_ONLY = CallbackConfig(secret=SECRET)


def _finished_job(callback_url: str | None) -> Job:
    submission = {"callback_url": callback_url} if callback_url else {}
    return Job(id="job-1", status="done", priority=0, created_at=1.0, updated_at=2.0, problem_id="p" * 64,
               submission=submission, api_key_id="k", finished_at=2.0, verdict="ok")


@dataclass
class Receiver:
    """A real HTTP server on loopback recording every request it gets."""

    port: int
    requests: list[dict] = field(default_factory=list)  # {"path", "headers", "body"}

    def url(self, path: str = "/hook", host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"


@pytest.fixture
def receiver_factory() -> Iterator[Callable[..., Receiver]]:
    servers: list[HTTPServer] = []

    def start(status: int = 204, headers: dict[str, str] | None = None,
              hold: threading.Event | None = None, arrived: threading.Event | None = None) -> Receiver:
        record = Receiver(port=0)

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's naming)
                body = self.rfile.read(int(self.headers["Content-Length"]))
                record.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
                if arrived is not None:
                    arrived.set()
                if hold is not None:
                    hold.wait(60)  # answers only when the test says so
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_args):
                pass

        server = HTTPServer(("127.0.0.1", 0), Handler)
        servers.append(server)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        record.port = server.server_address[1]
        return record

    yield start
    for server in servers:
        server.shutdown()


@pytest.fixture
def senders() -> Iterator[Callable[..., CallbackSender]]:
    made: list[CallbackSender] = []

    def make(config: CallbackConfig, **kwargs) -> CallbackSender:
        made.append(CallbackSender(config, **kwargs))
        return made[-1]

    yield make
    for sender in made:
        sender.stop()


def test_a_slow_receiver_does_not_hold_the_caller(receiver_factory, senders):
    arrived, release = threading.Event(), threading.Event()
    receiver = receiver_factory(hold=release, arrived=arrived)
    try:
        delivery = senders(LOOPBACK_ALLOWED).job_finished(_finished_job(receiver.url()))
        assert arrived.wait(60), "the callback never reached the receiver"
        # The receiver holds the request, and job_finished has already returned to its caller.
        assert not delivery.done()
        release.set()
        assert delivery.result(timeout=60) is True
        body = json.loads(receiver.requests[0]["body"])
        assert body["id"] == "job-1" and body["status"] == "done"
    finally:
        release.set()


def test_a_job_without_a_callback_sends_nothing(senders):
    assert senders(LOOPBACK_ALLOWED).job_finished(_finished_job(None)) is None


def test_loopback_is_refused_at_send_time_without_the_allow_list(receiver_factory, senders):
    receiver = receiver_factory()
    delivery = senders(PUBLIC_ONLY).job_finished(_finished_job(receiver.url()))
    assert delivery.result(timeout=60) is False
    assert receiver.requests == []  # refused before connecting: nothing reached the receiver


def test_nothing_is_sent_without_a_secret(receiver_factory, senders):
    receiver = receiver_factory()
    unsigned = CallbackConfig(secret="", allow=CallbackAllowList.parse("127.0.0.1"))
    assert senders(unsigned).job_finished(_finished_job(receiver.url())).result(timeout=60) is False
    assert receiver.requests == []


def test_the_connection_goes_to_the_address_checked_with_the_names_host_header(receiver_factory, senders):
    # "hooks.test" does not exist: only the sender's own resolution (checked, then connected to)
    # can reach the receiver, so a second lookup by the HTTP client would fail the test.
    receiver = receiver_factory()
    lookups: list[str] = []

    def resolve(host: str, _port: int) -> list[str]:
        lookups.append(host)
        return ["127.0.0.1"]

    delivery = senders(LOOPBACK_ALLOWED, resolve=resolve).job_finished(_finished_job(receiver.url(host="hooks.test")))
    assert delivery.result(timeout=60) is True
    assert lookups == ["hooks.test"]
    assert receiver.requests[0]["headers"]["Host"] == f"hooks.test:{receiver.port}"


def test_a_name_that_resolves_elsewhere_at_send_time_is_refused(receiver_factory, senders):
    """DNS rebinding: the name passed the check at submission (a public address) and resolves to
    loopback when the callback is sent; the send-time check is the one that counts."""
    receiver = receiver_factory()
    answers = iter([["93.184.216.34"], ["127.0.0.1"]])

    def rebinding(_host: str, _port: int) -> list[str]:
        return next(answers)

    url = receiver.url(host="rebind.test")
    check_destination(url, PUBLIC_ONLY.allow, rebinding)  # what the API checked when the job was submitted
    assert senders(PUBLIC_ONLY, resolve=rebinding).job_finished(_finished_job(url)).result(timeout=60) is False
    assert receiver.requests == []


def test_a_name_with_one_private_address_among_public_ones_is_refused(receiver_factory, senders):
    receiver = receiver_factory()
    mixed = senders(PUBLIC_ONLY, resolve=lambda _h, _p: ["93.184.216.34", "127.0.0.1"])
    assert mixed.job_finished(_finished_job(receiver.url(host="mixed.test"))).result(timeout=60) is False
    assert receiver.requests == []


def test_redirects_are_not_followed(receiver_factory, senders):
    target = receiver_factory()
    redirecting = receiver_factory(status=307, headers={"Location": target.url("/stolen")})
    assert senders(LOOPBACK_ALLOWED).job_finished(_finished_job(redirecting.url())).result(timeout=60) is False
    assert len(redirecting.requests) == 1  # a redirect is final: not retried
    assert target.requests == []


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:9/hook", "http://localhost:9/", "http://0.0.0.0/", "http://169.254.169.254/latest/meta-data/",
    "http://[::1]/", "http://[::ffff:127.0.0.1]/", "http://[::ffff:169.254.169.254]/", "http://2130706433/",
    "http://0x7f.1/", "http://0177.0.0.1/", "http://10.1.2.3/", "http://172.16.0.1/", "http://192.168.1.1/",
    "http://100.100.100.200/", "http://[fd00:ec2::254]/", "http://[fe80::1]/", "http://224.0.0.1/",
    "http://240.0.0.1/", "http://[::]/", "http://[64:ff9b::a9fe:a9fe]/", "http://[2002:7f00:1::]/",
])
def test_submission_refuses_non_public_destinations(serve, url):
    live = serve(callbacks=PUBLIC_ONLY)
    with live.client(USER_KEY) as client:
        reply = client.post("/v1/evaluations", json={"reference": REFERENCE, "candidate": TRITON_CANDIDATE,
                                                     "callback_url": url})
    assert reply.status_code == 422, reply.text
    (error,) = reply.json()["detail"]
    assert error["loc"][-1] == "callback_url" and "KERNELJUDGE_CALLBACK_ALLOW" in error["msg"], error


def test_submission_with_a_callback_needs_a_secret(serve):
    live = serve(callbacks=CallbackConfig(secret="", allow=CallbackAllowList.parse("127.0.0.1")))
    with live.client(USER_KEY) as client:
        reply = client.post("/v1/evaluations", json={"reference": REFERENCE, "candidate": TRITON_CANDIDATE,
                                                     "callback_url": "http://127.0.0.1:9/hook"})
        assert reply.status_code == 422, reply.text
        assert "KERNELJUDGE_CALLBACK_SECRET" in reply.json()["detail"][0]["msg"]
        # Without a callback the same submission is fine.
        plain = client.post("/v1/evaluations", json={"reference": REFERENCE, "candidate": TRITON_CANDIDATE})
        assert plain.status_code == 202, plain.text


def test_an_allowed_loopback_destination_is_accepted(serve):
    live = serve(callbacks=LOOPBACK_ALLOWED)
    with live.client(USER_KEY) as client:
        reply = client.post("/v1/evaluations", json={"reference": REFERENCE, "candidate": TRITON_CANDIDATE,
                                                     "callback_url": "http://127.0.0.1:9/hook"})
    assert reply.status_code == 202, reply.text


def test_the_allow_list_format():
    allow = CallbackAllowList.parse("127.0.0.1, 10.0.0.0/8 [::1] hooks.Internal.")
    assert allow.hosts == frozenset({"hooks.internal"}) and len(allow.networks) == 3
    with pytest.raises(ValueError, match="KERNELJUDGE_CALLBACK_ALLOW"):
        CallbackAllowList.parse("http://x/")
