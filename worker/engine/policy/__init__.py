"""Static reward-hacking policy: rules over a candidate's Python AST and its CUDA C++ sources.

    hits = check_candidate(source, backend=None, config=PolicyConfig())

Each `RuleHit` names the rule (`KJ302-background-thread`), its severity (reject|flag),
what the candidate did and why it is not allowed, the line and the offending snippet. The rule
table lives in `registry.RULES`; `PolicyConfig.disabled_rules` switches rules off per job
(by full id or by number, e.g. "KJ302").
"""

from worker.engine.policy.checker import check_candidate, detect_backend, verdict
from worker.engine.policy.registry import RULES, RULES_BY_ID, Rule, rule

__all__ = ["RULES", "RULES_BY_ID", "Rule", "check_candidate", "detect_backend", "rule", "verdict"]
