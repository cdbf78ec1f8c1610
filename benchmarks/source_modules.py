"""A library source imported as a module of its own, for benchmarks that run our kernels in their own process
(needs nothing but the standard library, so it runs on a GPU host before the service's wheels are installed)."""

from __future__ import annotations

import importlib.util
import sys
import tempfile
import types
from pathlib import Path


def import_source(source: str, name: str) -> types.ModuleType:
    """`source` imported as module `name` from a file of its own: Triton's JIT reads a kernel's source from its
    file ("@jit functions should be defined in a Python file") and its globals through sys.modules."""
    path = Path(tempfile.mkdtemp(prefix="kj-repeat-module-")) / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
