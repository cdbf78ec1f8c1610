"""Persisted timing baselines in the job store: every worker of every host reads and writes the same rows.

The engine measures them (worker/engine/timing/baseline_worker.py) and asks for them through its
`BaselineBook` protocol (worker/engine/timing/baselines.py); this is the store's implementation, handed
to the engine by the pipeline (worker/jobs/pipeline.py). A later measurement replaces an earlier
one (the retime policy decides when to measure again).
"""

from __future__ import annotations

import json
import logging
import time

from sqlalchemy import update
from sqlalchemy.exc import IntegrityError

from worker.engine.timing.baselines import BaselineKey, Record, kind_of, record_from_json, record_to_json
from worker.jobs.store.jobs import JobStore
from worker.jobs.store.schema import BaselineRow

log = logging.getLogger(__name__)


class StoreBaselineBook:
    def __init__(self, store: JobStore) -> None:
        self.store = store

    def get(self, key: BaselineKey, kind: str) -> Record | None:
        with self.store._session() as s:
            row = s.get(BaselineRow, (key.digest, kind))
            if row is None:
                return None
            try:
                return record_from_json(kind, json.loads(row.record))
            except (TypeError, ValueError):
                log.warning("unreadable %s baseline for %s; it will be measured again", kind, key.reference_sha256)
                return None

    def put(self, key: BaselineKey, record: Record) -> None:
        kind = kind_of(record)
        payload = json.dumps(record_to_json(record))
        measured_at = float(getattr(record, "measured_at", time.time()))
        values = {"record": payload, "measured_at": measured_at}
        with self.store._session() as s, s.begin():
            done = s.execute(update(BaselineRow).where(BaselineRow.key_digest == key.digest, BaselineRow.kind == kind)
                             .values(**values))
            if done.rowcount:
                return
        try:
            with self.store._session() as s, s.begin():
                s.add(BaselineRow(key_digest=key.digest, kind=kind, reference_sha256=key.reference_sha256,
                                  device=key.device, device_model=key.device_model[:200], torch=key.torch,
                                  triton=key.triton, **values))
        except IntegrityError:  # another worker inserted it first: the later measurement wins
            with self.store._session() as s, s.begin():
                s.execute(update(BaselineRow).where(BaselineRow.key_digest == key.digest, BaselineRow.kind == kind)
                          .values(**values))
