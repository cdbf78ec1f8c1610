"""Where the sandbox's Python imports from, and which of the server's packages it cannot reach.

The sandbox runs the server's own interpreter isolated (`python -I`: no PYTHONPATH, no user site,
no current folder). It can import exactly what that interpreter finds on its default path (its
prefixes' site-packages and what their .pth files add), so those folders are what the sandbox
mounts. A package the server imports from anywhere else (a `pip install --target` folder on
PYTHONPATH, the user site) is invisible in the sandbox: `unreachable_modules` says which, and where
they are, so that the start-up check can name the fix.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import dataclass

# What the sandboxed runtime imports (the judge also imports contract.results: pydantic).
REQUIRED_MODULES = ("torch", "numpy", "pydantic", "pydantic_core", "typing_extensions", "annotated_types")
OPTIONAL_MODULES = ("triton", "numba")


def covered(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


@functools.cache
def isolated_sys_path() -> tuple[str, ...]:
    """The interpreter's import path under `-I`, as the sandbox's runners start it."""
    try:
        out = subprocess.run([sys.executable, "-I", "-c", "import sys, json; print(json.dumps(sys.path))"],
                             capture_output=True, text=True, timeout=60, check=True, env={}).stdout
        return tuple(p for p in json.loads(out) if p)
    except (OSError, subprocess.SubprocessError, ValueError):
        return ()


def python_prefixes() -> list[str]:
    candidates = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                  os.path.dirname(os.path.dirname(os.path.realpath(sys.executable)))}
    return sorted(p for p in {os.path.realpath(c) for c in candidates} | candidates if os.path.isdir(p))


# The checkout this package runs from: an editable install adds it to the import path with a .pth
# file, but the sandbox gets what it needs of the project through its own mounts (the runtime; the
# comparison code for the judge) and must never see the rest of it (a ./data folder with the job store).
PROJECT_ROOT = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def python_roots() -> list[str]:
    """Folders the sandbox mounts read-only for Python: the prefixes, and any folder of the isolated
    import path outside them (one a .pth file adds), except the project's own checkout."""
    roots = python_prefixes()
    for entry in isolated_sys_path():
        for path in dict.fromkeys((entry, os.path.realpath(entry))):
            if os.path.isdir(path) and not covered(path, roots) and not covered(PROJECT_ROOT, [path]):
                roots.append(path)
    return roots


# The supervisor's packages: never importable in a sandbox (the sandbox side and the contract are mounted on
# their own, worker/engine/launch.py).
SUPERVISOR_PACKAGES = ("worker", "app", "kerneljudge")


def supervisor_package_dirs(readable_roots: list[str]) -> list[str]:
    """Where the supervisor's packages are, when a folder the sandbox reads holds them (a regular install puts
    them in site-packages beside torch): the sandbox covers each with an empty folder. An editable install's
    checkout is no Python root (python_roots), so nothing needs covering there."""
    found = []
    for name in SUPERVISOR_PACKAGES:
        location = module_location(name)
        if location is not None and os.path.isdir(location) and covered(location, readable_roots):
            found.append(location)
    return found


@dataclass(frozen=True)
class UnreachableModule:
    name: str
    location: str  # where the server imports it from


def module_location(name: str) -> str | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return os.path.realpath(list(spec.submodule_search_locations)[0])
    return os.path.realpath(spec.origin) if spec.origin else None


def unreachable_modules(names: tuple[str, ...] = REQUIRED_MODULES + OPTIONAL_MODULES) -> list[UnreachableModule]:
    """Modules the server can import but the sandbox's isolated interpreter cannot (not on its path);
    none when that path could not be read (the start-up evaluation still tells)."""
    if not isolated_sys_path():
        return []
    path = [os.path.realpath(p) for p in isolated_sys_path()] + list(isolated_sys_path())
    found = []
    for name in names:
        location = module_location(name)
        if location is not None and not covered(location, path):
            found.append(UnreachableModule(name, location))
    return found


def describe_unreachable(modules: list[UnreachableModule]) -> str:
    """What is wrong and what to do, for the log and /v1/ready."""
    where = "; ".join(f"{m.name} is at {m.location}" for m in modules)
    return (f"the server's packages are outside the Python prefixes the sandbox mounts ({where}); the sandbox "
            f"runs {sys.executable} isolated (no PYTHONPATH, no user site) and imports only from "
            f"{', '.join(isolated_sys_path()) or 'its own prefix'}: install them into {sys.prefix} "
            f"(e.g. {sys.executable} -m pip install ...) instead of a --target folder or the user site")
