"""The buffer-placement benchmark (benchmarks/buffer_placement.py) times a pair as allocated and with its inputs
placed at byte offsets into larger buffers, and its table reads the spreads from those rows. On CPU its control
pair, the reference against itself, runs end to end."""

from __future__ import annotations

from benchmarks.buffer_placement import OFFSETS, child, report


def test_a_process_times_the_pair_as_allocated_and_at_every_offset():
    rows = child("softmax", "reference", "cpu", runs=3, rounds=2, offsets=True)
    assert [row["where"] for row in rows] == ["as allocated"] * 2 + [f"offset {offset} B" for offset in OFFSETS]
    assert all(row["ref"] > 0 and row["cand"] > 0 for row in rows)
    again = child("softmax", "reference", "cpu", runs=3, rounds=1, offsets=False)
    assert [row["where"] for row in again] == ["as allocated"]
    text = report({("softmax", "reference"): [rows, again]}, "python -m benchmarks.buffer_placement", "cpu")
    summary = next(line for line in text.splitlines() if line.startswith("| softmax/reference | "))
    assert summary.count("%") == 6  # every spread was computed
    assert text.count("| softmax/reference | 2 | as allocated |") == 1
