"""Run corpus cases through the static policy or the whole engine and score them."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from contract.requests import EvalOptions, EvalRequest, PolicyConfig, StageLimits
from contract.results import CoverageReport, EvalResult, RuleHit
from contract.statuses import Device, EvalStatus
from worker.engine.policy import check_candidate

from .corpus import RedteamCase

log = logging.getLogger(__name__)

# Outcome of one case, as the table shows it.
CAUGHT, MISSED, PENDING, NOT_RUN = "caught", "MISSED", "pending-runtime", "not-run"
PASSED, FALSE_POSITIVE, HONEST_FLAGGED = "passed", "FALSE-POSITIVE", "passed(flagged)"


@dataclass
class CaseOutcome:
    case: RedteamCase
    got: str
    rules: list[str] = field(default_factory=list)
    outcome: str = NOT_RUN
    as_expected: bool | None = None
    seconds: float = 0.0
    note: str = ""
    streams: str = ""  # what the kernel trace saw of streams (GPU): stream_evidence


def stream_evidence(coverage: CoverageReport | None) -> str:
    """The kernel trace's stream evidence, which KJ-R03 reads, in one line: empty when no kernel left the
    timed stream and the hold covered forward (or there was no trace)."""
    if coverage is None:
        return ""
    parts = [f"{label}={','.join(names)}" for label, names in (
        ("off_stream", coverage.off_stream_kernels), ("unordered", coverage.unordered_kernels),
        ("escaped", coverage.escaped_kernels)) if names]
    if coverage.current_stream_switched:
        parts.append("switched")
    if coverage.stream_hold_covered_forward is False:
        parts.append("hold_ended_before_forward_returned")
    return " ".join(parts)[:300]


def short(rule_id: str) -> str:
    """`KJ104` for static rules, `KJ-R02` for the engine's runtime rules."""
    match = re.match(r"KJ-R\d+|KJ\d+", rule_id)
    return match.group(0) if match else rule_id


def static_got(hits: list[RuleHit]) -> str:
    rejecting = [short(h.rule) for h in hits if h.severity == "reject"]
    if rejecting:
        return f"rejected:{rejecting[0]}"
    return "flagged" if hits else "accepted"


def matches(expected: str, got: str, rules: list[RuleHit]) -> bool:
    if expected.startswith("rejected:"):
        wanted = expected.split(":", 1)[1]
        return got.startswith("rejected") and any(short(h.rule) == wanted and h.severity == "reject" for h in rules)
    if expected == "rejected":
        return got.startswith("rejected")
    if expected == "flagged":  # a flag rule fired; a stricter verdict from a later layer still meets it
        return got == "flagged" or got.startswith("rejected") or (
            got != "accepted" and any(h.severity == "flag" for h in rules)
        )
    return got == expected


def classify(case: RedteamCase, got: str, static_only: bool) -> str:
    accepted = got == "accepted"
    if case.honest:
        if got.startswith("rejected") or (not static_only and got not in ("accepted", "flagged")):
            return FALSE_POSITIVE
        return HONEST_FLAGGED if got == "flagged" else PASSED
    if not accepted:
        return CAUGHT
    if static_only and case.layer == "runtime":
        return PENDING
    return MISSED


def case_policy(case: RedteamCase, disabled: Iterable[str]) -> PolicyConfig:
    """The job's policy for a case: its profile, and its own disabled rules plus the run's."""
    return PolicyConfig(profile=case.profile, disabled_rules=[*case.disabled_rules, *disabled])


def run_static(case: RedteamCase, disabled: Iterable[str]) -> CaseOutcome:
    started = time.perf_counter()
    hits = check_candidate(case.candidate_source, None, case_policy(case, disabled))
    got = static_got(hits)
    outcome = CaseOutcome(case, got, [short(h.rule) for h in hits], seconds=time.perf_counter() - started)
    outcome.outcome = classify(case, got, static_only=True)
    if case.layer == "static" or outcome.outcome != PENDING:
        outcome.as_expected = matches(case.expected, got, hits) if case.layer == "static" else None
    return outcome


def run_engine(
    case: RedteamCase,
    disabled: Iterable[str],
    device: Device,
    evaluate: Callable[[EvalRequest], EvalResult],
    run_limit_s: float,
) -> CaseOutcome:
    if case.needs_gpu and device != Device.cuda:
        return CaseOutcome(case, "-", outcome=NOT_RUN, note="needs a GPU")
    options = EvalOptions(
        device=device,
        policy=case_policy(case, disabled),
        limits=StageLimits(run_s=run_limit_s, timing_s=max(run_limit_s, 60.0)),
    )
    request = EvalRequest(reference=case.reference_source, candidate=case.candidate_source, options=options)
    started = time.perf_counter()
    result = evaluate(request)
    seconds = time.perf_counter() - started
    hits: list[RuleHit] = list(result.rules)
    got = _engine_got(result, hits)
    outcome = CaseOutcome(case, got, [short(h.rule) for h in hits], seconds=seconds,
                          streams=stream_evidence(result.coverage))
    outcome.outcome = classify(case, got, static_only=False)
    outcome.as_expected = matches(case.expected, got, hits)
    if result.error is not None:
        outcome.note = f"{result.error.kind}: {result.error.message}"[:160]
    rejecting = [hit for hit in hits if hit.severity == "reject"]
    if case.honest and rejecting:  # a false reject: why, in the rule's own evidence
        outcome.note = f"{short(rejecting[0].rule)}: {rejecting[0].evidence}"[:1000]
    return outcome


def _engine_got(result, hits: list[RuleHit]) -> str:
    if result.status == EvalStatus.ok:
        return "flagged" if result.flagged else "accepted"
    if result.status == EvalStatus.rejected:
        rejecting = [short(h.rule) for h in hits if h.severity == "reject"]
        return f"rejected:{rejecting[0]}" if rejecting else "rejected"
    return result.status.value


@dataclass
class Summary:
    attacks_run: int
    caught: int
    missed: int
    pending: int
    not_run: int
    honest_run: int
    false_positives: int
    honest_flagged: int
    unexpected: int

    @property
    def catch_rate(self) -> float | None:
        return self.caught / self.attacks_run if self.attacks_run else None

    @property
    def false_positive_rate(self) -> float | None:
        return self.false_positives / self.honest_run if self.honest_run else None


def summarise(outcomes: list[CaseOutcome]) -> Summary:
    attacks = [o for o in outcomes if not o.case.honest]
    honest = [o for o in outcomes if o.case.honest and o.outcome != NOT_RUN]
    decided = [o for o in attacks if o.outcome in (CAUGHT, MISSED)]
    return Summary(
        attacks_run=len(decided),
        caught=sum(o.outcome == CAUGHT for o in attacks),
        missed=sum(o.outcome == MISSED for o in attacks),
        pending=sum(o.outcome == PENDING for o in attacks),
        not_run=sum(o.outcome == NOT_RUN for o in outcomes),
        honest_run=len(honest),
        false_positives=sum(o.outcome == FALSE_POSITIVE for o in honest),
        honest_flagged=sum(o.outcome == HONEST_FLAGGED for o in honest),
        unexpected=sum(o.as_expected is False for o in outcomes),
    )
