"""One-time repair of the JSON text older versions stored (see json_text.py for what was wrong).

Rows whose text may hold a NaN/Infinity token, a surrogate escape or (in a result) "\\u0000" are
re-encoded with `to_json_text`; the rest are not touched. It runs once per database, recorded in
`store_meta`, when a store opens it: every write since goes through `to_json_text`.
"""

from __future__ import annotations

import json
import logging
import time

from sqlalchemy import Engine, or_, select, update
from sqlalchemy.exc import IntegrityError

from worker.jobs.store.json_text import to_json_text
from worker.jobs.store.schema import JobRow, StoreMetaRow

log = logging.getLogger(__name__)

REPAIR_KEY = "json_text_repaired"
_SUSPECT = ("NaN", "Infinity", "\\ud", "\\u0000")
PAGE = 500


def _repaired(text: str | None, jsonb_safe: bool) -> str | None:
    """The text re-encoded, or None when it needs no change (or is not JSON at all: left as it is)."""
    if text is None:
        return None
    try:
        fixed = to_json_text(json.loads(text), jsonb_safe=jsonb_safe)
    except ValueError:
        return None
    return fixed if fixed != text else None


def repair_stored_json(engine: Engine) -> int:
    """Re-encode the jobs whose stored JSON text is not valid for the database's JSON functions,
    once per database. Returns how many rows this call changed."""
    with engine.connect() as conn:
        if conn.execute(select(StoreMetaRow.value).where(StoreMetaRow.key == REPAIR_KEY)).first() is not None:
            return 0
    suspect = or_(*(column.contains(marker, autoescape=True)
                    for column in (JobRow.result, JobRow.submission) for marker in _SUSPECT))
    changed = 0
    after = ""
    while True:
        with engine.connect() as conn:
            rows = conn.execute(select(JobRow.id, JobRow.submission, JobRow.result)
                                .where(JobRow.id > after, suspect).order_by(JobRow.id).limit(PAGE)).all()
        for job_id, submission, result in rows:
            values = {}
            if (fixed := _repaired(submission, jsonb_safe=False)) is not None:
                values["submission"] = fixed
            if (fixed := _repaired(result, jsonb_safe=True)) is not None:
                values["result"] = fixed
            if values:
                with engine.begin() as conn:
                    conn.execute(update(JobRow).where(JobRow.id == job_id).values(**values))
                changed += 1
        if len(rows) < PAGE:
            break
        after = rows[-1][0]
    try:
        with engine.begin() as conn:
            conn.execute(StoreMetaRow.__table__.insert().values(key=REPAIR_KEY, value=str(time.time())))
    except IntegrityError:
        pass  # another process opening the same store finished it too
    if changed:
        log.warning("job store: re-encoded the JSON of %d jobs that an older version stored with NaN, "
                    "Infinity, lone surrogates or NUL", changed)
    return changed
