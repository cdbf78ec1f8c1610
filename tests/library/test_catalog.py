"""The bundled catalog: every problem folder is complete, its metadata typed and consistent, its
CUDA candidates are well-formed sources, and reading it never needs torch."""

from __future__ import annotations

import ast
import json
import subprocess
import sys

import pytest

from problem_library.catalog import (
    ALL_KINDS,
    CANDIDATE_KINDS,
    KERNEL_CLASSES,
    LIBRARY_DIR,
    NUMBA_KINDS,
    LibraryError,
    get_problem,
    load_library,
    load_problem_dir,
    problem_names,
    select,
)
from problem_library.sizes import shrink_sizes
from worker.jobs.store.jobs import problem_id_for


def _top_level_names(source: str) -> set[str]:
    names = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            names.add(node.name)
    return names


def test_every_kernel_class_is_covered_and_the_original_five_are_in_the_library():
    assert {p.kernel_class for p in load_library()} == set(KERNEL_CLASSES)
    assert {"elementwise", "softmax", "matmul", "reduction", "box_loss", "giou_varlen"} <= set(problem_names())
    assert len(problem_names()) >= 10


@pytest.mark.parametrize("name", problem_names())
def test_problem_has_its_files_and_metadata(name):
    problem = get_problem(name)
    directory = LIBRARY_DIR / name
    assert sorted(p.name for p in directory.glob("*.py")) == sorted(
        ["reference.py", *(f"{kind}.py" for kind in problem.kinds)])
    assert set(CANDIDATE_KINDS) <= set(problem.kinds)
    assert problem.kernel_class in KERNEL_CLASSES and problem.profile in ("partial", "full")
    assert len(problem.description) > 20
    assert problem.problem_id == problem_id_for(problem.reference)
    assert {"Model", "get_inputs", "get_init_inputs"} <= _top_level_names(problem.reference)
    # The CPU sizes name real size constants and make them smaller.
    assert problem.cpu_sizes
    assert problem.reference_for_cpu() != problem.reference
    for kind in ("triton_wrong", "cuda_wrong", *(["numba_wrong"] if "numba_wrong" in problem.kinds else [])):
        assert len(problem.bugs[kind]) > 30, f"{name}/{kind}.py must say its bug in its docstring"


@pytest.mark.parametrize(("name", "kind"), [(p.name, kind) for p in load_library() for kind in p.kinds])
def test_candidate_defines_model_new_for_its_backend(name, kind):
    source = get_problem(name).candidate(kind)
    assert "ModelNew" in _top_level_names(source)
    if kind.startswith("cuda"):
        assert "load_inline(" in source and "__global__" in source
    elif kind.startswith("numba"):
        assert "@cuda.jit" in source
    else:
        assert "@triton.jit" in source


def test_numba_candidates_come_in_pairs_and_unknown_or_missing_kinds_are_refused(tmp_path):
    with_numba = [p for p in load_library() if "numba_ok" in p.kinds]
    assert with_numba and all(set(NUMBA_KINDS) <= set(p.kinds) for p in with_numba)
    without = next(p for p in load_library() if "numba_ok" not in p.kinds)
    with pytest.raises(LibraryError, match="has no numba_ok candidate"):
        without.candidate("numba_ok")
    with pytest.raises(LibraryError, match="unknown candidate kind"):
        without.candidate("numba")
    assert set(ALL_KINDS) == set(CANDIDATE_KINDS) | set(NUMBA_KINDS)
    # A folder with only one of the pair is malformed.
    folder = tmp_path / with_numba[0].name
    folder.mkdir()
    for source in (LIBRARY_DIR / with_numba[0].name).iterdir():
        if source.name != "numba_wrong.py" and source.is_file():
            (folder / source.name).write_text(source.read_text())
    with pytest.raises(LibraryError, match="numba_ok.py but not the other"):
        load_problem_dir(folder)


def test_matmul_cuda_candidate_is_a_shared_memory_tiled_kernel():
    source = get_problem("matmul").candidate("cuda_ok")
    assert "__shared__" in source and "__syncthreads()" in source


def test_select_resolves_sets_classes_and_names_once_each():
    assert select(["all"]) == load_library()
    assert [p.name for p in select(["loss"])] == ["box_loss", "giou_varlen"]
    assert [p.name for p in select(["giou_varlen", "loss"])] == ["giou_varlen", "box_loss"]
    with pytest.raises(LibraryError, match="neither a problem nor a set"):
        select(["no_such_problem"])


def test_a_malformed_problem_folder_says_what_is_wrong(tmp_path):
    folder = tmp_path / "broken"
    folder.mkdir()
    for kind in ("reference", *CANDIDATE_KINDS):
        (folder / f"{kind}.py").write_text('"""doc string long enough to describe a bug here."""\n')
    (folder / "problem.json").write_text(json.dumps({"name": "broken", "kernel_class": "sorting",
                                                     "description": "x", "profile": "full"}))
    with pytest.raises(LibraryError, match="kernel_class must be one of"):
        load_problem_dir(folder)
    (folder / "problem.json").write_text(json.dumps({"name": "broken", "kernel_class": "loss",
                                                     "description": "x", "profile": "full"}))
    (folder / "cuda_wrong.py").unlink()
    with pytest.raises(LibraryError, match="cuda_wrong.py is missing"):
        load_problem_dir(folder)


def test_shrink_sizes_rewrites_only_the_named_constants():
    source = "import torch\nN = 4096  # rows\nM: int = 8\n"
    assert shrink_sizes(source, N=7) == "import torch\nN = 7  # rows\nM: int = 8\n"
    with pytest.raises(ValueError, match="not a top-level integer constant"):
        shrink_sizes(source, K=3)


def test_reading_the_catalog_and_the_cli_imports_neither_torch_nor_the_store():
    code = ("import sys\n"
            "from kerneljudge.cli import main\n"
            "main(['problems', 'list'])\n"
            "from problem_library.catalog import load_library\n"
            "assert len(load_library()) >= 10\n"
            "heavy = sorted(m for m in ('torch', 'triton', 'sqlalchemy') if m in sys.modules)\n"
            "assert not heavy, heavy\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "giou_varlen" in done.stdout
