"""Find the C++/CUDA sources a candidate compiles, through its Python AST.

Sources are the string values passed to load_inline's cpp_sources/cuda_sources (directly, as
lists, via names assigned elsewhere, concatenations, f-strings, str.join or .format), plus any
other string constant in the module that looks like C++/CUDA, so that building the source
in an unusual way does not hide it from the rules.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from worker.engine.policy.pyfacts import CandidateFacts

# load_inline(name, cpp_sources, cuda_sources=None, ...): positional slots of the sources.
SOURCE_KEYWORDS = {"cpp_sources": 1, "cuda_sources": 2}
CPP_MARKERS = ("__global__", "__device__", "#include", "PYBIND11_MODULE", "TORCH_LIBRARY", "<<<", "torch::", "at::")


@dataclass(frozen=True)
class CudaSource:
    text: str
    line: int  # Python line of the first line of `text`
    origin: str  # cuda_sources / cpp_sources / string-constant


def find_cuda_sources(facts: CandidateFacts) -> list[CudaSource]:
    sources: list[CudaSource] = []
    seen: set[int] = set()
    for call in facts.load_inline_calls:
        for keyword, position in SOURCE_KEYWORDS.items():
            value = _argument(call, keyword, position)
            if value is not None:
                for text, line, node_ids in _strings(facts, value, depth=0):
                    seen.update(node_ids)
                    sources.append(CudaSource(text, line, keyword))
    for node in ast.walk(facts.tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in seen:
            if any(marker in node.value for marker in CPP_MARKERS):
                sources.append(CudaSource(node.value, node.lineno, "string-constant"))
    return sources


def _argument(call: ast.Call, keyword: str, position: int | None) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg == keyword:
            return kw.value
    if position is not None and len(call.args) > position:
        return call.args[position]
    return None


def _strings(facts: CandidateFacts, node: ast.expr, depth: int) -> list[tuple[str, int, set[int]]]:
    """Resolve an expression to the strings it can stand for: (text, first line, constant node ids)."""
    if depth > 8:
        return []
    line = getattr(node, "lineno", 0)
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [(node.value, node.lineno, {id(node)})]
    if isinstance(node, (ast.List, ast.Tuple)):
        return [item for element in node.elts for item in _strings(facts, element, depth + 1)]
    if isinstance(node, ast.JoinedStr):
        return [_join(facts, node.values, line, depth, placeholder=" ")]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return [_join(facts, [node.left, node.right], line, depth, placeholder="")]
    if isinstance(node, ast.Name):
        return [item for value in _assigned_values(facts, node.id) for item in _strings(facts, value, depth + 1)]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        if node.func.attr == "join" and node.args:
            return [_join(facts, [node.args[0]], line, depth, placeholder="\n")]
        if node.func.attr in ("format", "strip", "lstrip", "rstrip", "replace"):
            return _strings(facts, node.func.value, depth + 1)
        if node.func.attr == "dedent" and node.args:
            return _strings(facts, node.args[0], depth + 1)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dedent" and node.args:
        return _strings(facts, node.args[0], depth + 1)
    return []


def _join(facts: CandidateFacts, parts: list[ast.expr], line: int, depth: int, placeholder: str):
    texts: list[str] = []
    ids: set[int] = set()
    for part in parts:
        if isinstance(part, ast.FormattedValue):
            resolved = _strings(facts, part.value, depth + 1)
        else:
            resolved = _strings(facts, part, depth + 1)
        texts.append(placeholder.join(text for text, _, _ in resolved) or placeholder)
        for _, _, node_ids in resolved:
            ids.update(node_ids)
    return (placeholder.join(texts) if placeholder == "\n" else "".join(texts), line, ids)


def _assigned_values(facts: CandidateFacts, name: str) -> list[ast.expr]:
    values: list[ast.expr] = []
    for node in ast.walk(facts.tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            values.append(node.value)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            if node.value is not None:
                values.append(node.value)
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            values.append(node.value)
    return values
