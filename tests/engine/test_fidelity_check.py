"""The fidelity benchmark's plain check defines correctness as the engine does: allclose at the problem's
tolerance, its absolute part raised to the output's scale, so a long reduction's honest rounding agrees."""

from __future__ import annotations

import textwrap

from benchmarks.fidelity_check import check

REFERENCE = textwrap.dedent('''
    import torch

    class Model(torch.nn.Module):
        def forward(self, a, b):
            return a @ b

    def get_inputs():
        return [torch.randn(32, 131072), torch.randn(131072, 32)]

    def get_init_inputs():
        return []
''')

SEQUENTIAL = textwrap.dedent('''
    import torch

    class ModelNew(torch.nn.Module):
        def forward(self, a, b):  # one float32 accumulator per output, over K from its end
            acc = torch.zeros(a.shape[0], b.shape[1])
            for k in reversed(range(a.shape[1])):
                acc = acc + a[:, k:k + 1] * b[k:k + 1, :]
            return acc
''')

HALF_OPERANDS = textwrap.dedent('''
    import torch

    class ModelNew(torch.nn.Module):
        def forward(self, a, b):
            return a.half().float() @ b.half().float()
''')


def test_an_honest_long_sum_is_correct_and_half_operands_are_not(tmp_path):
    reference = tmp_path / "reference.py"
    reference.write_text(REFERENCE)
    (tmp_path / "sequential.py").write_text(SEQUENTIAL)
    (tmp_path / "half.py").write_text(HALF_OPERANDS)
    # Summed from the other end than the reference, it misses 1e-4 + 1e-4|t| near zero on this seed.
    honest = check(reference, tmp_path / "sequential.py", "cpu", trials=2, seed=5)
    assert honest["correct"], honest
    half = check(reference, tmp_path / "half.py", "cpu", trials=2, seed=5)
    assert not half["correct"] and "not allclose" in half["message"], half


def test_the_fidelity_benchmark_leaves_out_the_compile_baseline_unless_asked(tmp_path, monkeypatch):
    """The engine alone waits for torch.compile's baseline (30-110 s of a pair on an H100), and no verdict the
    benchmark compares depends on it."""
    import sys

    from benchmarks import fidelity

    reference, candidate = tmp_path / "ref.py", tmp_path / "cand.py"
    reference.write_text(REFERENCE)
    candidate.write_text(SEQUENTIAL)
    pair = fidelity.Pair("S000", "test", reference, candidate)

    def options(*flags: str):
        monkeypatch.setattr(sys, "argv", ["fidelity", "--jsonl", str(tmp_path / "f.jsonl"), *flags])
        parsed = fidelity.parse_args()
        return fidelity._request(pair, parsed).options

    assert options().wants_compile_baseline() is False
    assert options("--compile-baseline").wants_compile_baseline() is True


def test_a_pair_gets_the_engines_verdict_and_the_plain_checks_side_by_side(tmp_path, monkeypatch):
    """The plain check runs in its own process while the engine evaluates the same pair (CPU, Triton
    interpreter): both verdicts land in the pair's row."""
    import sys

    from benchmarks import fidelity
    from tests.service.sources import REFERENCE as SERVICE_REFERENCE
    from tests.service.sources import TRITON_CANDIDATE
    from worker.engine.engine_settings import EngineSettings

    reference, candidate = tmp_path / "ref.py", tmp_path / "cand.py"
    reference.write_text(SERVICE_REFERENCE)
    candidate.write_text(TRITON_CANDIDATE)
    monkeypatch.setattr(sys, "argv", ["fidelity", "--jsonl", str(tmp_path / "f.jsonl"), "--device", "cpu",
                                      "--trials", "2", "--timing-budget", "0.2"])
    row = fidelity.evaluate_pair(fidelity.Pair("S000", "test", reference, candidate), fidelity.parse_args(),
                                 EngineSettings.configured())
    assert row["status"] == "ok" and row["independent"]["correct"] is True, (row["status"], row["independent"])
    assert fidelity.accepted(row) is True
    assert row["independent"]["seconds"] > 0  # the check's own time, beside the engine's


def test_a_plain_check_out_of_device_memory_is_no_verdict_and_its_pair_runs_again_alone(tmp_path, monkeypatch):
    """Beside five other pairs' jobs the plain check of a pair with 1 GiB outputs ran out of H100 memory and
    counted as 'incorrect'. Now the pair is evaluated again after the others, alone, and only that row is kept."""
    import sys
    import threading

    from benchmarks import fidelity

    pairs = [fidelity.Pair(f"S00{i}", "test", tmp_path / "r.py", tmp_path / "c.py") for i in range(3)]
    running, calls, lock = set(), [], threading.Lock()

    def evaluate(pair, args, settings):
        with lock:
            running.add(pair.id)
            calls.append((pair.id, sorted(running)))
            first = sum(1 for pid, _ in calls if pid == pair.id) == 1
        out_of_memory = pair.id == "S001" and first
        independent = {"correct": not out_of_memory, "max_abs_error": None, "message": None}
        if out_of_memory:
            independent.update(out_of_memory=True, message="OutOfMemoryError: CUDA out of memory")
        with lock:
            running.discard(pair.id)
        return {"id": pair.id, "status": "ok", "flagged": False, "reward": 0.5, "engine_s": 1.0,
                "independent": independent}

    monkeypatch.setattr(fidelity, "evaluate_pair", evaluate)
    monkeypatch.setattr(sys, "argv", ["fidelity", "--jsonl", str(tmp_path / "f.jsonl"), "--eval-jobs", "3"])
    fidelity.eval_all(pairs, fidelity.parse_args(), None)
    rows = fidelity._rows(tmp_path / "f.jsonl")
    assert len((tmp_path / "f.jsonl").read_text().splitlines()) == 3
    assert sorted(row["id"] for row in rows) == ["S000", "S001", "S002"]  # one row each: the first S001 is gone
    assert [row["independent"] for row in rows if row["id"] == "S001"] == [
        {"correct": True, "max_abs_error": None, "message": None, "alone": True}]
    assert calls[-1] == ("S001", ["S001"])  # the second evaluation had the device to itself
