"""The API section of the configuration tree: what `kerneljudge serve`'s HTTP API reads (keys, job caps,
required rules, request limits, its embedded workers). `kerneljudge serve`'s flags --device, --workers and
--open override the matching fields (app/serve_cli.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, ValidationInfo, field_validator

from worker.config.api_keys import ApiKey, parse_keys, parse_rules
from worker.config.env_section import EnvSection
from worker.config.job_caps import JobCaps


class ApiSection(EnvSection):
    # Caps of every key's jobs and of admin keys' (and open mode's), `name=value` items (job_caps.py).
    # Declared before the keys: each key's own caps start from them.
    job_caps: JobCaps = Field(default_factory=JobCaps, validation_alias="KERNELJUDGE_JOB_CAPS")
    admin_job_caps: JobCaps = Field(default_factory=JobCaps.model_maxima,
                                    validation_alias="KERNELJUDGE_ADMIN_JOB_CAPS")
    # A file with one key per line (the syntax of KERNELJUDGE_API_KEYS, # comments), read with them.
    keys_file: Path | None = Field(None, validation_alias="KERNELJUDGE_API_KEYS_FILE")
    # sha256(key) -> ApiKey (api_keys.py); checked with the keys file even when the variable is unset.
    api_keys: dict[str, ApiKey] = Field(default_factory=dict, validation_alias="KERNELJUDGE_API_KEYS",
                                        validate_default=True)
    # Rules no job may switch off (short ids), for every key without a `required_rules` item of its own.
    required_rules: frozenset[str] = Field(frozenset(), validation_alias="KERNELJUDGE_REQUIRED_RULES")
    open_mode: bool = Field(False, validation_alias="KERNELJUDGE_OPEN")  # no keys; loopback only (serve_cli)
    # Embedded workers; None: one per visible GPU, else one CPU worker.
    local_workers: int | None = Field(None, validation_alias="KERNELJUDGE_LOCAL_WORKERS")
    device: str = Field("auto", validation_alias="KERNELJUDGE_DEVICE")  # of the embedded workers
    max_body_bytes: int = Field(16 * 1024 * 1024, validation_alias="KERNELJUDGE_MAX_BODY_BYTES")
    max_batch_items: int = Field(512, validation_alias="KERNELJUDGE_MAX_BATCH")
    max_ids_per_read: int = 1000
    max_wait_s: float = Field(120.0, validation_alias="KERNELJUDGE_MAX_WAIT_S")
    reward_wait_s: float = Field(1800.0, validation_alias="KERNELJUDGE_REWARD_WAIT_S")
    rate_limit_per_s: float = Field(200.0, validation_alias="KERNELJUDGE_RATE_LIMIT")  # requests per key
    rate_burst: int = Field(400, validation_alias="KERNELJUDGE_RATE_BURST")
    max_active_per_key: int = Field(5000, validation_alias="KERNELJUDGE_MAX_ACTIVE_PER_KEY")
    max_queue: int = Field(20000, validation_alias="KERNELJUDGE_MAX_QUEUE")
    allow_unsandboxed: bool = Field(False, validation_alias="KERNELJUDGE_ALLOW_UNSANDBOXED")
    # Failed authentications per second (and burst) one client address may make before it is answered
    # 429, and all addresses together.
    auth_fail_rate_per_s: float = Field(1.0, validation_alias="KERNELJUDGE_AUTH_FAIL_RATE")
    auth_fail_burst: int = Field(30, validation_alias="KERNELJUDGE_AUTH_FAIL_BURST")
    auth_fail_global_rate_per_s: float = Field(100.0, validation_alias="KERNELJUDGE_AUTH_FAIL_GLOBAL_RATE")

    @field_validator("job_caps", mode="before")
    @classmethod
    def _job_caps(cls, value: Any) -> Any:
        return JobCaps().with_items(value, "KERNELJUDGE_JOB_CAPS") if isinstance(value, str) else value

    @field_validator("admin_job_caps", mode="before")
    @classmethod
    def _admin_job_caps(cls, value: Any) -> Any:
        if isinstance(value, str):
            return JobCaps.model_maxima().with_items(value, "KERNELJUDGE_ADMIN_JOB_CAPS")
        return value

    @field_validator("api_keys", mode="before")
    @classmethod
    def _api_keys(cls, value: Any, info: ValidationInfo) -> Any:
        keys_file = info.data.get("keys_file")
        if not isinstance(value, str) and not keys_file:
            return value
        text = value if isinstance(value, str) else ""
        if keys_file:
            text += "\n" + Path(keys_file).read_text()  # OSError as it is: the file is named in it
        given = value if isinstance(value, dict) else {}
        return {**given, **parse_keys(text, info.data.get("job_caps", JobCaps()),
                                      info.data.get("admin_job_caps", JobCaps.model_maxima()))}

    @field_validator("required_rules", mode="before")
    @classmethod
    def _required_rules(cls, value: Any) -> Any:
        return parse_rules(value, "KERNELJUDGE_REQUIRED_RULES") if isinstance(value, str) else value

    def required_rules_of(self, key: ApiKey | None) -> frozenset[str]:
        """The rules a key's jobs may not switch off: its own list, else the server's."""
        own = key.required_rules if key is not None else None
        return own if own is not None else self.required_rules
