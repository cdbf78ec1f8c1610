"""`kerneljudge submit | status | batch` through the dispatcher, with the fake API as the server."""

from __future__ import annotations

import functools
import json

import pytest

from client.conftest import GOOD, REFERENCE, WRONG
from kerneljudge import cli, cli_client
from kerneljudge.client import KernelJudgeClient


@pytest.fixture(autouse=True)
def fake_server(api, clock, monkeypatch):
    monkeypatch.setattr(cli_client, "KernelJudgeClient", functools.partial(
        KernelJudgeClient, transport=api.transport(), clock=clock, sleep=clock.sleep))
    monkeypatch.setenv("KERNELJUDGE_API_KEY", "secret")
    return api


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_submit_wait_json(tmp_path, capsys):
    ref, cand = write(tmp_path, "ref.py", REFERENCE), write(tmp_path, "cand.py", GOOD)
    assert cli.main(["submit", str(ref), str(cand), "--wait", "--json"]) == 0
    job = json.loads(capsys.readouterr().out)
    assert job["status"] == "done" and job["result"]["speedup"] == 4.0


def test_submit_without_wait_then_status(tmp_path, capsys, api):
    ref, cand = write(tmp_path, "ref.py", REFERENCE), write(tmp_path, "cand.md", "```python\n" + WRONG + "```\n")
    assert cli.main(["submit", str(ref), str(cand), "--completion"]) == 0
    job_id = capsys.readouterr().out.split()[0]
    assert "completion" in json.loads(api.requests[0].content)
    cli.main(["status", job_id])
    cli.main(["status", job_id])
    out = capsys.readouterr().out
    assert "done" in out and "verdict incorrect" in out


def test_errors_are_explained_with_exit_2(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("KERNELJUDGE_API_KEY", "wrong")
    assert cli.main(["status", "job-1"]) == 2
    assert "401" in capsys.readouterr().err
    assert cli.main(["submit", str(tmp_path / "missing.py"), str(tmp_path / "x.py")]) == 2


def test_batch_folder_writes_jsonl_and_progress(tmp_path, capsys):
    folder = tmp_path / "problem"
    folder.mkdir()
    write(folder, "reference.py", REFERENCE)
    write(folder, "a.py", GOOD)
    write(folder, "b.md", "Answer:\n```python\n" + WRONG + "```\n")
    write(folder, "notes.json", "{}")
    out = tmp_path / "results.jsonl"
    assert cli.main(["batch", str(folder), "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["name"] for r in rows] == ["a.py", "b.md"]
    assert [r["job"]["result"]["status"] for r in rows] == ["ok", "incorrect"]
    err = capsys.readouterr().err
    assert "2/2 finished" in err and "wrote 2 result(s)" in err


def test_batch_jsonl_with_inline_error(tmp_path, capsys):
    lines = [{"name": "good", "reference": REFERENCE, "candidate": GOOD},
             {"name": "unknown", "problem_id": "nope", "candidate": GOOD}]
    src = write(tmp_path, "items.jsonl", "\n".join(json.dumps(x) for x in lines) + "\n\n")
    out = tmp_path / "results.jsonl"
    assert cli.main(["batch", str(src), "--out", str(out)]) == 1
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows[0]["job"]["status"] == "done"
    assert "unknown problem" in rows[1]["error"]["message"]


def test_batch_bad_input_is_explained(tmp_path, capsys):
    src = write(tmp_path, "items.jsonl", "not json\n")
    assert cli.main(["batch", str(src), "--out", str(tmp_path / "o.jsonl")]) == 2
    assert "items.jsonl:1: not JSON" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli.main(["batch", str(empty), "--out", str(tmp_path / "o.jsonl")]) == 2
    assert "no reference.py" in capsys.readouterr().err


def test_batch_timeout_writes_the_finished_and_marks_the_rest(tmp_path, capsys, api, clock):
    api.clock, api.read_latency_s = clock, 1.5  # a slow server: the read at the deadline must still land
    folder = tmp_path / "problem"
    folder.mkdir()
    write(folder, "reference.py", REFERENCE)
    write(folder, "a.py", GOOD)
    write(folder, "b.py", GOOD + "# never finishes\n")
    out = tmp_path / "results.jsonl"
    assert cli.main(["batch", str(folder), "--out", str(out), "--timeout", "5"]) == 1
    rows = {r["name"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert rows["a.py"]["finished"] is True and rows["a.py"]["job"]["result"]["status"] == "ok"
    assert "unfinished" not in rows["a.py"]
    assert rows["b.py"]["finished"] is False and rows["b.py"]["job"]["status"] == "running"
    assert rows["b.py"]["unfinished"] == "still running when --timeout 5s passed"
    assert "1 still unfinished at the timeout" in capsys.readouterr().err
