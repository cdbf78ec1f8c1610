"""What every detector receives, plus the shared "dotted name -> rule" table matcher."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from contract.statuses import Backend
from worker.engine.policy.cuda_sources import CudaSource
from worker.engine.policy.pyfacts import CandidateFacts, dotted_qualname, reached_module
from worker.engine.policy.registry import Finding

# Bare names that mean something without an import (when the candidate does not rebind them).
BUILTIN_NAMES = frozenset({
    "open", "exec", "eval", "compile", "__import__", "exit", "quit", "globals", "locals", "vars",
    "breakpoint", "input", "print", "__builtins__", "__loader__", "__spec__", "memoryview", "help",
})


@dataclass
class PolicyContext:
    facts: CandidateFacts
    cuda_sources: list[CudaSource]
    backend: Backend
    explicit_backend: bool

    def finding(self, rule: str, what: str, node: ast.AST | None, evidence: str | None = None) -> Finding:
        line = getattr(node, "lineno", None) if node is not None else None
        if evidence is None and node is not None:
            evidence = self.facts.segment(node)
        return Finding(rule=rule, what=what, line=line, evidence=evidence)


@dataclass(frozen=True)
class NameRule:
    """`prefix` (a dotted name, matched on whole components) maps to `rule`; `allow` excludes."""

    prefix: str
    rule: str
    allow: tuple[str, ...] = ()


def resolved_name(ctx: PolicyContext, node: ast.AST) -> str | None:
    """The dotted name of a chain, only if its root is an import or an unshadowed builtin. A chain that
    reaches a module through an attribute (`torch.os.open`) resolves to that module's name (`os.open`),
    so that every table judges it as if it had been imported (KJ412 rejects the chain itself)."""
    name = _resolved_name(ctx, node)
    return reached_module(name) or name


def _resolved_name(ctx: PolicyContext, node: ast.AST) -> str | None:
    facts = ctx.facts
    root = node
    while isinstance(root, ast.Attribute):
        root = root.value
    if isinstance(root, ast.Call):  # getattr(module, "name")
        root = root.args[0] if root.args else root
        while isinstance(root, ast.Attribute):
            root = root.value
    if not isinstance(root, ast.Name):
        return None
    if root.id in facts.aliases:  # an import, or a module-level alias of one (mm = torch.mm)
        return facts.qualname(node)
    if root.id in (facts.module_names | set(facts.functions) | set(facts.classes)):
        return None  # a local rebinding, not the builtin
    if root.id not in BUILTIN_NAMES:
        return None
    return facts.qualname(node)


def match_name(name: str, table: Iterable[NameRule]) -> NameRule | None:
    best: NameRule | None = None
    for entry in table:
        if dotted_qualname(name, entry.prefix) and not any(dotted_qualname(name, a) for a in entry.allow):
            if best is None or len(entry.prefix) > len(best.prefix):
                best = entry
    return best


def name_findings(ctx: PolicyContext, table: list[NameRule], scope: Iterable[ast.AST] | None = None
                  ) -> Iterator[Finding]:
    """Findings for imports and name uses matching `table`, across the module or within `scope`."""
    roots: list[ast.AST] = [ctx.facts.tree] if scope is None else list(scope)
    for root in roots:
        for node in ast.walk(root):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for imported in _imported_names(node):
                    entry = match_name(imported, table)
                    # Importing the root of a partly allowed package (`import numba`, `import gc`)
                    # is judged by what the candidate then uses of it.
                    if entry and not (entry.allow and imported == entry.prefix):
                        yield ctx.finding(entry.rule, f"imports {imported}", node)
    for node in _chains(ctx, roots):
        name = resolved_name(ctx, node)
        if name is None:
            continue
        entry = match_name(name, table)
        if entry:
            parent = ctx.facts.parents.get(node)
            verb = "calls" if isinstance(parent, ast.Call) and parent.func is node else "uses"
            yield ctx.finding(entry.rule, f"{verb} {name}", node)


def _chains(ctx: PolicyContext, roots: list[ast.AST]) -> Iterator[ast.AST]:
    seen: set[int] = set()
    for root in roots:
        for node in ctx.facts.outermost_chains(root):
            if id(node) not in seen:
                seen.add(id(node))
                yield node


def _imported_names(node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    module = node.module or ""
    return [f"{module}.{alias.name}" if module else alias.name for alias in node.names]


def calls_in(root: ast.AST) -> Iterator[ast.Call]:
    for node in ast.walk(root):
        if isinstance(node, ast.Call):
            yield node


def string_constants(node: ast.AST) -> Iterator[str]:
    for item in ast.walk(node):
        if isinstance(item, ast.Constant) and isinstance(item.value, str):
            yield item.value
