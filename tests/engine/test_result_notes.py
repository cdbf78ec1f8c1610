"""EvalResult.extra as typed sections (issue 24 item 2): the engine writes each section with its type, the
JSON still holds only the sections written, and a newer server's sections survive an older reader."""

from __future__ import annotations

import pydantic
import pytest

from contract.results import BuildNote, EvalResult, ResultNotes, TimingRunsNote
from contract.statuses import EvalStatus


def test_only_the_sections_written_appear_in_the_json():
    assert EvalResult(status=EvalStatus.ok).model_dump(mode="json")["extra"] == {}
    notes = ResultNotes()
    notes.reference_cache = "hit"
    notes.timing_runs = TimingRunsNote(reference=12, candidate=10, pairs=4, runs_per_block=3)
    dumped = EvalResult(status=EvalStatus.ok, extra=notes).model_dump(mode="json")["extra"]
    assert dumped == {"reference_cache": "hit",
                      "timing_runs": {"reference": 12, "candidate": 10, "pairs": 4, "runs_per_block": 3}}


def test_a_section_of_the_wrong_type_is_refused_where_it_is_written():
    notes = ResultNotes()
    with pytest.raises(pydantic.ValidationError):
        notes.reference_cache = "sometimes"  # type: ignore[assignment]
    with pytest.raises(pydantic.ValidationError):
        notes.build = {"path": "fast", "seconds": "slow"}  # type: ignore[assignment]
    notes.build = BuildNote(path="fast", seconds=1.5)
    assert notes.build.path == "fast"


def test_a_result_read_back_keeps_typed_sections_and_unknown_ones():
    stored = {"status": "ok", "extra": {"build": {"path": "full", "reason": "constant memory", "seconds": 20.0},
                                        "a_newer_servers_section": {"x": 1}}}
    result = EvalResult.model_validate(stored)
    assert isinstance(result.extra.build, BuildNote) and result.extra.build.reason == "constant memory"
    again = result.model_dump(mode="json")["extra"]
    assert again == stored["extra"]


def test_the_openapi_schema_names_each_section():
    schema = EvalResult.model_json_schema(mode="serialization")
    sections = schema["$defs"]["ResultNotes"]["properties"]
    assert {"build", "timing_runs", "reward_baseline", "compile_baseline", "physics", "retried_alone"} <= set(sections)
