"""The kernel names a candidate's source defines: its `__global__` functions (from the C++/CUDA
sources it compiles), its `@triton.jit` functions and its Numba `@cuda.jit` kernels. Kernel attribution labels a launched kernel
as the candidate's own by these names (worker/engine/verdict/attribution.py)."""

from __future__ import annotations

import ast

from worker.engine.policy.cuda_sources import find_cuda_sources
from worker.engine.policy.cuda_tokens import tokenize
from worker.engine.policy.pyfacts import build_facts

# Tokens that may stand between `__global__` and the kernel's name.
_DECL_WORDS = {"void", "static", "inline", "__launch_bounds__", "extern", "__forceinline__", "__noinline__"}


def own_kernel_names(source: str) -> frozenset[str]:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return frozenset()
    facts = build_facts(source, tree)
    names = set(facts.python_kernels)
    for cuda in find_cuda_sources(facts):
        names.update(global_function_names(cuda.text))
    return frozenset(names)


def global_function_names(text: str) -> set[str]:
    """Names of the `__global__` functions declared in a C++/CUDA source."""
    tokens = [t for t in tokenize(text) if t.kind not in ("comment", "directive")]
    names: set[str] = set()
    for index, token in enumerate(tokens):
        if token.text != "__global__":
            continue
        depth = 0
        for follower_index in range(index + 1, min(index + 64, len(tokens))):
            follower = tokens[follower_index]
            if follower.text == "(":
                if depth == 0:
                    previous = tokens[follower_index - 1]
                    if previous.text not in _DECL_WORDS and previous.text.isidentifier():
                        names.add(previous.text)
                        break
                depth += 1
            elif follower.text == ")":
                depth = max(depth - 1, 0)
            elif follower.text in (";", "{"):
                break
    return names
