"""Word lists the rules share."""

from __future__ import annotations

import re

# Allocation: torch.<name>(...) and tensor.<name>(...) that only create memory (a workspace, not a result).
ALLOCATION_CALLS = frozenset({
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full",
    "full_like", "new_empty", "new_zeros", "new_ones", "new_full", "new_empty_strided", "tensor",
    "zero_", "fill_",
})

# Words that make printed text look like an evaluation verdict.
VERDICT_WORDS = ("speedup", "correct", "reward", "verdict", "passed", "runtime_ms", "elapsed", "status", "compiled")
VERDICT_PATTERN = re.compile(r"\b(" + "|".join(VERDICT_WORDS) + r")\b", re.IGNORECASE)
