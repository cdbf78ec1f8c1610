"""Shared test configuration: GPU tests run only where a CUDA device exists; the job-store fixture."""

from __future__ import annotations

import functools
import os

import pytest


@functools.lru_cache(maxsize=1)
def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    # Only asks the driver; the pytest process never allocates on the GPU itself.
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if _cuda_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU (run on the device machine: pytest -m gpu)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


# The job store on SQLite and, marked `postgres`, on the real PostgreSQL server scripts/test.sh starts
# (the store's own tests and the dashboard's queries).
POSTGRES_URL = os.environ.get("KERNELJUDGE_TEST_POSTGRES_URL")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request, tmp_path):
    from worker.jobs.store import JobStore  # only for the tests that use it: the client tests stay light

    if request.param == "sqlite":
        instance = JobStore(f"sqlite:///{tmp_path / 'jobs.db'}")
    else:
        if not POSTGRES_URL:
            pytest.fail("KERNELJUDGE_TEST_POSTGRES_URL is not set: run through scripts/test.sh, which starts "
                        "PostgreSQL, or deselect with -m 'not postgres'")
        instance = JobStore(POSTGRES_URL)
    yield instance
    instance.close()
