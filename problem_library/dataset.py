"""A problem set as an RL dataset: one JSON row per problem, prompt text plus the problem's id.

Columns (see docs/problems.md): `prompt` (instruction + reference source), `problem_id`
(sha256 of the reference, as registered), `reference` (the source, for adapters that send it),
`name`, `kernel_class`, `profile`, and `reward_model` ({"style": "rule", "ground_truth": problem_id},
the column veRL passes to the reward function).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from problem_library.catalog import LibraryProblem

PROMPT_TEMPLATE = """\
You are given a PyTorch reference model. Write a faster implementation of it for one NVIDIA GPU.

Rules:
- Define `class ModelNew(torch.nn.Module)` with the same constructor arguments and forward signature as `Model`, \
returning the same outputs (shape, dtype, values within fp32 tolerance).
- Do the work in your own kernels: CUDA C++ compiled with `torch.utils.cpp_extension.load_inline`, or Triton.
- {profile_rule}
- Do not special-case the inputs, cache results between calls, or read the reference's outputs.

Answer with one ```python code block holding the complete module (imports, kernels and ModelNew).

Problem: {name} ({kernel_class}). {description}

Reference:
```python
{reference}
```
"""

PROFILE_RULES = {
    "partial": "You may keep some PyTorch operators (for example a GEMM) and replace or fuse the rest; "
               "at least one kernel of your own must do part of the work.",
    "full": "Every compute kernel must be your own; PyTorch may only allocate, view, reshape and copy tensors.",
}


def prompt_for(problem: LibraryProblem) -> str:
    return PROMPT_TEMPLATE.format(profile_rule=PROFILE_RULES[problem.profile], name=problem.name,
                                  kernel_class=problem.kernel_class, description=problem.description,
                                  reference=problem.reference.rstrip("\n"))


def dataset_row(problem: LibraryProblem) -> dict:
    return {
        "prompt": prompt_for(problem),
        "problem_id": problem.problem_id,
        "reference": problem.reference,
        "name": problem.name,
        "kernel_class": problem.kernel_class,
        "profile": problem.profile,
        "reward_model": {"style": "rule", "ground_truth": problem.problem_id},
    }


def write_dataset(problems: Iterable[LibraryProblem], path: Path) -> int:
    """Write one JSON line per problem to `path`; returns the number of rows."""
    rows = [dataset_row(problem) for problem in problems]
    with path.open("w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row) + "\n")
    return len(rows)
