"""Access to the benchmark problems in benchmarks/problems/ for tests.

Each problem directory holds a KernelBench reference and four candidates: a correct and a
subtly wrong one for Triton and for CUDA. The wrong candidates describe their bug in their
module docstring. The references size their inputs for a GPU benchmark through top-level
integer constants; `shrink_sizes` rewrites those so that tests can run on CPU.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

PROBLEMS_DIR = Path(__file__).resolve().parent.parent / "benchmarks" / "problems"

PROBLEM_NAMES: tuple[str, ...] = ("elementwise", "softmax", "matmul", "reduction", "box_loss")

CANDIDATE_KINDS: tuple[str, ...] = ("triton_ok", "triton_wrong", "cuda_ok", "cuda_wrong")

# CPU-friendly sizes, chosen so that no size is a multiple of the candidates' block sizes
# (the masks and tails are exercised) and each Triton-interpreter run takes well under 2 s.
SMALL_SIZES: dict[str, dict[str, int]] = {
    "elementwise": {"NUMEL": 10_007},
    "softmax": {"ROWS": 16, "COLS": 300},
    "matmul": {"M": 37, "N": 45, "K": 50},
    "reduction": {"BATCH": 12, "DIM": 2500},
    "box_loss": {"NUM_BOXES": 3000},
}


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

    def candidate(self, kind: str) -> str:
        if kind not in CANDIDATE_KINDS:
            raise ValueError(f"unknown candidate kind {kind!r}; expected one of {', '.join(CANDIDATE_KINDS)}")
        return getattr(self, kind)

    def shrunk(self, **sizes: int) -> Problem:
        """This problem with its reference resized (SMALL_SIZES[name] when no sizes are given)."""
        new_sizes = sizes or SMALL_SIZES[self.name]
        return Problem(
            name=self.name,
            reference=shrink_sizes(self.reference, **new_sizes),
            triton_ok=self.triton_ok,
            triton_wrong=self.triton_wrong,
            cuda_ok=self.cuda_ok,
            cuda_wrong=self.cuda_wrong,
            triton_wrong_bug=self.triton_wrong_bug,
            cuda_wrong_bug=self.cuda_wrong_bug,
        )


def _bug_description(source: str, path: Path) -> str:
    doc = ast.get_docstring(ast.parse(source, filename=str(path)))
    if not doc:
        raise ValueError(f"{path} has no module docstring describing its bug; add one")
    return " ".join(doc.split())


def load_problem(name: str) -> Problem:
    """Read the reference and the four candidates of problem `name` from benchmarks/problems."""
    if name not in PROBLEM_NAMES:
        raise ValueError(f"unknown problem {name!r}; expected one of {', '.join(PROBLEM_NAMES)}")
    directory = PROBLEMS_DIR / name
    sources: dict[str, str] = {}
    for stem in ("reference", *CANDIDATE_KINDS):
        path = directory / f"{stem}.py"
        if not path.is_file():
            raise FileNotFoundError(f"problem {name!r} is missing {path}")
        sources[stem] = path.read_text(encoding="utf-8")
    return Problem(
        name=name,
        reference=sources["reference"],
        triton_ok=sources["triton_ok"],
        triton_wrong=sources["triton_wrong"],
        cuda_ok=sources["cuda_ok"],
        cuda_wrong=sources["cuda_wrong"],
        triton_wrong_bug=_bug_description(sources["triton_wrong"], directory / "triton_wrong.py"),
        cuda_wrong_bug=_bug_description(sources["cuda_wrong"], directory / "cuda_wrong.py"),
    )


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
        is_int = isinstance(value, ast.Constant) and type(value.value) is int
        if isinstance(target, ast.Name) and is_int:
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
