"""Shared test configuration: GPU tests run only where a CUDA device exists; the job-store fixtures; the Triton
candidate builder the engine and policy tests share."""

from __future__ import annotations

import functools
import os
import sys
import textwrap
import uuid

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
# (the store's own tests and the dashboard's queries). The PostgreSQL database is shared by every test and
# run: tests that need an empty store of their own are marked `sqlite_store` and get a new SQLite one only.
POSTGRES_URL = os.environ.get("KERNELJUDGE_TEST_POSTGRES_URL")
STORE_BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


def pytest_configure(config):
    config.addinivalue_line("markers", "sqlite_store: the `store` fixture is a new SQLite store only (for tests "
                                       "that need an empty store of their own)")


def pytest_generate_tests(metafunc):
    """`store` is parametrized here rather than by the fixture, so that a test can ask for SQLite only."""
    if "store" in metafunc.fixturenames:
        own = metafunc.definition.get_closest_marker("sqlite_store") is not None
        metafunc.parametrize("store", ["sqlite"] if own else STORE_BACKENDS, indirect=True)


@pytest.fixture
def store(request, tmp_path):
    """A job store: a new SQLite one, or the shared PostgreSQL database (see pytest_generate_tests)."""
    from worker.jobs.store import JobStore  # only for the tests that use it: the client tests stay light

    if getattr(request, "param", "sqlite") == "sqlite":
        instance = JobStore(f"sqlite:///{tmp_path / 'jobs.db'}")
    else:
        if not POSTGRES_URL:
            pytest.fail("KERNELJUDGE_TEST_POSTGRES_URL is not set: run through scripts/test.sh, which starts "
                        "PostgreSQL, or deselect with -m 'not postgres'")
        instance = JobStore(POSTGRES_URL)
    yield instance
    instance.close()


@pytest.fixture(params=STORE_BACKENDS)
def empty_database_url(request, tmp_path):
    """The URL of an empty database nobody else uses: a new SQLite file, or a new database created on the
    PostgreSQL server (dropped at the end), for tests of what a store does to the database it opens."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'jobs.db'}"
        return
    from sqlalchemy import create_engine, make_url, text

    if not POSTGRES_URL:
        pytest.fail("KERNELJUDGE_TEST_POSTGRES_URL is not set: run through scripts/test.sh, which starts "
                    "PostgreSQL, or deselect with -m 'not postgres'")
    name = f"kj_test_{uuid.uuid4().hex[:16]}"
    server = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    with server.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with server.connect() as conn:
            conn.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
        server.dispose()


# A Triton candidate's source, as the engine tests (SiLU, tests/engine/conftest.py) and the policy tests (an
# add kernel, tests/policy/policy_helpers.py) write them.
TRITON_HEADER = textwrap.dedent('''
    import torch
    import triton
    import triton.language as tl
''')

SILU_KERNEL = textwrap.dedent('''
    @triton.jit
    def silu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask)
        tl.store(y_ptr + offs, x * tl.sigmoid(x), mask=mask)
''')


def _method_body(block: str) -> str:
    return textwrap.indent(textwrap.dedent(block).strip(), " " * 8)


def triton_candidate(forward_body: str, *, kernel: str = SILU_KERNEL, extra: str = "", module: str = "",
                     init: str = "", args: str = "x") -> str:
    """A Triton candidate: the imports, `extra` (module-level lines), `kernel`, `module` (more module-level
    code), then ModelNew, whose `forward(self, <args>)` is `forward_body` and whose `__init__`, when `init` is
    given, runs it after nn.Module's (both bodies dedented, then indented by this function)."""
    source = TRITON_HEADER + extra + kernel
    if module:
        source += "\n" + module.strip("\n") + "\n"
    source += "\nclass ModelNew(torch.nn.Module):\n"
    if init:
        source += "    def __init__(self):\n        super().__init__()\n" + _method_body(init) + "\n"
    return source + f"    def forward(self, {args}):\n" + _method_body(forward_body) + "\n"


def sandbox_reply(spec, script: str, name: str, timeout_s: float = 120.0) -> dict:
    """Run `script` (`python -I -c`) in a sandbox made from `spec` and return the one message it sends."""
    from worker.engine.sandbox import SandboxProcess

    process = SandboxProcess(spec, [sys.executable, "-I", "-c", script], name=name)
    process.start()
    try:
        return process.receive(timeout_s)
    finally:
        process.close(grace_s=0)
