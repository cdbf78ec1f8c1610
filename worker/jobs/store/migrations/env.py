"""Alembic's environment for the job store's migrations.

The store runs them itself at start (`upgrade_schema` in this package's __init__.py), on a connection it
holds in a transaction (and, on PostgreSQL, an advisory lock): that connection comes in
`config.attributes["connection"]`. There is no alembic.ini and no offline (--sql) mode.
"""

from __future__ import annotations

from alembic import context

from worker.jobs.store.schema import Base

connection = context.config.attributes.get("connection")
if connection is None or context.is_offline_mode():
    raise RuntimeError("the job store's migrations run on a connection: see worker/jobs/store/migrations/__init__.py")

context.configure(connection=connection, target_metadata=Base.metadata)
with context.begin_transaction():
    context.run_migrations()
