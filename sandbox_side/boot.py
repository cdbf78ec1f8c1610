"""The sandbox's entry point (launch.BOOT): the runner for the sandbox's role, serving its pipe until Exit.

A judge (KJ_ROLE=reference) or a candidate's runner; this module picks, so that neither imports the other.
"""

from __future__ import annotations

import os
import traceback
from typing import NoReturn

from sandbox_side.runtime.failure_kind import FailureKind
from sandbox_side.runtime.leave import leave
from sandbox_side.runtime.loader import MAX_TRACEBACK_CHARS, UserCodeError
from sandbox_side.runtime.messages import ErrorReply
from sandbox_side.runtime.runner import CandidateRunner, Runner
from sandbox_side.runtime.wire import WireError


def run_and_exit() -> NoReturn:
    """The sandbox's entry point: its runner's `main`, then out without the interpreter's teardown (leave.py:
    about a second with torch and Triton loaded, paid by every job that waits for its log)."""
    leave(main())


def main() -> int:
    if os.environ.get("KJ_ROLE") == "reference":
        # Only a judge imports the judging code (and pydantic): a candidate's runner starts without them.
        from sandbox_side.judging.judge_process import JudgeRunner

        runner: Runner = JudgeRunner()
    else:
        runner = CandidateRunner()
    try:
        runner.start()
        runner.serve()
    except UserCodeError as exc:
        runner.channel.reply(ErrorReply(exc.kind, exc.message, exc.detail))
    except WireError as exc:
        runner.channel.reply(ErrorReply(FailureKind.protocol, f"unreadable tensors: {exc}"))
        return 1
    except BaseException as exc:  # noqa: BLE001 - report, then exit non-zero
        runner.channel.reply(ErrorReply(FailureKind.runtime_error, f"{type(exc).__name__}: {exc}",
                                        traceback.format_exc()[-MAX_TRACEBACK_CHARS:]))
        return 1
    return 0
