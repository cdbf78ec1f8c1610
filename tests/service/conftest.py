"""Fixtures starting the real app (see helpers.py) for each test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from service.helpers import LiveServer, make_config, start_server


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., LiveServer]]:
    """Start servers with given settings overrides (data dir under tmp_path); stopped at the end."""
    started: list[LiveServer] = []

    def _serve(**overrides) -> LiveServer:
        overrides.setdefault("data_dir", tmp_path / "data")
        data_dir = overrides.pop("data_dir")
        live = start_server(make_config(data_dir, **overrides))
        started.append(live)
        return live

    yield _serve
    for live in started:
        if live.thread.is_alive():
            live.stop()


@pytest.fixture
def queued_server(serve) -> LiveServer:
    """A server with no workers: jobs stay queued, so API behaviour is deterministic."""
    return serve(local_workers=0)


@pytest.fixture
def working_server(serve) -> LiveServer:
    """A server with one CPU worker running the real engine."""
    return serve(local_workers=1)
