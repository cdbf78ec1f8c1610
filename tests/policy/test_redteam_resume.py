"""A red-team run cut by a time limit resumes from its JSON lines: finished cases are not run again."""

from __future__ import annotations

import json

from benchmarks.redteam.__main__ import main
from benchmarks.redteam.record import OutcomeRow


def _rows(path) -> list[OutcomeRow]:
    return [OutcomeRow.model_validate_json(line) for line in path.read_text().splitlines()]


def test_each_case_is_written_as_it_finishes_and_a_resumed_run_skips_it(tmp_path, capsys):
    jsonl, table = tmp_path / "redteam.jsonl", tmp_path / "redteam.md"
    main(["--only", "static", "--cases", "c1_cuda_graph*", "--jsonl", str(jsonl)])
    first = _rows(jsonl)
    assert [r.case for r in first] == ["c1_cuda_graph_outsourcing"]
    assert first[0].mode == "static" and first[0].device == "cpu" and first[0].got.startswith("rejected:")
    # Mark the recorded outcome: a resumed run must report it as recorded, not evaluate the case again.
    marked = first[0].model_copy(update={"got": "rejected:KJ999", "note": "from the earlier call"})
    jsonl.write_text(marked.model_dump_json() + "\n")
    capsys.readouterr()
    main(["--only", "static", "--cases", "c1_cu*", "--jsonl", str(jsonl), "--resume", "--markdown", str(table)])
    rows = _rows(jsonl)
    assert rows[0].got == "rejected:KJ999"  # kept, not run again
    assert sorted(r.case for r in rows) == ["c1_cublas_in_cuda", "c1_cuda_graph_outsourcing"]  # the other one ran
    assert "1 of 2 cases already in" in capsys.readouterr().err
    assert "rejected:KJ999" in table.read_text()


def test_rows_of_another_device_or_mode_are_not_taken_as_finished(tmp_path):
    jsonl = tmp_path / "redteam.jsonl"
    other = OutcomeRow(case="c1_cuda_graph_outsourcing", device="cuda", mode="engine", got="accepted", rules=[],
                       outcome="MISSED", as_expected=False, seconds=1.0)
    jsonl.write_text(json.dumps(other.model_dump()) + "\n")
    main(["--only", "static", "--cases", "c1_cuda_graph*", "--jsonl", str(jsonl), "--resume"])
    rows = _rows(jsonl)
    assert len(rows) == 2 and rows[1].device == "cpu" and rows[1].got.startswith("rejected:")


def test_the_kernel_traces_stream_evidence_is_kept_with_the_outcome_and_in_the_table(tmp_path):
    """c3_side_stream_python was accepted on an H100 and the rows did not say what the trace saw; they do now."""
    from benchmarks.redteam.runner import stream_evidence
    from contract.results import CoverageReport

    coverage = CoverageReport(share=1.0, own_ms=0.1, library_ms=0.0, plumbing_ms=0.0, method="cupti_kernel_trace",
                              off_stream_kernels=["add_kernel"], unordered_kernels=["add_kernel"],
                              stream_hold_covered_forward=False)
    evidence = stream_evidence(coverage)
    assert evidence == "off_stream=add_kernel unordered=add_kernel hold_ended_before_forward_returned"
    assert stream_evidence(coverage.model_copy(update={"off_stream_kernels": [], "unordered_kernels": [],
                                                       "stream_hold_covered_forward": True})) == ""
    jsonl, table = tmp_path / "redteam.jsonl", tmp_path / "redteam.md"
    row = OutcomeRow(case="c1_cuda_graph_outsourcing", device="cpu", mode="static", got="accepted", rules=[],
                     outcome="MISSED", as_expected=False, seconds=1.0, streams=evidence)
    jsonl.write_text(row.model_dump_json() + "\n")
    main(["--only", "static", "--cases", "c1_cuda_graph*", "--jsonl", str(jsonl), "--resume", "--markdown", str(table)])
    assert f"- `c1_cuda_graph_outsourcing`: {evidence}" in table.read_text()
