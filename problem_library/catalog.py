"""Reads the bundled problems (one folder each, with `problem.json`) into typed records.

A problem folder holds `reference.py` (`Model`, `get_inputs`, `get_init_inputs`; sizes are
top-level int constants), the candidates named in CANDIDATE_KINDS, optionally the Numba pair
(NUMBA_KINDS, both or neither) and `problem.json`: name, kernel_class, description, profile,
optional atol/rtol, degenerate_output and cpu_sizes (the sizes that keep a CPU run, Triton under
its interpreter and Numba under its CUDA simulator, within a few seconds).
"""

from __future__ import annotations

import ast
import hashlib
import json
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from problem_library.sizes import shrink_sizes

LIBRARY_DIR = Path(__file__).resolve().parent

CANDIDATE_KINDS: tuple[str, ...] = ("triton_ok", "triton_wrong", "cuda_ok", "cuda_wrong")
# Numba @cuda.jit candidates, written for some problems only.
NUMBA_KINDS: tuple[str, ...] = ("numba_ok", "numba_wrong")
ALL_KINDS: tuple[str, ...] = CANDIDATE_KINDS + NUMBA_KINDS
WRONG_KINDS: tuple[str, ...] = ("triton_wrong", "cuda_wrong", "numba_wrong")
KERNEL_CLASSES: tuple[str, ...] = (
    "elementwise", "activation", "matmul", "convolution", "reduction", "pooling", "recurrent",
    "normalization", "loss",
)
PROFILES: tuple[str, ...] = ("partial", "full")
ALL_SET = "all"
METADATA_FILE = "problem.json"
_METADATA_KEYS = {"name", "kernel_class", "description", "profile", "atol", "rtol", "degenerate_output",
                  "cpu_sizes"}


class LibraryError(ValueError):
    """A problem folder is malformed, or a name matches no problem or set."""


@dataclass(frozen=True)
class LibraryProblem:
    """One bundled problem: its metadata, reference and candidates (sources as text)."""

    name: str
    kernel_class: str
    description: str
    profile: str
    atol: float | None
    rtol: float | None
    degenerate_output: bool
    cpu_sizes: dict[str, int]
    reference: str
    candidates: dict[str, str] = field(repr=False)  # kind -> source, for the kinds the folder has
    bugs: dict[str, str] = field(repr=False)  # wrong candidate kind -> its docstring, one line

    @property
    def problem_id(self) -> str:
        # Same as worker.jobs.store.jobs.problem_id_for, without importing the store (SQLAlchemy).
        return hashlib.sha256(self.reference.encode("utf-8", "surrogatepass")).hexdigest()

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(kind for kind in ALL_KINDS if kind in self.candidates)

    def candidate(self, kind: str) -> str:
        if kind not in ALL_KINDS:
            raise LibraryError(f"unknown candidate kind {kind!r}; expected one of {', '.join(ALL_KINDS)}")
        if kind not in self.candidates:
            raise LibraryError(f"problem {self.name!r} has no {kind} candidate; it has {', '.join(self.kinds)}")
        return self.candidates[kind]

    def reference_for_cpu(self) -> str:
        """The reference with its sizes set to `cpu_sizes` (for CPU tests and demos)."""
        return shrink_sizes(self.reference, **self.cpu_sizes)


def _read(path: Path) -> str:
    if not path.is_file():
        raise LibraryError(f"{path} is missing; every problem folder needs reference.py, "
                           f"{', '.join(f'{k}.py' for k in CANDIDATE_KINDS)} and {METADATA_FILE}")
    return path.read_text(encoding="utf-8")


def _docstring_line(source: str, path: Path) -> str:
    doc = ast.get_docstring(ast.parse(source, filename=str(path)))
    if not doc:
        raise LibraryError(f"{path} has no module docstring describing its bug; add one")
    return " ".join(doc.split())


def _metadata(directory: Path) -> dict:
    path = directory / METADATA_FILE
    meta = json.loads(_read(path))
    unknown = set(meta) - _METADATA_KEYS
    missing = {"name", "kernel_class", "description", "profile"} - set(meta)
    if unknown or missing:
        raise LibraryError(f"{path}: unknown keys {sorted(unknown)}, missing keys {sorted(missing)}")
    if meta["name"] != directory.name:
        raise LibraryError(f"{path}: name {meta['name']!r} must equal the folder name {directory.name!r}")
    if meta["kernel_class"] not in KERNEL_CLASSES:
        raise LibraryError(f"{path}: kernel_class must be one of {', '.join(KERNEL_CLASSES)}")
    if meta["profile"] not in PROFILES:
        raise LibraryError(f"{path}: profile must be one of {', '.join(PROFILES)}")
    return meta


def load_problem_dir(directory: Path) -> LibraryProblem:
    """Read one problem folder; raises LibraryError naming what is missing or malformed."""
    meta = _metadata(directory)
    candidates = {kind: _read(directory / f"{kind}.py") for kind in CANDIDATE_KINDS}
    numba = [kind for kind in NUMBA_KINDS if (directory / f"{kind}.py").is_file()]
    if numba and len(numba) != len(NUMBA_KINDS):
        raise LibraryError(f"{directory}: has {numba[0]}.py but not the other of {', '.join(NUMBA_KINDS)}")
    candidates.update({kind: _read(directory / f"{kind}.py") for kind in numba})
    return LibraryProblem(
        name=meta["name"],
        kernel_class=meta["kernel_class"],
        description=meta["description"],
        profile=meta["profile"],
        atol=meta.get("atol"),
        rtol=meta.get("rtol"),
        degenerate_output=bool(meta.get("degenerate_output", False)),
        cpu_sizes=dict(meta.get("cpu_sizes", {})),
        reference=_read(directory / "reference.py"),
        candidates=candidates,
        bugs={kind: _docstring_line(candidates[kind], directory / f"{kind}.py")
              for kind in WRONG_KINDS if kind in candidates},
    )


@cache
def load_library() -> tuple[LibraryProblem, ...]:
    """Every bundled problem, sorted by name."""
    folders = sorted(p for p in LIBRARY_DIR.iterdir() if (p / METADATA_FILE).is_file())
    return tuple(load_problem_dir(folder) for folder in folders)


def problem_names() -> tuple[str, ...]:
    return tuple(problem.name for problem in load_library())


def set_names() -> tuple[str, ...]:
    """Names that `select` accepts besides problem names: `all` and every kernel class in use."""
    used = {problem.kernel_class for problem in load_library()}
    return (ALL_SET, *(c for c in KERNEL_CLASSES if c in used))


def get_problem(name: str) -> LibraryProblem:
    for problem in load_library():
        if problem.name == name:
            return problem
    raise LibraryError(f"no bundled problem named {name!r}; `kerneljudge problems list` shows them")


def select(names: list[str] | tuple[str, ...]) -> tuple[LibraryProblem, ...]:
    """The problems named by set names (`all`, a kernel class) or problem names, each once, in order."""
    chosen: dict[str, LibraryProblem] = {}
    for name in names:
        if name == ALL_SET:
            matches = list(load_library())
        elif name in KERNEL_CLASSES:
            matches = [p for p in load_library() if p.kernel_class == name]
        else:
            matches = [p for p in load_library() if p.name == name]
        if not matches:
            raise LibraryError(f"{name!r} is neither a problem nor a set; sets: {', '.join(set_names())}; "
                               f"problems: {', '.join(problem_names())}")
        for problem in matches:
            chosen.setdefault(problem.name, problem)
    return tuple(chosen.values())
