"""The red-team's outcomes as JSON lines, one per case as it finishes, so that a run cut by a time limit (a GPU
call's 600 s) resumes where it stopped (`--jsonl PATH --resume`), on the same machine or, carried, on another."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from .corpus import RedteamCase
from .runner import CaseOutcome


class OutcomeRow(BaseModel):
    """One case's outcome on one device, as written to the JSON lines file."""

    model_config = ConfigDict(extra="forbid")

    case: str
    device: str
    mode: str  # "engine" or "static"
    got: str
    rules: list[str]
    outcome: str
    as_expected: bool | None
    seconds: float
    note: str = ""
    streams: str = ""  # the kernel trace's stream evidence (runner.stream_evidence)


def append(path: Path, outcome: CaseOutcome, device: str, mode: str) -> None:
    row = OutcomeRow(case=outcome.case.id, device=device, mode=mode, got=outcome.got, rules=outcome.rules,
                     outcome=outcome.outcome, as_expected=outcome.as_expected, seconds=round(outcome.seconds, 2),
                     note=outcome.note, streams=outcome.streams)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as out:
        out.write(row.model_dump_json() + "\n")


def finished(path: Path, cases: list[RedteamCase], device: str, mode: str) -> dict[str, CaseOutcome]:
    """The outcomes already in `path` for these cases, device and mode (the last row of a case wins)."""
    if not path.exists():
        return {}
    by_id = {case.id: case for case in cases}
    found: dict[str, CaseOutcome] = {}
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        row = OutcomeRow.model_validate_json(line)
        if row.device == device and row.mode == mode and row.case in by_id:
            found[row.case] = CaseOutcome(by_id[row.case], row.got, row.rules, row.outcome, row.as_expected,
                                          row.seconds, row.note, row.streams)
    return found
