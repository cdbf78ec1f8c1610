"""`kerneljudge build CANDIDATE.py`: the service's build, from the command line."""

from __future__ import annotations

import json

from kerneljudge.cli import main
from tests.build import candidates
from worker.engine.build import builder as build


def test_build_command_reports_the_path_the_time_and_the_host_check(build_settings, data_dir, tmp_path,
                                                                    monkeypatch, capsys):
    monkeypatch.setenv("KERNELJUDGE_DATA_DIR", str(data_dir))
    monkeypatch.setenv("KERNELJUDGE_CUDA_ARCH", build.ARCH_WITHOUT_GPU)
    path = tmp_path / "cand.py"
    path.write_text(candidates.PLAIN)
    assert main(["build", str(path), "--json", "--rebuild"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["status"], result["path"], result["reason"], result["cached"]) == ("built", "fast", "", False)
    assert result["seconds"] > 0
    assert result["extensions"][0]["abi_check"] == "loaded; functions: twice_cuda"
    assert main(["build", str(path)]) == 0
    summary = capsys.readouterr().out
    assert "path: fast" in summary and "(cached)" in summary


def test_build_command_prints_the_trimmed_errors_and_fails(build_settings, data_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KERNELJUDGE_DATA_DIR", str(data_dir))
    monkeypatch.setenv("KERNELJUDGE_CUDA_ARCH", build.ARCH_WITHOUT_GPU)
    path = tmp_path / "cand.py"
    path.write_text(candidates.KERNEL_ERROR)
    assert main(["build", str(path)]) == 1
    summary = capsys.readouterr().out
    assert "build:     failed   path: full" in summary
    assert "fallback:  kj_test_error: device code does not parse without the torch headers" in summary
    assert "undeclared_factor" in summary and "candidate.py:" in summary
