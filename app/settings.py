"""Service configuration, read from the environment (`kerneljudge serve` flags override some).

KERNELJUDGE_API_KEYS        comma-separated keys; a key ending in ":admin" may also export and
                            read every client's jobs; `name=value` items after a key, separated by
                            spaces, are that key's own job caps ("key1 run_s=900 trials=50,key2"), and
                            `required_rules=KJ-R01+KJ-R20` the rules its jobs may not disable (`none`: any)
KERNELJUDGE_REQUIRED_RULES  rules no job may switch off in `options.policy.disabled_rules` (short or
                            full ids, separated by commas, spaces or "+"), for every key without its own
KERNELJUDGE_API_KEYS_FILE   file with one key per line (same syntax, # comments)
KERNELJUDGE_JOB_CAPS        caps of every key's jobs, `name=value` items (app/caps.py: run_s, timing_s,
                            build_s, timing_budget_s, trials, timing_max_runs, priority)
KERNELJUDGE_ADMIN_JOB_CAPS  the same for admin keys (default: the request models' own bounds)
KERNELJUDGE_AUTH_FAIL_RATE, KERNELJUDGE_AUTH_FAIL_BURST: failed authentications per second (and
                            burst) one client address may make before it is answered 429;
                            KERNELJUDGE_AUTH_FAIL_GLOBAL_RATE: the same for all addresses together
KERNELJUDGE_OPEN            "1": no keys needed; only allowed when bound to a loopback address
KERNELJUDGE_DATA_DIR        SQLite file location (default ./data)
KERNELJUDGE_DATABASE_URL    SQLAlchemy URL instead of SQLite (postgresql://... uses psycopg3)
KERNELJUDGE_BROKER_URL      redis://... : hand jobs to Celery workers instead of local threads
KERNELJUDGE_LOCAL_WORKERS   number of embedded workers (default: one per visible GPU, else 1)
KERNELJUDGE_DEVICE          auto | cpu | cuda  (device of the embedded workers)
KERNELJUDGE_MAX_BODY_BYTES, KERNELJUDGE_MAX_BATCH, KERNELJUDGE_MAX_WAIT_S,
KERNELJUDGE_REWARD_WAIT_S, KERNELJUDGE_RATE_LIMIT (requests/s per key), KERNELJUDGE_RATE_BURST,
KERNELJUDGE_MAX_ACTIVE_PER_KEY, KERNELJUDGE_MAX_QUEUE, KERNELJUDGE_ALLOW_UNSANDBOXED,
KERNELJUDGE_JOB_TIME_LIMIT_S (a job in flight longer than this is failed)
KERNELJUDGE_CALLBACK_SECRET signs callbacks; without it `callback_url` is refused
KERNELJUDGE_CALLBACK_ALLOW  non-public hosts/CIDRs callbacks may still reach (worker/jobs/callback_target.py)
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from app.caps import JobCaps
from worker.jobs.callbacks import CallbackConfig
from worker.jobs.store.jobs import (
    DEFAULT_JOB_TIME_LIMIT_S,
    default_data_dir,
    job_time_limit_from_env,
    sqlite_url,
)

# A rule's short id: a static rule (KJ308) or a runtime one (KJ-R20), optionally followed by its name.
_RULE_ID = re.compile(r"^(KJ\d{3}|KJ-R\d{2})(-[a-z0-9-]+)?$")
REQUIRED_RULES_ITEM = "required_rules"


def parse_rules(text: str, where: str) -> frozenset[str]:
    """Short rule ids out of `KJ-R01+KJ-R20`, `KJ-R01, KJ308` or full ids; `none` (or nothing): none."""
    found = set()
    for item in re.split(r"[\s,+]+", text.strip()):
        if not item or item.lower() == "none":
            continue
        match = _RULE_ID.match(item)
        if match is None:
            raise ValueError(f"{where}: {item!r} is not a rule id (write KJ308 or KJ-R20, or a full id)")
        found.add(match.group(1))
    return frozenset(found)


@dataclass(frozen=True)
class ApiKey:
    key_id: str  # stored with jobs instead of the key itself
    admin: bool
    caps: JobCaps = JobCaps()
    # Rules this key's jobs may not switch off (short ids); None: the server's KERNELJUDGE_REQUIRED_RULES.
    required_rules: frozenset[str] | None = None


def key_hash(raw_key: str) -> str:
    """sha256 of an API key: how keys are stored and looked up (never the key itself)."""
    return hashlib.sha256(raw_key.encode("utf-8", "surrogatepass")).hexdigest()


def key_id_for(raw_key: str) -> str:
    return "key_" + hashlib.sha256(raw_key.encode()).hexdigest()[:16]


def parse_keys(text: str, caps: JobCaps = JobCaps(), admin_caps: JobCaps | None = None) -> dict[str, ApiKey]:
    """Map sha256(key) -> ApiKey, from comma- or newline-separated entries `KEY` or `KEY:admin`, each
    optionally followed by the key's own caps as space-separated `name=value` items."""
    admin_caps = admin_caps if admin_caps is not None else JobCaps.model_maxima()
    keys: dict[str, ApiKey] = {}
    for entry in text.replace("\n", ",").split(","):
        tokens = entry.split("#", 1)[0].split()
        if not tokens:
            continue
        key, items = tokens[0], tokens[1:]
        admin = key.endswith(":admin")
        raw = key[: -len(":admin")] if admin else key
        rules = [item.partition("=")[2] for item in items if item.startswith(f"{REQUIRED_RULES_ITEM}=")]
        cap_items = [item for item in items if not item.startswith(f"{REQUIRED_RULES_ITEM}=")]
        own_caps = (admin_caps if admin else caps).with_items(" ".join(cap_items), f"caps of key {key_id_for(raw)}")
        required = parse_rules("+".join(rules), f"required rules of key {key_id_for(raw)}") if rules else None
        keys[key_hash(raw)] = ApiKey(key_id_for(raw), admin, own_caps, required)
    return keys


def _env_float(name: str, default: float) -> float:
    value = os.environ.get(name)
    return float(value) if value not in (None, "") else default


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    return int(value) if value not in (None, "") else default


def _env_bool(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


@dataclass
class Settings:
    api_keys: dict[str, ApiKey] = field(default_factory=dict)
    open_mode: bool = False
    data_dir: Path = Path("./data")
    database_url: str | None = None
    broker_url: str | None = None
    local_workers: int | None = None  # None: one per visible GPU, one CPU worker without GPU
    device: str = "auto"
    max_body_bytes: int = 16 * 1024 * 1024
    max_batch_items: int = 512
    max_ids_per_read: int = 1000
    max_wait_s: float = 120.0
    reward_wait_s: float = 1800.0
    rate_limit_per_s: float = 200.0
    rate_burst: int = 400
    max_active_per_key: int = 5000
    max_queue: int = 20000
    allow_unsandboxed: bool = False
    job_time_limit_s: float = DEFAULT_JOB_TIME_LIMIT_S
    callbacks: CallbackConfig = field(default_factory=CallbackConfig)
    admin_job_caps: JobCaps = field(default_factory=JobCaps.model_maxima)  # open mode's too
    auth_fail_rate_per_s: float = 1.0
    auth_fail_burst: int = 30
    auth_fail_global_rate_per_s: float = 100.0
    # Rules no job may switch off (short ids), for every key without a `required_rules` item of its own.
    required_rules: frozenset[str] = frozenset()

    @classmethod
    def from_env(cls) -> Settings:
        keys_text = os.environ.get("KERNELJUDGE_API_KEYS", "")
        keys_file = os.environ.get("KERNELJUDGE_API_KEYS_FILE")
        if keys_file:
            keys_text += "\n" + Path(keys_file).read_text()
        workers = os.environ.get("KERNELJUDGE_LOCAL_WORKERS")
        caps = JobCaps().with_items(os.environ.get("KERNELJUDGE_JOB_CAPS", ""), "KERNELJUDGE_JOB_CAPS")
        admin_caps = JobCaps.model_maxima().with_items(os.environ.get("KERNELJUDGE_ADMIN_JOB_CAPS", ""),
                                                       "KERNELJUDGE_ADMIN_JOB_CAPS")
        return cls(
            api_keys=parse_keys(keys_text, caps, admin_caps),
            open_mode=_env_bool("KERNELJUDGE_OPEN"),
            data_dir=default_data_dir(),
            database_url=os.environ.get("KERNELJUDGE_DATABASE_URL") or None,
            broker_url=os.environ.get("KERNELJUDGE_BROKER_URL") or None,
            local_workers=int(workers) if workers not in (None, "") else None,
            device=os.environ.get("KERNELJUDGE_DEVICE", "auto"),
            max_body_bytes=_env_int("KERNELJUDGE_MAX_BODY_BYTES", cls.max_body_bytes),
            max_batch_items=_env_int("KERNELJUDGE_MAX_BATCH", cls.max_batch_items),
            max_wait_s=_env_float("KERNELJUDGE_MAX_WAIT_S", cls.max_wait_s),
            reward_wait_s=_env_float("KERNELJUDGE_REWARD_WAIT_S", cls.reward_wait_s),
            rate_limit_per_s=_env_float("KERNELJUDGE_RATE_LIMIT", cls.rate_limit_per_s),
            rate_burst=_env_int("KERNELJUDGE_RATE_BURST", cls.rate_burst),
            max_active_per_key=_env_int("KERNELJUDGE_MAX_ACTIVE_PER_KEY", cls.max_active_per_key),
            max_queue=_env_int("KERNELJUDGE_MAX_QUEUE", cls.max_queue),
            allow_unsandboxed=_env_bool("KERNELJUDGE_ALLOW_UNSANDBOXED"),
            job_time_limit_s=job_time_limit_from_env(),
            callbacks=CallbackConfig.from_env(),
            admin_job_caps=admin_caps,
            auth_fail_rate_per_s=_env_float("KERNELJUDGE_AUTH_FAIL_RATE", cls.auth_fail_rate_per_s),
            auth_fail_burst=_env_int("KERNELJUDGE_AUTH_FAIL_BURST", cls.auth_fail_burst),
            auth_fail_global_rate_per_s=_env_float("KERNELJUDGE_AUTH_FAIL_GLOBAL_RATE",
                                                   cls.auth_fail_global_rate_per_s),
            required_rules=parse_rules(os.environ.get("KERNELJUDGE_REQUIRED_RULES", ""),
                                       "KERNELJUDGE_REQUIRED_RULES"),
        )

    def required_rules_of(self, key: ApiKey | None) -> frozenset[str]:
        """The rules a key's jobs may not switch off: its own list, else the server's."""
        return key.required_rules if key is not None and key.required_rules is not None else self.required_rules

    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return sqlite_url(self.data_dir)
