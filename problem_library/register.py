"""Registers library problems in a job store (the server side of `serve --problems`)."""

from __future__ import annotations

from typing import Protocol

from problem_library.catalog import LibraryProblem


class ProblemStore(Protocol):
    def put_problem(self, reference: str, name: str | None = None, profile: str | None = None) -> tuple: ...


def register_in_store(store: ProblemStore, problems: tuple[LibraryProblem, ...]) -> int:
    """Put every problem with its name and profile; returns how many were new (registering is idempotent)."""
    created = 0
    for problem in problems:
        _, is_new = store.put_problem(problem.reference, problem.name, problem.profile)
        created += int(is_new)
    return created
