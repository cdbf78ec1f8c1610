"""`kerneljudge eval`: a local evaluation with a readable summary and per-run rule switches."""

from __future__ import annotations

from kerneljudge.cli import main
from tests.engine.conftest import SILU_REFERENCE
from tests.engine.test_shape_trial import HARD_CODED_SILU


def test_summary_shows_the_shape_trial_and_disable_rule_switches_it_off(tmp_path, capsys, monkeypatch, settings):
    monkeypatch.setenv("KERNELJUDGE_DATA_DIR", str(tmp_path / "data"))
    (tmp_path / "ref.py").write_text(SILU_REFERENCE)
    (tmp_path / "cand.py").write_text(HARD_CODED_SILU)
    files = [str(tmp_path / "ref.py"), str(tmp_path / "cand.py"), "--no-timing", "--trials", "2"]

    assert main(["eval", *files]) == 0
    flagged = capsys.readouterr().out
    assert "verdict:   ok  (flagged)" in flagged
    assert "shapes:    FAIL [[1000]] -> [[2000]]" in flagged
    assert "KJ-R09-shape-specialised" in flagged

    assert main(["eval", *files, "--disable-rule", "KJ-R09"]) == 0
    allowed = capsys.readouterr().out
    assert "verdict:   ok\n" in allowed
    assert "shapes:    not run" in allowed and "KJ-R09" in allowed


def test_the_profile_option_reaches_the_engine(tmp_path, capsys, monkeypatch, settings):
    from tests.engine.test_runtime_rules import HIDDEN_TABLE

    monkeypatch.setenv("KERNELJUDGE_DATA_DIR", str(tmp_path / "data"))
    (tmp_path / "ref.py").write_text(SILU_REFERENCE)
    (tmp_path / "cand.py").write_text(HIDDEN_TABLE)
    files = [str(tmp_path / "ref.py"), str(tmp_path / "cand.py"), "--no-timing", "--trials", "2"]

    assert main(["eval", *files]) == 0
    partial = capsys.readouterr().out
    assert "verdict:   ok\n" in partial and "library:   aten::" in partial
    assert main(["eval", *files, "--profile", "full"]) == 0
    assert "KJ-R11-library-compute" in capsys.readouterr().out
