"""The jobs section of the configuration tree: where jobs are kept and how they travel, read alike by the
API and every worker process (the job store, the Celery broker, the time limit of a job in flight, the
callbacks' secret and allowed destinations).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from worker.config.env_section import EnvSection
from worker.jobs.callback_target import CallbackAllowList

# A job in flight longer than this is failed (the API's reaper) and stopped (Celery's hard limit).
# The engine's default stage limits add up to ~10 minutes; this leaves room for slow builds.
DEFAULT_JOB_TIME_LIMIT_S = 3600.0
DEFAULT_DATA_DIR = Path("./data")


@dataclass(frozen=True)
class CallbackConfig:
    """KERNELJUDGE_CALLBACK_SECRET (empty: callbacks are refused) and KERNELJUDGE_CALLBACK_ALLOW
    (non-public hosts and networks callbacks may still reach; see worker/jobs/callback_target.py)."""

    secret: str = ""
    allow: CallbackAllowList = field(default_factory=CallbackAllowList)

    @property
    def enabled(self) -> bool:
        return bool(self.secret)


class JobsSection(EnvSection):
    # The job store's SQLite file, and the engine's work and build-cache folders; None: the store in
    # ./data, the engine's folders in the system's temporary folder.
    data_dir: Path | None = Field(None, validation_alias="KERNELJUDGE_DATA_DIR")
    database_url: str | None = Field(None, validation_alias="KERNELJUDGE_DATABASE_URL")  # None: SQLite
    broker_url: str | None = Field(None, validation_alias="KERNELJUDGE_BROKER_URL")  # None: embedded workers
    job_time_limit_s: float = Field(DEFAULT_JOB_TIME_LIMIT_S, validation_alias="KERNELJUDGE_JOB_TIME_LIMIT_S")
    callback_secret: str = Field("", validation_alias="KERNELJUDGE_CALLBACK_SECRET")
    callback_allow: CallbackAllowList = Field(default_factory=CallbackAllowList,
                                              validation_alias="KERNELJUDGE_CALLBACK_ALLOW")

    @field_validator("callback_allow", mode="before")
    @classmethod
    def _callback_allow(cls, value: Any) -> Any:
        return CallbackAllowList.parse(value) if isinstance(value, str) else value

    def store_dir(self) -> Path:
        """The folder of the SQLite job store (when no database URL is given)."""
        return (self.data_dir or DEFAULT_DATA_DIR).expanduser()

    @property
    def callbacks(self) -> CallbackConfig:
        return CallbackConfig(secret=self.callback_secret, allow=self.callback_allow)
