"""The repeat benchmark (benchmarks/repeat.py) through the real service on CPU: every job carries the timing
budget it was given, and the table says the budget and how long each candidate's timing window held the device,
so that GPU runs at two budgets weigh the speedups' spread against each job's time alone on its GPU."""

from __future__ import annotations

from benchmarks import repeat
from contract.requests import EvalOptions


def test_a_given_timing_budget_reaches_every_job_and_the_default_is_the_services():
    assert repeat.job_options("cuda", None) == {"device": "cuda"}
    given = EvalOptions(**repeat.job_options("cuda", 0.5))
    assert given.timing_budget_s == 0.5
    assert EvalOptions(**repeat.job_options("cuda", None)).timing_budget_s == EvalOptions().timing_budget_s


def test_the_table_gives_the_budget_and_each_candidates_timing_window(tmp_path):
    out = tmp_path / "repeat.md"
    assert repeat.main(["--device", "cpu", "--repeats", "2", "--problems", "elementwise", "--build-threads", "0",
                        "--timing-budget-s", "0.2", "--out", str(out)]) == 0
    table = out.read_text()
    assert "- timing budget per model: 0.2 s" in table
    row = next(line for line in table.splitlines() if line.startswith("| elementwise/triton_ok"))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[1] == "ok" and len(cells[2].split()) == 2  # both repeats timed
    assert float(cells[6]) > 0  # the window's median seconds, from each job's `timing` stage
