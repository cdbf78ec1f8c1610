"""The timing pool's variants, piece by piece: made in the judge, written by the timer in the supervisor's
order, and the kept outputs' calls (the whole path is in test_timing_isolation.py)."""

from __future__ import annotations

import random

import torch

from contract.requests import EvalOptions
from sandbox_side.timing import timer, timing_variants
from worker.engine.timing.timing_protocol import CALIBRATION_RUNS, CallOrder, TimedBlock, measure_paired


def _sets(seed: int) -> list:
    torch.manual_seed(seed)
    mask = torch.tril(torch.ones(8, 8))
    return [torch.randn(64, 32), torch.randn(8, 8) * mask, torch.randint(0, 5, (16,)), torch.tensor(0.5),
            torch.randn(32, 64).t()]


def test_each_variant_changes_its_own_secret_group_of_floating_inputs_with_values_of_a_fresh_draw():
    base, fresh = _sets(1), _sets(2)
    changes = timing_variants.make_tables(base, fresh, 3, torch.Generator().manual_seed(7))
    # Dense floating inputs only: not the integers, not the 0-d hyperparameter, not the transposed view.
    assert [index for index, _, _ in changes] == [0, 1]
    for index, positions, table in changes:
        flat, new = base[index].reshape(-1), fresh[index].reshape(-1)
        assert table.shape == (4, positions.numel()) and positions.unique().numel() == positions.numel()
        assert torch.equal(table[0], flat[positions])  # variant 0 is the set itself
        groups = [table[v] != table[0] for v in range(1, 4)]
        assert all(bool(group.any()) for group in groups)
        assert not bool((groups[0] & groups[1]).any() | (groups[0] & groups[2]).any() | (groups[1] & groups[2]).any())
        for v, group in enumerate(groups, start=1):
            assert torch.equal(table[v][group], new[positions[group]])
        assert positions.numel() <= 3 * max(1, flat.numel() // timing_variants.SHARE)
    # The lower triangle's structure stays: both draws are zero above the diagonal, so nothing changes there.
    _, positions, _ = changes[1]
    rows, cols = positions // 8, positions % 8
    assert bool((cols <= rows).all())
    args = timing_variants.variant_args(base, changes, 2)
    assert torch.equal(args[2], base[2]) and torch.equal(args[3], base[3]) and not torch.equal(args[0], base[0])
    assert torch.equal(base[0], _sets(1)[0]), "making a variant changed the set itself"


def test_the_timer_writes_the_ordered_variant_before_each_call_and_keeps_the_chosen_outputs():
    sets = [_sets(seed) for seed in (1, 3)]
    fresh = [_sets(seed) for seed in (2, 4)]
    generator = torch.Generator().manual_seed(5)
    changes = [timing_variants.make_tables(b, f, 3, generator) for b, f in zip(sets, fresh, strict=True)]
    pool = [[a.clone() for a in args] for args in sets]
    variants = timer.InputVariants(pool, changes)
    order = CallOrder(variants.counts, random.Random(11))
    codes = order.next(2 + 12)
    seen = []

    def model(*args):
        seen.append([a.clone() for a in args])
        return args[0] * 2

    samples = timer.time_model(model, pool, torch.device("cpu"), runs=12, warmup=2, keep={0, 5, 11}, order=codes,
                               variants=variants)
    assert len(samples.device_ms) == 12 and samples.warmup_runs == 2
    for call, code in enumerate(codes):
        slot, variant = order.decode(code)
        expected = timing_variants.variant_args(sets[slot], changes[slot], variant)
        assert all(torch.equal(got, want) for got, want in zip(seen[call], expected, strict=True)), call
    # A set's buffers never hold the same variant for two of its calls in a row.
    for slot in range(2):
        mine = [order.decode(code)[1] for code in codes if order.decode(code)[0] == slot]
        assert all(a != b for a, b in zip(mine, mine[1:], strict=False)) and len(set(mine)) > 1
    assert [torch.equal(kept, seen[2 + i][0] * 2) for kept, i in zip(samples.kept, (0, 5, 11), strict=True)] \
        == [True] * 3


def test_without_an_order_the_pool_rotates_as_it_is():
    pool = [[torch.full((4,), float(i))] for i in range(3)]
    seen = []
    timer.time_model(lambda x: seen.append(float(x[0])) or x, pool, torch.device("cpu"), runs=4, warmup=2)
    assert seen == [0.0, 1.0, 0.0, 1.0, 2.0, 0.0]


def test_both_blocks_of_a_pair_keep_as_many_outputs_and_the_window_keeps_the_checks_asked_for():
    calls: list = []

    def side(name: str, ms: float):
        def run(runs: int, warmup: int, keep: int, spacer_ms: float) -> TimedBlock:
            calls.append((name, runs, keep))
            return TimedBlock([ms] * runs, warmup, (runs + warmup) * (ms + 0.1) / 1e3, [])
        return run

    window = measure_paired(side("ref", 2.0), side("cand", 1.0), EvalOptions(timing_min_runs=40, timing_budget_s=10),
                            checks=8, rng=random.Random(3))
    reference = [keep for name, _, keep in calls if name == "ref"]
    candidate = [keep for name, _, keep in calls if name == "cand"]
    assert reference == candidate and sum(candidate) == 8
    assert calls[0][1] == CALIBRATION_RUNS and all(keep <= runs for _, runs, keep in calls)
    assert len(window.pairs) == len(calls) // 2 - 1
