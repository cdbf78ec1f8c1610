"""The client's `wait_many` against the real CPU service: short timeouts, called again and again while the
jobs run, return every job each time and never raise (the issue: it raised at its deadline twice in three
calls, and a GPU benchmark counted 0 of 128 finished jobs)."""

from __future__ import annotations

import time

from kerneljudge.client import KernelJudgeClient
from service.helpers import USER_KEY
from service.sources import FAST_OPTIONS, REFERENCE, TRITON_CANDIDATE, WRONG_CANDIDATE

# Deadlines that fall before, on and after the client's poll intervals (0.2, 0.3, 0.45, ... s).
TIMEOUTS = [0.0, 0.01, 0.2, 0.5, 1.0, 2.0]


def test_wait_many_with_short_timeouts_returns_every_job_every_time(serve):
    live = serve(local_workers=1)
    candidates = [TRITON_CANDIDATE, WRONG_CANDIDATE, "# another sample\n" + TRITON_CANDIDATE]
    with KernelJudgeClient(live.base_url, USER_KEY, timeout=60) as client:
        entries = client.submit_many([{"reference": REFERENCE, "candidate": c, "options": FAST_OPTIONS}
                                      for c in candidates])
        ids = [entry.job.id for entry in entries]
        seen_finished: set[str] = set()
        calls = 0
        give_up = time.monotonic() + 300
        while len(seen_finished) < len(ids):
            assert time.monotonic() < give_up, f"only {len(seen_finished)} of 3 finished in 300 s"
            jobs = client.wait_many(ids, timeout=TIMEOUTS[calls % len(TIMEOUTS)])
            calls += 1
            assert [job.id for job in jobs] == ids
            finished = {job.id for job in jobs if job.finished}
            assert seen_finished <= finished, "a job seen finished came back unfinished"
            seen_finished = finished
        assert calls >= 3
        verdicts = [job.result.status.value for job in client.get_many(ids)]
        assert verdicts == ["ok", "incorrect", "ok"]
