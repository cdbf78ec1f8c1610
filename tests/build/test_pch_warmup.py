"""`kerneljudge serve` builds the precompiled torch header at start-up, and /v1/ready waits for it.

The real header takes minutes to compile on a CPU machine (~106 s for the three variants on 2 cores),
so the compiler here is a stand-in (KERNELJUDGE_FAST_CXX): a script that writes its output file when
the test lets it. Everything around it is the real code: find_toolchain, ensure_pchs (flags from
torch, keys, locks, READY files), pch_root, the warm-up thread, serve's start-up and the route.
"""

from __future__ import annotations

import argparse
import threading
import time

import pytest
import torch
import uvicorn
from fastapi.testclient import TestClient

from app import serve_cli
from sandbox_side.build.pch import READY
from worker.engine.build import builder as build
from worker.engine.engine_settings import EngineSettings

FAKE_COMPILER = """#!/bin/sh
# A stand-in for the host compiler: --version answers; a compile is logged, waits for the gate file,
# then writes its -o file (or fails where the fail file exists).
here=$(dirname "$0")
if [ "$1" = "--version" ]; then echo "kj-fake-c++ 1.0"; exit 0; fi
echo "$*" >> "$here/compiles.log"
while [ ! -e "$here/gate" ]; do sleep 0.05; done
if [ -e "$here/fail" ]; then echo "kj_torch.h:1: error: this compiler was told to fail"; exit 1; fi
out=""; previous=""
for arg in "$@"; do [ "$previous" = "-o" ] && out="$arg"; previous="$arg"; done
echo compiled > "$out"
"""


class FakeCompiler:
    def __init__(self, directory):
        directory.mkdir()
        self.directory = directory
        self.path = directory / "kj-fake-cxx"
        self.path.write_text(FAKE_COMPILER)
        self.path.chmod(0o755)

    def compiles(self) -> list[str]:
        log = self.directory / "compiles.log"
        return log.read_text().splitlines() if log.exists() else []

    def wait_for_compiles(self, count: int, timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        while len(self.compiles()) < count:
            assert time.monotonic() < deadline, f"{len(self.compiles())} compiles started, not {count}"
            time.sleep(0.05)

    def open_gate(self, fail: bool = False) -> None:
        if fail:
            (self.directory / "fail").write_text("")
        (self.directory / "gate").write_text("")


@pytest.fixture
def compiler(tmp_path, monkeypatch):
    fake = FakeCompiler(tmp_path / "compiler")
    monkeypatch.setenv("KERNELJUDGE_FAST_CXX", str(fake.path))
    yield fake
    fake.open_gate()  # a thread still waiting on it finishes


def serve(tmp_path, monkeypatch):
    """`kerneljudge serve --device cuda` up to uvicorn.run, on a CPU machine: one visible "GPU" and no
    workers (none is started), no sandbox self-check (it would look for the GPU)."""
    monkeypatch.setenv("KERNELJUDGE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("KERNELJUDGE_API_KEYS", "serve-test-key")
    monkeypatch.setenv("KERNELJUDGE_SKIP_SELFCHECK", "1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    for name in ("KERNELJUDGE_DATABASE_URL", "KERNELJUDGE_BROKER_URL"):
        monkeypatch.delenv(name, raising=False)
    served = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: served.append(app))
    parser = argparse.ArgumentParser()
    serve_cli.add_arguments(parser)
    assert serve_cli.run(parser.parse_args(["--device", "cuda", "--workers", "0"])) == 0
    [app] = served
    # No worker runs here; readiness is about the header.
    monkeypatch.setattr(app.state.launcher, "workers_alive", lambda: 1)
    return app


def test_serve_builds_the_header_at_start_and_is_not_ready_until_it_exists(tmp_path, monkeypatch, compiler):
    app = serve(tmp_path, monkeypatch)
    try:
        warmup = app.state.pch_warmup
        assert warmup is not None
        compiler.wait_for_compiles(3)  # the three variants, started with no job in sight
        client = TestClient(app)
        warming = client.get("/v1/ready")
        assert warming.status_code == 503
        assert (warming.json()["ready"], warming.json()["precompiled_header"]) == (False, "warming")
        # A build arriving now waits for this build of the header; it does not start a second one.
        settings = EngineSettings.configured()
        waited = threading.Thread(target=build.pch_root, args=(settings, torch.__version__))
        waited.start()
        time.sleep(1.0)
        assert waited.is_alive() and not warmup.done
        compiler.open_gate()
        assert warmup.wait(120)
        waited.join(120)
        assert not waited.is_alive()
        assert len(compiler.compiles()) == 3
        headers = sorted((settings.build_cache / "pch").glob(f"*/{READY}"))
        assert len(headers) == 3
        ready = client.get("/v1/ready")
        assert ready.status_code == 200
        assert (ready.json()["ready"], ready.json()["precompiled_header"]) == (True, "ok")
    finally:
        app.state.store.close()


def test_a_header_that_fails_leaves_the_service_ready_and_says_why(tmp_path, monkeypatch, compiler):
    app = serve(tmp_path, monkeypatch)
    try:
        compiler.open_gate(fail=True)
        assert app.state.pch_warmup.wait(120)
        body = TestClient(app).get("/v1/ready").json()
        assert body["ready"] is True
        assert body["precompiled_header"].startswith("failed: RuntimeError: building the precompiled torch header")
        assert "this compiler was told to fail" in body["precompiled_header"]
        assert "full build path" in body["precompiled_header"]
        # Builds go on without it (the fast path finds no header and takes the full build), and do not
        # try the failed header again in this process.
        settings = EngineSettings.configured()
        assert build.pch_root(settings, torch.__version__) == settings.build_cache / "pch"
        assert len(compiler.compiles()) == 3
    finally:
        app.state.store.close()


def test_a_service_that_builds_no_cuda_builds_no_header(tmp_path):
    settings = EngineSettings()
    settings.build_cache = tmp_path / "build-cache"
    assert build.start_pch_warmup(settings, "cpu") is None
    assert not settings.build_cache.exists()
