"""`kerneljudge problems list|show|export|register` as a user runs them."""

from __future__ import annotations

import json

from kerneljudge.cli import main
from problem_library.catalog import get_problem, problem_names, select
from tests.service.helpers import USER_KEY


def test_list_prints_every_problem_with_its_class_and_profile(capsys):
    assert main(["problems", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == list(problem_names())
    lstm = next(line for line in lines if line.startswith("lstm_cell"))
    assert lstm.split()[1:3] == ["recurrent", "partial"]


def test_list_of_a_kernel_class_and_an_unknown_set(capsys):
    assert main(["problems", "list", "pooling"]) == 0
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()] == ["avgpool2d", "maxpool2d"]
    assert main(["problems", "list", "sorting"]) == 2
    assert "neither a problem nor a set" in capsys.readouterr().err


def test_show_prints_metadata_and_the_reference_or_a_candidate(capsys):
    problem = get_problem("giou_varlen")
    assert main(["problems", "show", "giou_varlen"]) == 0
    out = capsys.readouterr().out
    assert f"problem id:        {problem.problem_id}" in out
    assert "profile:           full" in out and "degenerate output: no" in out
    assert problem.bugs["cuda_wrong"] in out
    assert out.endswith(problem.reference)
    assert main(["problems", "show", "giou_varlen", "--source", "cuda_ok"]) == 0
    assert capsys.readouterr().out == problem.candidate("cuda_ok")


def test_export_writes_one_dataset_row_per_problem(tmp_path):
    out = tmp_path / "loss.jsonl"
    assert main(["problems", "export", "loss", "matmul", "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    problems = select(["loss", "matmul"])
    assert [row["name"] for row in rows] == [p.name for p in problems]
    for row, problem in zip(rows, problems, strict=True):
        assert row["problem_id"] == problem.problem_id
        assert row["reward_model"] == {"style": "rule", "ground_truth": problem.problem_id}
        assert row["reference"] == problem.reference and row["profile"] == problem.profile
        # The prompt holds the instruction and the whole reference in a python block.
        assert "class ModelNew" in row["prompt"] and f"```python\n{problem.reference}" in row["prompt"]


def test_export_needs_names_or_all(tmp_path, capsys):
    assert main(["problems", "export", "--out", str(tmp_path / "x.jsonl")]) == 2
    assert "pass --all" in capsys.readouterr().err
    assert main(["problems", "export", "--all", "--out", str(tmp_path / "all.jsonl")]) == 0
    assert len((tmp_path / "all.jsonl").read_text().splitlines()) == len(problem_names())


def test_register_puts_the_set_on_the_server_with_its_profiles(live_server, tmp_path, capsys):
    export = tmp_path / "recurrent.jsonl"
    argv = ["problems", "register", "recurrent", "silu", "--server", live_server.base_url, "--api-key", USER_KEY,
            "--export", str(export)]
    assert main(argv) == 0
    lstm, silu = get_problem("lstm_cell"), get_problem("silu")
    assert capsys.readouterr().out.splitlines() == [f"{lstm.problem_id}  lstm_cell", f"{silu.problem_id}  silu"]
    with live_server.client() as http:
        for problem in (lstm, silu):
            stored = http.get(f"/v1/problems/{problem.problem_id}").json()
            assert stored["profile"] == problem.profile and stored["reference"] == problem.reference
    assert [json.loads(line)["problem_id"] for line in export.read_text().splitlines()] == [
        lstm.problem_id, silu.problem_id]
    assert main(argv) == 0  # registering again is harmless


def test_register_without_a_reachable_server_says_so(tmp_path, capsys):
    argv = ["problems", "register", "silu", "--server", "http://127.0.0.1:9", "--api-key", "k"]
    assert main(argv) == 2
    assert "kerneljudge problems register:" in capsys.readouterr().err
