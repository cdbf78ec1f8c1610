"""Schema migrations of the job store (Alembic), applied by every JobStore when it opens a database.

`versions/` holds the revisions: 0001 creates the tables, 0002 adds the columns later releases gave
tables an older release had made. A new schema change is a new revision there (write it by hand, or
let Alembic draft it against a database at head:
`with engine.connect() as c: command.revision(alembic_config(c), "what changes", autogenerate=True)`),
and the models in schema.py change with it.

`upgrade_schema` runs at start, with no alembic.ini (the script location is this folder):
- a database at the head revision is left alone (one read, no lock);
- otherwise the upgrade runs in one transaction that holds the database's write lock, so processes
  starting at once on one database take turns and the later ones find it done: on PostgreSQL a
  transaction-scoped advisory lock (DDL is transactional there), on SQLite `BEGIN IMMEDIATE` (the
  file's write lock; the others wait up to the busy timeout);
- a database a newer release upgraded (a revision this one does not know) is left as it is, with a
  warning, as the releases before Alembic ignored columns they did not know;
- a database made before Alembic (no alembic_version table) that already holds every table and column
  of the models is stamped at 0002, the schema those releases ended with; one that lacks some goes
  through 0001 and 0002, which create and add only what is missing, and keeps its rows.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, inspect, text

from worker.jobs.store.schema import Base

log = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(__file__).resolve().parent

# The revision whose schema the releases before Alembic ended with (what they made with create_all()
# and their ALTER TABLEs): an unversioned database holding all of it is stamped there.
UNVERSIONED_REVISION = "0002"

VERSION_TABLE = "alembic_version"  # Alembic's default name

# Alembic's `context` and `op` are module globals: one migration at a time in a process (whatever the
# database), then the database's own lock between processes.
_RUNNING = threading.Lock()

# pg_advisory_xact_lock key of this application's schema upgrades (any fixed 64-bit number):
# the bytes of "kjschema".
ADVISORY_LOCK_KEY = int.from_bytes(b"kjschema", "big")


def alembic_config(connection: Connection | None = None) -> Config:
    """Alembic's configuration for the job store; env.py runs the migrations on `connection`."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR).replace("%", "%%"))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


@functools.cache
def _script() -> ScriptDirectory:
    return ScriptDirectory.from_config(alembic_config())


def head_revision() -> str | None:
    return _script().get_current_head()


@functools.cache
def known_revisions() -> frozenset[str]:
    return frozenset(script.revision for script in _script().walk_revisions())


def current_revision(connection: Connection) -> str | None:
    """The database's revision (None: no alembic_version table, or an empty one). Read directly:
    Alembic's MigrationContext would log two lines at every start."""
    if not inspect(connection).has_table(VERSION_TABLE):
        return None
    return connection.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar()


def upgrade_schema(engine: Engine) -> None:
    """Bring the database to the head revision (see the module's docstring)."""
    head = head_revision()
    with engine.connect() as connection:
        current = current_revision(connection)
    if current == head:
        return
    if current is not None and current not in known_revisions():
        log.warning("job store: the database is at schema revision %s, which this release does not know "
                    "(a newer release upgraded it; this one's head is %s): left as it is", current, head)
        return
    with _RUNNING, _write_locked(engine) as connection:
        before = current_revision(connection)  # another store may have upgraded it meanwhile
        if before == head:
            return
        config = alembic_config(connection)
        if before is None and _holds_the_models_schema(connection):
            command.stamp(config, UNVERSIONED_REVISION)
        command.upgrade(config, "head")
    log.info("job store: schema at revision %s (was %s)", head, before or "unversioned")


@contextmanager
def _write_locked(engine: Engine) -> Iterator[Connection]:
    """A connection in a transaction that holds the lock on schema changes; committed on success."""
    with engine.connect() as connection:
        if engine.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": ADVISORY_LOCK_KEY})
        elif engine.dialect.name == "sqlite":
            # pysqlite would begin a deferred transaction only at the first DML: take the write lock now.
            connection.exec_driver_sql("BEGIN IMMEDIATE")
        yield connection
        connection.commit()


def _holds_the_models_schema(connection: Connection) -> bool:
    inspector = inspect(connection)
    tables = set(inspector.get_table_names())
    for table in Base.metadata.sorted_tables:
        if table.name not in tables:
            return False
        present = {column["name"] for column in inspector.get_columns(table.name)}
        if not {column.name for column in table.columns} <= present:
            return False
    return True
