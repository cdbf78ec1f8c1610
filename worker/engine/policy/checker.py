"""The static policy's entry points: `check_candidate` and `detect_backend`."""

from __future__ import annotations

import ast
import logging
from collections.abc import Callable, Iterable

from contract.requests import PolicyConfig
from contract.results import RuleHit
from contract.statuses import Backend
from worker.engine.policy import rules_caching, rules_compute, rules_cuda, rules_escape, rules_timing
from worker.engine.policy.context import PolicyContext
from worker.engine.policy.cuda_sources import find_cuda_sources
from worker.engine.policy.pyfacts import CandidateFacts, build_facts, dotted_qualname
from worker.engine.policy.registry import Finding, is_disabled, rule

log = logging.getLogger(__name__)

Detector = Callable[[PolicyContext], Iterable[Finding]]
DETECTORS: tuple[Detector, ...] = (
    *rules_compute.DETECTORS, *rules_escape.DETECTORS, *rules_timing.DETECTORS,
    *rules_caching.DETECTORS, *rules_cuda.DETECTORS,
)
# With an explicit `pytorch` backend the job evaluates PyTorch-level rewrites: these do not apply.
CUSTOM_KERNEL_RULES = ("KJ107",)


def detect_backend(source: str) -> Backend:
    """cuda if the candidate builds a C++/CUDA extension, else triton if it defines a Triton kernel,
    else numba if it defines a Numba `@cuda.jit` kernel."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return Backend.pytorch
    return _backend_of(build_facts(source, tree))


def _backend_of(facts: CandidateFacts) -> Backend:
    uses_cpp_extension = facts.load_inline_calls or any(
        dotted_qualname(name, "torch.utils.cpp_extension") for name in facts.aliases.values()
    )
    if uses_cpp_extension:
        return Backend.cuda
    if facts.triton_kernels:
        return Backend.triton
    if facts.numba_kernels:
        return Backend.numba
    return Backend.pytorch


def check_candidate(source: str, backend: Backend | None, config: PolicyConfig) -> list[RuleHit]:
    """Every rule the candidate's source breaks, in source order, minus the job's disabled rules."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError) as error:
        hits = [_hit(Finding("KJ000-unparsable-source", f"the source does not parse ({error})",
                             line=getattr(error, "lineno", None)))]
        return [h for h in hits if not is_disabled(h.rule, config.disabled_rules)]
    facts = build_facts(source, tree)
    ctx = PolicyContext(
        facts=facts,
        cuda_sources=find_cuda_sources(facts),
        backend=backend or _backend_of(facts),
        explicit_backend=backend is not None,
    )
    skipped = list(config.disabled_rules)
    if ctx.explicit_backend and ctx.backend == Backend.pytorch:
        skipped.extend(CUSTOM_KERNEL_RULES)
    # One finding per (rule, line), the first in detector order: several on one line say the same thing.
    findings: dict[tuple[str, int | None], Finding] = {}
    for detector in DETECTORS:
        for found in detector(ctx):
            if is_disabled(found.rule, skipped):
                continue
            findings.setdefault((found.rule, found.line), found)
    ordered = sorted(findings.values(), key=lambda f: (f.line or 0, f.rule))
    return [_hit(f) for f in ordered]


def _hit(found: Finding) -> RuleHit:
    entry = rule(found.rule)
    return RuleHit(
        rule=entry.id,
        severity=entry.severity,
        message=f"{found.what}: {entry.why}",
        line=found.line,
        evidence=found.evidence,
    )


def verdict(hits: list[RuleHit]) -> str:
    """`rejected` if any hit rejects, `flagged` if any flags, else `accepted`."""
    if any(h.severity == "reject" for h in hits):
        return "rejected"
    return "flagged" if hits else "accepted"
