"""The original five benchmark problems of the problem library, as tests use them.

Each problem folder (problem_library/NAME) holds a KernelBench reference and four
candidates: a correct and a subtly wrong one for Triton and for CUDA; the wrong candidates
describe their bug in their module docstring. `shrunk()` resizes the reference for CPU runs
with the problem's `cpu_sizes` (problem_library/NAME/problem.json).
"""

from __future__ import annotations

from dataclasses import dataclass

from problem_library.catalog import CANDIDATE_KINDS, LIBRARY_DIR, get_problem
from problem_library.sizes import shrink_sizes

__all__ = ["CANDIDATE_KINDS", "PROBLEMS_DIR", "PROBLEM_NAMES", "Problem", "load_problem", "shrink_sizes"]

PROBLEMS_DIR = LIBRARY_DIR

PROBLEM_NAMES: tuple[str, ...] = ("elementwise", "softmax", "matmul", "reduction", "box_loss")


@dataclass(frozen=True)
class Problem:
    """Sources of one problem; `*_bug` says how the matching wrong candidate is wrong."""

    name: str
    reference: str
    triton_ok: str
    triton_wrong: str
    cuda_ok: str
    cuda_wrong: str
    triton_wrong_bug: str
    cuda_wrong_bug: str
    cpu_sizes: dict[str, int]

    def candidate(self, kind: str) -> str:
        if kind not in CANDIDATE_KINDS:
            raise ValueError(f"unknown candidate kind {kind!r}; expected one of {', '.join(CANDIDATE_KINDS)}")
        return getattr(self, kind)

    def shrunk(self, **sizes: int) -> Problem:
        """This problem with its reference resized (its CPU sizes when no sizes are given)."""
        return Problem(**{**self.__dict__, "reference": shrink_sizes(self.reference, **(sizes or self.cpu_sizes))})


def load_problem(name: str) -> Problem:
    """The reference and the four candidates of problem `name` from the problem library."""
    if name not in PROBLEM_NAMES:
        raise ValueError(f"unknown problem {name!r}; expected one of {', '.join(PROBLEM_NAMES)}")
    problem = get_problem(name)
    return Problem(name=name, reference=problem.reference, **{kind: problem.candidates[kind] for kind in CANDIDATE_KINDS},
                   triton_wrong_bug=problem.bugs["triton_wrong"], cuda_wrong_bug=problem.bugs["cuda_wrong"],
                   cpu_sizes=problem.cpu_sizes)
