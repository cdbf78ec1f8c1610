"""SQL tables of the job store (SQLAlchemy 2 declarative).

JSON payloads are kept in Text columns as JSON strings (not a JSON column type) so that any
text a user sends, NUL characters included, round-trips on SQLite and PostgreSQL alike.
Timestamps are UNIX seconds (float): portable, and converted to ISO 8601 at the API edge.
"""

from __future__ import annotations

from sqlalchemy import Float, Index, Integer, String, Text, UniqueConstraint
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
