"""One timing protocol: reference and candidate in alternating blocks of one window, one count for both."""

from __future__ import annotations

import pytest

from contract.requests import EvalOptions
from sandbox_side.runtime.messages import Timing
from worker.engine.launch import UserFailure, read_reply
from worker.engine.timing.timing_protocol import (
    BLOCK_WARMUP,
    CALIBRATION_RUNS,
    CALIBRATION_WARMUP,
    TimedBlock,
    block_plan,
    measure_paired,
    paired_count,
)
from worker.engine.timing.timing_stats import paired_speedup


def test_the_count_fits_the_budget_and_the_bounds():
    options = EvalOptions(timing_budget_s=1.0, timing_min_runs=10, timing_max_runs=2000, timing_target_rse=0.005)
    assert paired_count([[1.0] * 5], options) == 10  # steady: the minimum is enough
    assert paired_count([[0.001] * 5], options) == 10
    noisy = [1.0, 2.0, 1.0, 2.0, 1.0]  # cv ~0.35: ~5000 runs wanted, 1 s budget fits ~1000
    assert paired_count([noisy], options) == 1000
    assert paired_count([[500.0] * 5], options) == 2  # a slow model: what fits the budget, at least one
    assert paired_count([noisy], options.model_copy(update={"timing_max_runs": 50})) == 50


def test_one_count_for_both_sides_the_noisiest_decides_the_slowest_caps():
    options = EvalOptions(timing_budget_s=1.0, timing_min_runs=10, timing_max_runs=2000, timing_target_rse=0.005)
    steady_fast, noisy_fast = [0.01] * 5, [0.01, 0.02, 0.01, 0.02, 0.01]
    assert paired_count([steady_fast, noisy_fast], options) == 2000  # noisy side wants ~5000: capped by max
    assert paired_count([[100.0] * 5, noisy_fast], options) == 10  # the slow side fits 10 in the budget


def test_block_plan_keeps_two_pairs_at_least_and_covers_the_count():
    assert block_plan(1) == (2, 1)
    assert block_plan(10) == (2, 5)
    assert block_plan(2000) == (8, 250)
    pairs, runs = block_plan(37)
    assert pairs == 7 and pairs * runs >= 37


def _fake_side(name: str, calls: list, ms: float, *, wall_per_call_ms: float | None = None):
    def run(runs: int, warmup: int, snapshot: bool, spacer_ms: float) -> TimedBlock:
        calls.append((name, runs, warmup, snapshot))
        per_call = wall_per_call_ms if wall_per_call_ms is not None else ms + 0.1
        return TimedBlock([ms] * runs, warmup, (runs + warmup) * per_call / 1e3, [])
    return run


def test_blocks_alternate_in_abba_order_with_the_same_count_on_both_sides():
    calls: list = []
    window = measure_paired(_fake_side("ref", calls, 2.0), _fake_side("cand", calls, 1.0),
                            EvalOptions(timing_min_runs=20, timing_budget_s=10))
    assert calls[:2] == [("ref", CALIBRATION_RUNS, CALIBRATION_WARMUP, False),
                         ("cand", CALIBRATION_RUNS, CALIBRATION_WARMUP, False)]
    order = [name for name, *_ in calls[2:]]
    assert order == ["ref", "cand", "cand", "ref", "ref", "cand", "cand", "ref"]
    assert {(runs, warmup) for _, runs, warmup, _ in calls[2:]} == {(5, BLOCK_WARMUP)}
    assert len(window.pairs) == 4 and len(window.reference_ms) == len(window.candidate_ms) == 20
    speedup, (low, high) = window.speedup()
    assert speedup == pytest.approx(2.0) and low == pytest.approx(2.0) and high == pytest.approx(2.0)


def test_paired_speedup_cancels_what_moves_both_sides_of_a_pair():
    # The host slows down by 3x between the first and the second pair: each pair's ratio is still 2.
    pairs = [([2.0, 2.1, 1.9], [1.0, 1.05, 0.95]), ([6.0, 6.3, 5.7], [3.0, 3.15, 2.85])]
    speedup, (low, high) = paired_speedup(pairs)
    assert speedup == pytest.approx(2.0)
    assert low <= 2.0 <= high and high - low < 0.5


def _timed(fields: dict, **block) -> TimedBlock:
    """A block from a runner's `timing` reply, read as the supervisor reads it (launch.read_reply)."""
    return TimedBlock.from_reply(read_reply({"event": "timing", **fields}, Timing), **block)


def test_a_block_with_the_wrong_number_of_samples_or_a_non_finite_one_is_a_protocol_failure():
    with pytest.raises(UserFailure) as caught:
        _timed({"device_ms": [1.0, 1.0]}, runs=3, warmup=1, wall_s=0.01)
    assert caught.value.kind == "protocol"
    for bad in ([1.0, float("nan"), 1.0], [1.0, -1.0, 1.0], [1.0, 0.0, 1.0], [1.0, True, 1.0]):
        with pytest.raises(UserFailure):
            _timed({"device_ms": bad}, runs=3, warmup=1, wall_s=0.01)
    block = _timed({"device_ms": [1, 2, 3], "tampered": ["time.perf_counter"]}, runs=3, warmup=1, wall_s=0.01)
    assert block.calls == 4 and block.median_ms == 2.0 and block.tampered == ["time.perf_counter"]


def _drifting_side(calls: list, base_ms: float, drift: list[float]):
    """A side whose every block is steady inside but moves from block to block by `drift` (other load)."""
    def run(runs: int, warmup: int, keep: int, spacer_ms: float) -> TimedBlock:
        level = drift[len(calls) % len(drift)]
        calls.append(runs)
        return TimedBlock([base_ms * level] * runs, warmup, (runs + warmup) * base_ms * level / 1e3, [])
    return run


def test_pairs_are_added_while_their_ratios_spread_too_much_for_the_median_to_repeat():
    from worker.engine.timing.timing_protocol import MAX_PAIRS_TOTAL, TARGET_PAIR_SE, pair_ratio_se

    options = EvalOptions(timing_min_runs=20, timing_budget_s=10)
    steady = measure_paired(_drifting_side([], 2.0, [1.0]), _drifting_side([], 1.0, [1.0]), options)
    planned = block_plan(20)[0]  # steady calibration: the minimum count, 20 calls per side
    assert len(steady.pairs) == planned and pair_ratio_se(steady.pairs) == 0.0  # nothing to average out
    # The candidate's blocks move by up to 6% between blocks while the reference's do not: pairs are added.
    drift = [1.0, 1.06, 0.97, 1.03, 0.95, 1.02, 1.05, 0.98]
    drifting = measure_paired(_drifting_side([], 2.0, [1.0]), _drifting_side([], 1.0, drift), options)
    assert len(drifting.pairs) > planned
    assert pair_ratio_se(drifting.pairs) <= TARGET_PAIR_SE or len(drifting.pairs) == MAX_PAIRS_TOTAL


def test_extra_pairs_stop_at_twice_the_timing_budget():
    from worker.engine.timing.timing_protocol import EXTRA_BUDGET, MAX_PAIRS_TOTAL

    options = EvalOptions(timing_min_runs=10, timing_budget_s=0.2)
    drift = [1.0, 1.3, 0.7, 1.2, 0.8]  # far too noisy to reach the target
    window = measure_paired(_drifting_side([], 20.0, [1.0]), _drifting_side([], 10.0, drift), options)
    spent = max(sum(block.calls * block.median_ms for block in side) for side in zip(*window.pairs, strict=True)) / 1e3
    assert len(window.pairs) < MAX_PAIRS_TOTAL
    # It stops at the first pair past the limit: at most one pair's time over it.
    assert spent < EXTRA_BUDGET * options.timing_budget_s + 2 * window.runs_per_block * 20.0 * 1.3 / 1e3


def test_a_runners_queue_time_is_kept_as_a_diagnostic_and_a_nonsense_one_is_dropped():
    from sandbox_side.runtime.messages import Timing
    from worker.engine.timing.timing_protocol import PairedWindow, TimedBlock

    def block(queue):
        return TimedBlock.from_reply(Timing(device_ms=[1.0, 1.1], queue_ms_per_call=queue), runs=2, warmup=1,
                                     wall_s=0.01)

    assert block(0.25).queue_ms == 0.25
    assert block(float("nan")).queue_ms is None and block(-1.0).queue_ms is None and block(None).queue_ms is None
    window = PairedWindow((block(0.1), block(0.2)), [(block(0.1), block(0.3)), (block(None), block(0.5))], 2)
    assert window.queue_ms(0) == 0.1 and window.queue_ms(1) == 0.4


def test_both_blocks_of_a_pair_get_one_spacer_sized_from_the_slower_sides_cover_in_the_pair_before():
    from sandbox_side.timing.spacer import SPACER_FIRST_MS, SPACER_MAX_MS, shared_spacer_ms

    spacers: list[tuple[str, float]] = []
    # The candidate's host takes longer to queue its next call (a launch-bound side: 0.10 ms against 0.06 ms),
    # and one of its blocks reports nonsense: that block's cover does not size anything.
    covers = {"ref": iter([0.06] * 100), "cand": iter([0.10, 0.12, float("nan"), *[0.10] * 100])}

    def side(name: str, ms: float):
        def run(runs: int, warmup: int, keep: int, spacer_ms: float) -> TimedBlock:
            spacers.append((name, spacer_ms))
            reply = Timing(device_ms=[ms] * runs, cover_ms=next(covers[name]))
            return TimedBlock.from_reply(reply, runs=runs, warmup=warmup, wall_s=(runs + warmup) * (ms + 0.1) / 1e3)
        return run

    window = measure_paired(side("ref", 2.0), side("cand", 1.0), EvalOptions(timing_min_runs=40, timing_budget_s=10))
    assert spacers[:2] == [("ref", SPACER_FIRST_MS), ("cand", SPACER_FIRST_MS)]  # nothing measured yet
    blocks = [window.calibration, *window.pairs]
    timed = spacers[2:]
    assert len(timed) == 2 * len(window.pairs)
    for index, earlier in enumerate(blocks[:-1]):
        pair = [spacer for _, spacer in timed[2 * index:2 * index + 2]]
        # One size for both blocks of a pair, from the slower of the two covers the pair before reported.
        assert pair[0] == pair[1] == shared_spacer_ms(block.cover_ms for block in earlier)
    assert timed[0][1] == pytest.approx(shared_spacer_ms([0.06, 0.10])) and timed[0][1] > 0.10
    assert window.pairs[1][1].cover_ms is None  # the nonsense report: the reference's cover sized the next pair
    assert timed[4][1] == pytest.approx(shared_spacer_ms([0.06])) and all(s <= SPACER_MAX_MS for _, s in spacers)
