"""The store's JSON text: always valid JSON that SQLite's and PostgreSQL's JSON functions accept.

`json.dumps` writes NaN and Infinity, which are not JSON, and writes a lone surrogate as "\\ud800",
which PostgreSQL's jsonb refuses, as it refuses "\\u0000". One such value in one result made the
dashboard's SQL fail for its key and for every admin. Here:

- a non-finite float becomes the string "NaN", "Infinity" or "-Infinity" (pydantic reads these
  back as floats, so a stored EvalResult still validates);
- a lone surrogate becomes U+FFFD;
- with `jsonb_safe` (results, which the dashboard reads with SQL JSON functions), NUL becomes
  U+FFFD too. Submissions keep NUL: they must round-trip what the client sent.
"""

from __future__ import annotations

import json
import math
from typing import Any

REPLACEMENT = "\ufffd"


def _finite_or_name(value: float) -> float | str:
    if math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def _clean_text(value: str, jsonb_safe: bool) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        # Pairs of surrogates become their character; lone ones become U+FFFD.
        value = value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if jsonb_safe and "\x00" in value:
        value = value.replace("\x00", REPLACEMENT)
    return value


def _clean(value: Any, jsonb_safe: bool) -> Any:
    if isinstance(value, float):
        return _finite_or_name(value)
    if isinstance(value, str):
        return _clean_text(value, jsonb_safe)
    if isinstance(value, dict):
        return {_clean(k, jsonb_safe): _clean(v, jsonb_safe) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(item, jsonb_safe) for item in value]
    return value


def to_json_text(value: Any, *, jsonb_safe: bool = False) -> str:
    """`value` as JSON text with no NaN/Infinity tokens and no lone surrogates (see the module doc)."""
    try:
        text = json.dumps(value, allow_nan=False)
    except ValueError:  # a non-finite float somewhere
        text = None
    # ensure_ascii writes every surrogate as "\\udXXX" (pairs too: cleaning them is a no-op), NUL as "\\u0000".
    if text is not None and "\\ud" not in text and not (jsonb_safe and "\\u0000" in text):
        return text
    return json.dumps(_clean(value, jsonb_safe), allow_nan=False)
