"""The columns releases before Alembic added to tables an older release had made.

Those releases added them at start with a hand-written `ALTER TABLE ... ADD COLUMN` for each nullable
column the models had and the table lacked; these are all such columns. Each is added only where it
is missing: 0001 creates today's tables whole, so on a database it made there is nothing to do.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

# (table, column, type): all nullable, so the rows already there stay valid.
ADDED = (
    ("jobs", "built_at", sa.Float()),
    ("problems", "profile", sa.String(16)),
    ("problems", "owner_key_id", sa.String(64)),
    ("problems", "degenerate_reference", sa.Boolean()),
)


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    present: dict[str, set[str]] = {}
    for table, name, kind in ADDED:
        if table not in present:
            present[table] = {column["name"] for column in inspector.get_columns(table)}
        if name not in present[table]:
            op.add_column(table, sa.Column(name, kind))


def downgrade() -> None:
    # Nothing a downgrade could undo: on the way back these columns belong to 0001's tables.
    pass
