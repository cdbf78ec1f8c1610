"""The job store's tables, as the release that adopted Alembic defines them.

A database made before then (unversioned: no alembic_version table) may hold some of them already,
created by `create_all()`: only the missing tables are created here, and 0002 adds the columns that
later releases gave the older ones. Revisions after 0002 may take their predecessor's schema as given.

Revision ID: 0001
Revises:
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def _jobs() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("building_at", sa.Float()),
        sa.Column("built_at", sa.Float()),
        sa.Column("running_at", sa.Float()),
        sa.Column("finished_at", sa.Float()),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.Column("problem_id", sa.String(64), nullable=False),
        sa.Column("submission", sa.Text(), nullable=False),
        sa.Column("result", sa.Text()),
        sa.Column("verdict", sa.String(32)),
        sa.Column("worker", sa.String(200)),
        sa.Column("gpu", sa.String(64)),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text()),
        sa.Column("api_key_id", sa.String(64), nullable=False),
        sa.Column("idempotency_key", sa.String(200)),
        sa.Column("submission_hash", sa.String(64), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("api_key_id", "idempotency_key", name="uq_jobs_key_idempotency"),
    )
    op.create_index("ix_jobs_claim", "jobs", ["status", "priority", "created_at"])
    op.create_index("ix_jobs_key_status", "jobs", ["api_key_id", "status"])


def _problems() -> None:
    op.create_table(
        "problems",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("reference", sa.Text(), nullable=False),
        sa.Column("name", sa.String(200)),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("profile", sa.String(16)),
        sa.Column("owner_key_id", sa.String(64)),
        sa.Column("degenerate_reference", sa.Boolean()),
        sa.PrimaryKeyConstraint("id"),
    )


def _problem_profiles() -> None:
    op.create_table(
        "problem_profiles",
        sa.Column("problem_id", sa.String(64), nullable=False),
        sa.Column("api_key_id", sa.String(64), nullable=False),
        sa.Column("profile", sa.String(16), nullable=False),
        sa.PrimaryKeyConstraint("problem_id", "api_key_id"),
    )


def _store_meta() -> None:
    op.create_table(
        "store_meta",
        sa.Column("key", sa.String(64), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("key"),
    )


def _baselines() -> None:
    op.create_table(
        "baselines",
        sa.Column("key_digest", sa.String(40), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("reference_sha256", sa.String(64), nullable=False),
        sa.Column("device", sa.String(16), nullable=False),
        sa.Column("device_model", sa.String(200), nullable=False),
        sa.Column("torch", sa.String(64)),
        sa.Column("triton", sa.String(64)),
        sa.Column("record", sa.Text(), nullable=False),
        sa.Column("measured_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("key_digest", "kind"),
    )


TABLES = {"jobs": _jobs, "problems": _problems, "problem_profiles": _problem_profiles,
          "store_meta": _store_meta, "baselines": _baselines}


def upgrade() -> None:
    present = set(sa.inspect(op.get_bind()).get_table_names())
    for name, create in TABLES.items():
        if name not in present:
            create()


def downgrade() -> None:
    for name in reversed(list(TABLES)):
        op.drop_table(name)
