"""Rewrites a reference's top-level integer size constants (`NUM = 4096`) to new values.

Problems size their inputs for a GPU through such constants; CPU runs shrink them.
"""

from __future__ import annotations

import ast


def _int_constants(tree: ast.Module) -> dict[str, list[ast.Constant]]:
    """Top-level `NAME = <int>` (or `NAME: int = <int>`) assignments, by name."""
    found: dict[str, list[ast.Constant]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name) and isinstance(value, ast.Constant) and type(value.value) is int:
            found.setdefault(target.id, []).append(value)
    return found


def shrink_sizes(source: str, **sizes: int) -> str:
    """Return `source` with the given top-level integer constants set to new values.

    Only the literal of each assignment changes; the rest of the text (comments included) is
    kept. Raises ValueError for a name that is not a top-level integer constant of `source`,
    and for a new value that is not a positive int.
    """
    tree = ast.parse(source)
    constants = _int_constants(tree)
    for name, value in sizes.items():
        if name not in constants:
            known = ", ".join(sorted(constants)) or "none"
            raise ValueError(
                f"{name!r} is not a top-level integer constant of this source "
                f"(its integer constants: {known}); check the name against the reference"
            )
        if type(value) is not int or value <= 0:
            raise ValueError(f"size {name} must be a positive int, got {value!r}")

    lines = source.splitlines(keepends=True)
    edits = [(node, sizes[name]) for name in sizes for node in constants[name]]
    # Replace from the end of the text backwards so earlier positions stay valid.
    edits.sort(key=lambda edit: (edit[0].lineno, edit[0].col_offset), reverse=True)
    for node, value in edits:
        if node.end_lineno != node.lineno or node.end_col_offset is None:
            raise ValueError(f"cannot rewrite the literal on line {node.lineno}: it spans several lines")
        # ast offsets count UTF-8 bytes, so edit the line as bytes.
        line = lines[node.lineno - 1].encode("utf-8")
        line = line[: node.col_offset] + str(value).encode() + line[node.end_col_offset :]
        lines[node.lineno - 1] = line.decode("utf-8")
    result = "".join(lines)
    ast.parse(result)  # the rewrite must leave valid Python
    return result
