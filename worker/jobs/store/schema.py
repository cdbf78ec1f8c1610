"""SQL tables of the job store (SQLAlchemy 2 declarative).

A change here is also a schema revision in migrations/versions/ (Alembic), which JobStore applies
to the databases it opens.

JSON payloads are kept in Text columns as JSON strings (not a JSON column type) so that any
text a user sends, NUL characters included, round-trips on SQLite and PostgreSQL alike.
Timestamps are UNIX seconds (float): portable, and converted to ISO 8601 at the API edge.
"""

from __future__ import annotations

from sqlalchemy import Boolean, Float, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class JobRow(Base):
    __tablename__ = "jobs"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    status: Mapped[str] = mapped_column(String(16), nullable=False)
    priority: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    created_at: Mapped[float] = mapped_column(Float, nullable=False)
    building_at: Mapped[float | None] = mapped_column(Float)
    # Set when the pipeline has prepared (validated, built) the job; it then waits for its GPU.
    built_at: Mapped[float | None] = mapped_column(Float)
    running_at: Mapped[float | None] = mapped_column(Float)
    finished_at: Mapped[float | None] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float, nullable=False)
    problem_id: Mapped[str] = mapped_column(String(64), nullable=False)
    # {"candidate"|"completion", "options", "callback_url", "extraction"} as JSON text.
    submission: Mapped[str] = mapped_column(Text, nullable=False)
    result: Mapped[str | None] = mapped_column(Text)
    # Reward and verdict copied out of `result` for cheap export filters and metrics.
    verdict: Mapped[str | None] = mapped_column(String(32))
    worker: Mapped[str | None] = mapped_column(String(200))
    gpu: Mapped[str | None] = mapped_column(String(64))
    attempts: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    error: Mapped[str | None] = mapped_column(Text)
    api_key_id: Mapped[str] = mapped_column(String(64), nullable=False)
    idempotency_key: Mapped[str | None] = mapped_column(String(200))
    # sha256 of the submission, to tell a replay from a different body under the same key.
    submission_hash: Mapped[str] = mapped_column(String(64), nullable=False)

    __table_args__ = (
        UniqueConstraint("api_key_id", "idempotency_key", name="uq_jobs_key_idempotency"),
        Index("ix_jobs_claim", "status", "priority", "created_at"),
        Index("ix_jobs_key_status", "api_key_id", "status"),
    )


class ProblemRow(Base):
    __tablename__ = "problems"

    # sha256 hex of the reference source (UTF-8): the same reference always gets the same id.
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    reference: Mapped[str] = mapped_column(Text, nullable=False)
    name: Mapped[str | None] = mapped_column(String(200))
    created_at: Mapped[float] = mapped_column(Float, nullable=False)
    # The policy profile its owner's jobs get when they do not choose one (None: partial); for a
    # problem without an owner, every key's jobs (unless the key chose its own: ProblemProfileRow).
    profile: Mapped[str | None] = mapped_column(String(16))
    # The API key that registered it: only it changes `profile`, only it or an admin key `name`.
    # None: registered by the operator (`serve --problems`) or by a version that did not record owners.
    owner_key_id: Mapped[str | None] = mapped_column(String(64))
    # Whether the reference's outputs barely depend on its inputs, as the last evaluation measured
    # (None: not measured yet).
    degenerate_reference: Mapped[bool | None] = mapped_column(Boolean)


class ProblemProfileRow(Base):
    """The profile another API key (not the owner) chose for a problem: for that key's jobs only."""

    __tablename__ = "problem_profiles"

    problem_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    api_key_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    profile: Mapped[str] = mapped_column(String(16), nullable=False)


class StoreMetaRow(Base):
    """Facts about the store itself, e.g. which one-time data repairs already ran."""

    __tablename__ = "store_meta"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text, nullable=False)


class BaselineRow(Base):
    """A per-problem timing baseline (worker/engine/timing/baselines.py), measured once, shared by every worker.

    One row per (key digest, kind). The key's parts are kept beside the digest so that a row says what
    it is about; the record itself is JSON (medians, run counts, when, on what)."""

    __tablename__ = "baselines"

    key_digest: Mapped[str] = mapped_column(String(40), primary_key=True)
    kind: Mapped[str] = mapped_column(String(32), primary_key=True)
    reference_sha256: Mapped[str] = mapped_column(String(64), nullable=False)
    device: Mapped[str] = mapped_column(String(16), nullable=False)
    device_model: Mapped[str] = mapped_column(String(200), nullable=False)
    torch: Mapped[str | None] = mapped_column(String(64))
    triton: Mapped[str | None] = mapped_column(String(64))
    record: Mapped[str] = mapped_column(Text, nullable=False)
    measured_at: Mapped[float] = mapped_column(Float, nullable=False)
