"""The repository's layout (docs/layout.md): which package may import which, and each file name once."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("contract", "sandbox_side", "problem_library", "worker", "app", "kerneljudge")
# What each package may import of ours (docs/layout.md); the others are the outside world.
MAY_IMPORT = {
    "contract": set(),
    "sandbox_side": {"contract"},
    "problem_library": set(),
    "worker": {"contract", "sandbox_side", "problem_library"},
    "app": {"contract", "sandbox_side", "problem_library", "worker"},
    "kerneljudge": {"contract", "problem_library"},
}


def package_modules(package: str) -> list[Path]:
    """The package's own modules: not the problems' sources (data) nor the migration revisions (generated names)."""
    return [path for path in sorted((ROOT / package).rglob("*.py"))
            if not (package == "problem_library" and len(path.relative_to(ROOT / package).parts) > 1)
            and "migrations" not in path.parts]


def imported_packages(path: Path) -> set[str]:
    """The top-level packages a module imports (absolute imports; every import in the tree is absolute)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative import"
            found.add((node.module or "").split(".")[0])
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_a_package_imports_only_the_packages_below_it(package):
    modules = package_modules(package)
    assert len(modules) > 3
    forbidden = set(PACKAGES) - MAY_IMPORT[package] - {package}
    offending = {str(path.relative_to(ROOT)): sorted(imported_packages(path) & forbidden) for path in modules
                 if imported_packages(path) & forbidden}
    assert offending == {}


def test_each_file_name_appears_once():
    names = Counter(path.name for package in PACKAGES for path in package_modules(package)
                    if path.name != "__init__.py")
    assert [name for name, count in names.items() if count > 1] == []


def test_pytest_walks_every_test_folder(pytestconfig):
    """pytest's default `norecursedirs` holds "build", and skipped tests/build (the CUDA build's tests) for four
    days of CI: no folder under tests/ may match a pattern of the configuration pytest runs with."""
    import fnmatch

    patterns = pytestconfig.getini("norecursedirs")
    folders = {path.name for path in (ROOT / "tests").rglob("*") if path.is_dir() and path.name != "__pycache__"
               and any(path.glob("test_*.py"))}
    assert "build" in folders
    assert not {folder for folder in folders for pattern in patterns if fnmatch.fnmatch(folder, pattern)}
