"""MarkedLog keeps what a runner wrote before the user-code mark apart from what came after it."""

from __future__ import annotations

from sandbox_side.runtime.harness_output import USER_OUTPUT_MARK as MARK
from worker.engine.sandbox.process import MarkedLog


def fed(chunks: list[bytes], limit: int = 4096) -> MarkedLog:
    log = MarkedLog(limit, MARK)
    for chunk in chunks:
        log.feed(chunk)
    return log


def test_only_what_follows_the_mark_is_the_users():
    log = fed([b"harness warm-up\n", MARK + b"user line\n", b"more\n"])
    assert log.after_mark() == "user line\nmore\n"
    assert log.text() == "harness warm-up\nuser line\nmore\n"


def test_a_mark_split_across_chunks_is_found():
    stream = b"warm\n" + MARK + b"user\n"
    for cut in range(1, len(stream)):
        log = fed([stream[:cut], stream[cut:]])
        assert log.after_mark() == "user\n", cut


def test_no_mark_means_no_user_output():
    log = fed([b"the runner died during start-up\n"])
    assert log.after_mark() == ""
    assert log.text() == "the runner died during start-up\n"


def test_a_mark_printed_by_user_code_is_just_text():
    log = fed([b"warm\n", MARK, b"a\n" + MARK + b"b\n"])
    assert log.after_mark() == "a\n" + MARK.decode() + "b\n"


def test_harness_output_cannot_crowd_the_users_out_of_the_cap():
    log = fed([b"x" * 100_000, MARK, b"user\n"], limit=2048)
    assert log.after_mark() == "user\n"
