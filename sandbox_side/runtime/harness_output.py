"""Keeping the harness's own output out of the user's log (`candidate_log`).

The runner's stdout and stderr are the user code's log, but the harness prints there too: Kineto
writes `USDT:... profiler_start` / `profiler_stop` straight to fd 2 each time the profiler starts
or stops (the warm-up before the job, the kernel trace during it; KINETO_LOG_LEVEL does not
silence those lines in torch 2.13). Two measures:

- `mark_user_output_start()`: written on both streams just before the user's module is imported;
  the supervisor keeps only what follows it (worker/engine/sandbox/process.py, MarkedLog). User
  code cannot move it: it runs after the mark, and only the first mark counts.
- `discarded()`: fds 1 and 2 point at /dev/null while the harness itself works (the profiler's
  start and stop), so what it prints there is not mixed into the user's output.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

USER_OUTPUT_MARK = b"\x1e[kerneljudge: user code starts here]\x1e\n"


def _flush_python_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass


def mark_user_output_start() -> None:
    _flush_python_streams()  # the harness's own buffered prints land before the mark
    for fd in (1, 2):
        try:
            os.write(fd, USER_OUTPUT_MARK)
        except OSError:
            pass


@contextlib.contextmanager
def discarded() -> Iterator[None]:
    """Output written to fds 1 and 2 inside the block goes nowhere; output pending before it is kept."""
    _flush_python_streams()
    saved = (os.dup(1), os.dup(2))
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        os.dup2(null, 2)
        yield
    finally:
        _flush_python_streams()  # whatever the block printed through Python goes to /dev/null too
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, null):
            os.close(fd)
