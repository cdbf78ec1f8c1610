"""API keys as the operator writes them (KERNELJUDGE_API_KEYS, the keys file) and the rules a key's jobs
may not switch off (KERNELJUDGE_REQUIRED_RULES, a key's `required_rules=` item).

An entry is `KEY` or `KEY:admin` (an admin key may also export and read every client's jobs), optionally
followed by space-separated `name=value` items: the key's own job caps (job_caps.py, "key1 run_s=900
trials=50") and `required_rules=KJ-R01+KJ-R20` (`none`: any rule may be switched off). Entries are separated
by commas or newlines; `#` starts a comment. Keys are stored and looked up by their sha256, never as given.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from worker.config.job_caps import JobCaps

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
