"""The job store's schema migrations (Alembic, worker/jobs/store/migrations/) on SQLite and, marked
`postgres`, on a new database of the PostgreSQL server: what opening a store does to its database."""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, event, inspect, text

from worker.jobs.store import JobStore, NewJob, problem_id_for
from worker.jobs.store.jobs import _make_engine
from worker.jobs.store.migrations import current_revision, head_revision, upgrade_schema
from worker.jobs.store.schema import Base

OLD_PROBLEM = problem_id_for("old reference")
# The tables of the first release (no alembic_version, no built_at on jobs, problems without profile,
# owner and degeneracy, none of the later tables), as its create_all() made them.
FIRST_RELEASE_DDL = [
    """CREATE TABLE jobs (
        id VARCHAR(32) NOT NULL, status VARCHAR(16) NOT NULL, priority INTEGER NOT NULL,
        created_at FLOAT NOT NULL, building_at FLOAT, running_at FLOAT, finished_at FLOAT,
        updated_at FLOAT NOT NULL, problem_id VARCHAR(64) NOT NULL, submission TEXT NOT NULL, result TEXT,
        verdict VARCHAR(32), worker VARCHAR(200), gpu VARCHAR(64), attempts INTEGER NOT NULL, error TEXT,
        api_key_id VARCHAR(64) NOT NULL, idempotency_key VARCHAR(200), submission_hash VARCHAR(64) NOT NULL,
        PRIMARY KEY (id), CONSTRAINT uq_jobs_key_idempotency UNIQUE (api_key_id, idempotency_key))""",
    "CREATE INDEX ix_jobs_key_status ON jobs (api_key_id, status)",
    "CREATE INDEX ix_jobs_claim ON jobs (status, priority, created_at)",
    """CREATE TABLE problems (
        id VARCHAR(64) NOT NULL, reference TEXT NOT NULL, name VARCHAR(200), created_at FLOAT NOT NULL,
        PRIMARY KEY (id))""",
    f"INSERT INTO problems VALUES ('{OLD_PROBLEM}', 'old reference', 'old problem', 1.0)",
    f"""INSERT INTO jobs (id, status, priority, created_at, finished_at, updated_at, problem_id, submission,
        result, verdict, attempts, api_key_id, submission_hash)
        VALUES ('job1', 'done', 0, 1.0, 2.0, 2.0, '{OLD_PROBLEM}', '{{"candidate": "old candidate", "options": {{}}}}',
                '{{"status": "ok", "reward": 0.5}}', 'ok', 1, 'key_old', 'hash1')""",
]
SCHEMA_CHANGES = ("CREATE", "ALTER", "DROP", "INSERT", "UPDATE", "DELETE", "BEGIN IMMEDIATE")


@pytest.fixture
def engine(empty_database_url) -> Iterator[Engine]:
    instance = _make_engine(empty_database_url)
    yield instance
    instance.dispose()


@contextmanager
def _statements(engine: Engine) -> Iterator[list[str]]:
    """The SQL statements `engine` runs inside the block."""
    seen: list[str] = []

    def record(conn, cursor, statement, parameters, context, executemany):
        seen.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


def _assert_at_head_with_the_models_schema(engine: Engine) -> None:
    with engine.connect() as conn:
        assert current_revision(conn) == head_revision() == "0002"
        assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []


def _changes(statements: list[str]) -> list[str]:
    return [s for s in statements if s.lstrip().upper().startswith(SCHEMA_CHANGES)]


def test_a_fresh_database_gets_the_schema(engine, empty_database_url):
    store = JobStore(empty_database_url)
    try:
        _assert_at_head_with_the_models_schema(engine)
        assert set(inspect(engine).get_table_names()) == {table.name for table in Base.metadata.sorted_tables} | {
            "alembic_version"}
        problem, _ = store.put_problem("ref", profile="full", key_id="k")
        job, _ = store.create_job(NewJob(problem_id=problem.id, submission={"candidate": "x"}, api_key_id="k"))
        assert store.get(job.id).status == "queued" and store.get_problem(problem.id, "k").profile == "full"
    finally:
        store.close()


def test_a_database_of_the_first_release_is_upgraded_and_keeps_its_rows(engine, empty_database_url):
    with engine.begin() as conn:
        for statement in FIRST_RELEASE_DDL:
            conn.execute(text(statement))
    store = JobStore(empty_database_url)
    try:
        _assert_at_head_with_the_models_schema(engine)
        job = store.get("job1")
        assert (job.status, job.problem_id, job.api_key_id) == ("done", OLD_PROBLEM, "key_old")
        assert job.submission == {"candidate": "old candidate", "options": {}}
        assert job.result == {"status": "ok", "reward": 0.5} and job.built_at is None
        problem = store.get_problem(OLD_PROBLEM)
        assert (problem.reference, problem.name, problem.created_at) == ("old reference", "old problem", 1.0)
        assert problem.profile is None and problem.owner_key_id is None and problem.degenerate_reference is None
        # The added columns and tables work.
        store.note_degenerate_reference(OLD_PROBLEM, True)
        store.put_problem("old reference", profile="partial", key_id="key_new")
        assert store.get_problem(OLD_PROBLEM).degenerate_reference is True
        assert store.get_problem(OLD_PROBLEM, "key_new").profile == "partial"
    finally:
        store.close()


def test_a_database_with_todays_schema_and_no_version_is_stamped(engine, empty_database_url):
    """What the releases before Alembic made with create_all(): recorded at 0002, nothing else changed."""
    Base.metadata.create_all(engine)
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO store_meta (key, value) VALUES ('kept', 'yes')"))
    with _statements(engine) as statements:
        upgrade_schema(engine)
    changes = _changes(statements)
    assert changes[0].lstrip().upper().startswith("BEGIN IMMEDIATE") == (engine.dialect.name == "sqlite")
    assert [s.split("(")[0].split()[:3] for s in changes if not s.upper().startswith("BEGIN")] == [
        ["CREATE", "TABLE", "alembic_version"], ["INSERT", "INTO", "alembic_version"]]
    _assert_at_head_with_the_models_schema(engine)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT value FROM store_meta WHERE key = 'kept'")).scalar() == "yes"


def test_starting_up_twice_changes_nothing_the_second_time(engine, empty_database_url):
    JobStore(empty_database_url).close()
    with engine.connect() as conn:
        tables = sorted(inspect(conn).get_table_names())
    with _statements(engine) as statements:
        upgrade_schema(engine)
    assert statements and _changes(statements) == []  # it read the version, and nothing else ran
    _assert_at_head_with_the_models_schema(engine)
    assert sorted(inspect(engine).get_table_names()) == tables
    second = JobStore(empty_database_url)  # and a whole store opens it as well
    second.close()


def _open_and_add_a_job(url: str, barrier, results, index: int) -> None:
    """In a process of its own: open the store when every process is ready, then add a job."""
    barrier.wait()
    try:
        store = JobStore(url)
        try:
            problem, _ = store.put_problem("shared reference")
            job, _ = store.create_job(NewJob(problem_id=problem.id, submission={"candidate": str(index)},
                                             api_key_id="k"))
            results.put((index, job.id))
        finally:
            store.close()
    except BaseException as exc:  # reported by the test
        results.put((index, f"failed: {exc!r}"))


def test_stores_started_at_once_on_one_database_all_work(empty_database_url):
    """Processes, not threads: they meet on the database's own lock, as a server and its workers do."""
    count = 4
    spawn = multiprocessing.get_context("spawn")
    barrier, results = spawn.Barrier(count), spawn.Queue()
    processes = [spawn.Process(target=_open_and_add_a_job, args=(empty_database_url, barrier, results, i))
                 for i in range(count)]
    for process in processes:
        process.start()
    try:
        jobs = dict(results.get(timeout=120) for _ in processes)
    finally:
        for process in processes:
            process.join(60)
    assert [process.exitcode for process in processes] == [0] * count
    assert sorted(jobs) == list(range(count)) and not [j for j in jobs.values() if j.startswith("failed")], jobs
    store = JobStore(empty_database_url)
    try:
        assert [store.get(jobs[i]).submission["candidate"] for i in range(count)] == [str(i) for i in range(count)]
        _assert_at_head_with_the_models_schema(store.engine)
    finally:
        store.close()
