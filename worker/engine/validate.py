"""Stage 1: check both sources statically (no user code runs in the supervisor)."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from contract.results import ErrorKind


@dataclass
class SourceProblem(Exception):
    kind: ErrorKind
    message: str
    line: int | None = None


def _parse(source: str, role: str) -> ast.Module:
    if not source.strip():
        raise SourceProblem(ErrorKind.empty_source, f"the {role} source is empty")
    try:
        return ast.parse(source, filename=f"<{role}>")
    except SyntaxError as exc:
        raise SourceProblem(
            ErrorKind.syntax_error,
            f"the {role} has a syntax error at line {exc.lineno}: {exc.msg}",
            exc.lineno,
        ) from None
    except ValueError as exc:  # e.g. null bytes
        raise SourceProblem(ErrorKind.syntax_error, f"the {role} cannot be parsed: {exc}") from None


def _top_level(tree: ast.Module) -> dict[str, ast.AST]:
    names: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names[target.id] = node
    return names


def _require(names: dict[str, ast.AST], name: str, kind: type | tuple[type, ...], role: str, what: str) -> None:
    node = names.get(name)
    if node is None:
        raise SourceProblem(ErrorKind.missing_name, f"the {role} does not define {what} `{name}` at module level")
    if not isinstance(node, kind) and not isinstance(node, ast.Assign):
        raise SourceProblem(
            ErrorKind.wrong_type, f"`{name}` in the {role} must be {what}", getattr(node, "lineno", None)
        )


def validate_reference(source: str) -> ast.Module:
    tree = _parse(source, "reference")
    names = _top_level(tree)
    _require(names, "Model", ast.ClassDef, "reference", "a class")
    _require(names, "get_inputs", (ast.FunctionDef,), "reference", "a function")
    _require(names, "get_init_inputs", (ast.FunctionDef,), "reference", "a function")
    return tree


def validate_candidate(source: str) -> ast.Module:
    tree = _parse(source, "candidate")
    names = _top_level(tree)
    _require(names, "ModelNew", ast.ClassDef, "candidate", "a class")
    return tree
