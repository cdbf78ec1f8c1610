"""Text and markdown tables for a red-team run."""

from __future__ import annotations

from .runner import CaseOutcome, Summary

COLUMNS = ("case", "class", "layer", "expected", "got", "rules fired", "caught?", "as expected")


def rows(outcomes: list[CaseOutcome]) -> list[tuple[str, ...]]:
    table = []
    for o in outcomes:
        klass = "honest" if o.case.honest else str(o.case.threat_class)
        expected_flag = {True: "yes", False: "NO", None: "-"}[o.as_expected]
        table.append((o.case.id, klass, o.case.layer, o.case.expected, o.got, ",".join(dict.fromkeys(o.rules)) or "-",
                      o.outcome, expected_flag))
    return table


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def summary_lines(summary: Summary) -> list[str]:
    return [
        f"catch rate: {_percent(summary.catch_rate)} ({summary.caught}/{summary.attacks_run} attacks decided; "
        f"{summary.missed} missed, {summary.pending} left to the runtime layer, {summary.not_run} cases not run)",
        f"false-positive rate: {_percent(summary.false_positive_rate)} ({summary.false_positives}/{summary.honest_run} "
        f"honest cases rejected or failed; {summary.honest_flagged} honest cases flagged, not rejected)",
        f"outcomes differing from the manifest's expectation: {summary.unexpected}",
    ]


def text_table(outcomes: list[CaseOutcome], summary: Summary) -> str:
    table = [COLUMNS, *rows(outcomes)]
    widths = [min(max(len(r[i]) for r in table), 48) for i in range(len(COLUMNS))]
    lines = ["  ".join(cell[:48].ljust(width) for cell, width in zip(r, widths, strict=True)) for r in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join([*lines, "", *summary_lines(summary)])


def markdown(outcomes: list[CaseOutcome], summary: Summary, title: str, command: str) -> str:
    out = [f"# {title}", "", f"Command: `{command}`", ""]
    out += [f"- {line}" for line in summary_lines(summary)]
    out += ["", "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    out += ["| " + " | ".join(cell.replace("|", "\\|") for cell in r) + " |" for r in rows(outcomes)]
    notes = [(o.case.id, o.note) for o in outcomes if o.note]
    if notes:
        out += ["", "## Notes", ""] + [f"- `{cid}`: {note}" for cid, note in notes]
    streams = [(o.case.id, o.streams) for o in outcomes if o.streams]
    if streams:  # what the kernel trace saw, which KJ-R03 reads
        out += ["", "## Stream evidence", ""] + [f"- `{cid}`: {evidence}" for cid, evidence in streams]
    out += ["", "## Cases", ""] + [f"- `{o.case.id}` ({o.case.threat}): {o.case.description}" for o in outcomes]
    return "\n".join(out) + "\n"
