"""Entry point inside the build sandbox: import the candidate, and build each load_inline extension
it asks for through the fast path, or the full ninja build when the fast path declines.

torch's load_inline writes main.cpp, cuda.cu and build.ninja, then calls _run_ninja_build: that one
call is replaced, so names, directories and files stay exactly torch's. Environment: KJ_SOURCE,
KJ_MSG_FD and KJ_FD_SOCK (sandbox_side/runtime/channel.py), TORCH_EXTENSIONS_DIR, KJ_PCH_ROOT,
KJ_BUILD_PATH (auto | full).
Replies one JSON line (sandbox_side/runtime/messages.py): Built, with the built files' bytes as its payload
(ext_tree: TORCH_EXTENSIONS_DIR is a size-capped tmpfs, and the supervisor writes the cache entry
itself), or an ErrorReply with the extensions and the line map beside it.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.utils.cpp_extension as cpp_extension

from sandbox_side.build.fast import CompileFailed, build_fast, link_for_abi_check
from sandbox_side.build.ninja_state import CUDA_OBJECT, MAIN_OBJECT, NinjaStateRejected, TorchBuildPlan
from sandbox_side.build.pch import compiler_identity, find_pch, pch_mismatch
from sandbox_side.build.source_map import SourceMap
from sandbox_side.build.split import NotSplittable
from sandbox_side.build.toolchain import Toolchain, find_toolchain
from sandbox_side.build.torch_support import point_torch_at, torch_has_cuda
from sandbox_side.runtime.channel import Channel
from sandbox_side.runtime.failure_kind import FailureKind
from sandbox_side.runtime.file_tree import (
    pack as pack_tree,  # mounted for builds too (worker/engine/build/builder.py)
)
from sandbox_side.runtime.messages import Built, ErrorReply

BUILD_FAILURE_PREFIX = "Error building extension"
MAIN_SOURCE_ERROR = re.compile(r"main\.cpp:\d+:\d+: (fatal )?error")


@dataclass
class ExtensionBuild:
    name: str
    path: str = "full"  # fast | full
    reason: str = ""  # why the full build was taken
    seconds: float = 0.0
    steps: dict[str, float] = field(default_factory=dict)
    linked: bool = True
    abi_check: str = ""  # CPU torch only: what loading the host half into CPU torch showed
    merge: str = ""  # fast path: why main.cpp and the host half were compiled apart ("": as one unit)


@dataclass
class BuildSession:
    mode: str
    toolchain: Toolchain
    pch_root: Path
    cuda_torch: bool
    builds: list[ExtensionBuild] = field(default_factory=list)
    source_map: SourceMap = field(default_factory=SourceMap)

    def run_ninja(self, original, build_directory: str, verbose: bool, error_prefix: str) -> None:
        directory = Path(build_directory)
        record = ExtensionBuild(name=directory.name)
        self.builds.append(record)
        started = time.monotonic()
        try:
            if self.mode == "full":
                record.reason = "full build requested"
            else:
                self._fast(directory, record)
                return
        except NotSplittable as exc:
            record.reason = exc.reason
        except NinjaStateRejected as exc:
            record.reason = f"ninja did not accept the fast-built files: {exc}"
        except CompileFailed as exc:
            if exc.unit == "main" and MAIN_SOURCE_ERROR.search(exc.log):
                # main.cpp is torch's file for the candidate's cpp_sources, compiled unchanged: an error
                # located in it is the candidate's, and the full build would report the same.
                record.path = "fast"
                raise RuntimeError(f"{error_prefix}: {exc.log}") from None
            record.reason = (f"the {exc.unit} half did not compile on its own ({first_error(exc.log)}); "
                             "the full build decides")
        finally:
            record.seconds = round(time.monotonic() - started, 2)
        self._full(original, directory, record, verbose, error_prefix)
        record.seconds = round(time.monotonic() - started, 2)

    def _fast(self, directory: Path, record: ExtensionBuild) -> None:
        plan = TorchBuildPlan.read(directory)
        compiler = compiler_identity(self.toolchain)
        pch = find_pch(self.pch_root, plan.cflags, compiler, torch.__version__)
        if pch is None:
            raise NotSplittable("no precompiled torch header for these compile flags ("
                                + pch_mismatch(self.pch_root, plan.cflags, compiler, torch.__version__) + ")")
        report = build_fast(directory, self.toolchain, pch, link_cuda_libraries=self.cuda_torch)
        record.path = "fast"
        record.steps = report.seconds
        record.linked = report.linked
        record.merge = report.merge
        if not self.cuda_torch:
            record.abi_check = abi_check(directory, self.toolchain)

    def _full(self, original, directory: Path, record: ExtensionBuild, verbose: bool, error_prefix: str) -> None:
        record.path = "full"
        if self.cuda_torch:
            original(str(directory), verbose, error_prefix)
            return
        # A CPU torch has no CUDA libraries to link against: compile the objects, as a check.
        record.linked = False
        result = subprocess.run(["ninja", MAIN_OBJECT, CUDA_OBJECT], cwd=directory, capture_output=True, text=True,
                                check=False)
        if result.returncode != 0:
            raise RuntimeError(f"{error_prefix}: {result.stdout[-20000:]}")
        raise ObjectsOnly(directory.name)


def first_error(log: str) -> str:
    lines = [line.strip() for line in log.splitlines() if "error" in line.lower()]
    return (lines[0] if lines else log.strip()[-200:])[:300]


class ObjectsOnly(Exception):
    """CPU torch, full build: the objects compiled; there is no library to import."""


def abi_check(directory: Path, toolchain: Toolchain) -> str:
    """Link without the CUDA libraries CPU torch lacks and load the module into CPU torch."""
    try:
        library = link_for_abi_check(directory, toolchain)
    except CompileFailed as exc:
        return f"link failed: {exc.log[-400:]}"
    spec = importlib.util.spec_from_file_location(library.stem, library)
    if spec is None or spec.loader is None:
        return f"no loader for {library.name}"
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except ImportError as exc:
        return f"import failed: {exc}"
    functions = sorted(name for name in dir(module) if not name.startswith("__"))
    return "loaded; functions: " + ", ".join(functions)


def _capture_sources(session: BuildSession):
    original = cpp_extension.load_inline

    def load_inline(name, cpp_sources, cuda_sources=None, *args, **kwargs):
        session.source_map.add_extension(cpp_sources, cuda_sources, bool(kwargs.get("no_implicit_headers")))
        return original(name, cpp_sources, cuda_sources, *args, **kwargs)

    return load_inline


def main() -> int:
    channel = Channel()
    toolchain = find_toolchain()
    cuda_torch = torch_has_cuda()
    if not cuda_torch:
        point_torch_at(toolchain)
        # Lazy binding: the CUDA torch symbols a CPU torch lacks are only named, never called.
        sys.setdlopenflags(os.RTLD_LAZY | os.RTLD_LOCAL)
    session = BuildSession(mode=os.environ.get("KJ_BUILD_PATH", "auto"), toolchain=toolchain,
                           pch_root=Path(os.environ["KJ_PCH_ROOT"]), cuda_torch=cuda_torch)
    source_path = os.environ["KJ_SOURCE"]
    session.source_map.read_candidate(Path(source_path).read_text())
    original_ninja = cpp_extension._run_ninja_build

    def run_ninja_build(build_directory: str, verbose: bool, error_prefix: str) -> None:
        session.run_ninja(original_ninja, build_directory, verbose, error_prefix)

    cpp_extension._run_ninja_build = run_ninja_build
    cpp_extension.load_inline = _capture_sources(session)
    error: ErrorReply | None = None
    try:
        spec = importlib.util.spec_from_file_location("kj_candidate", source_path)
        assert spec is not None and spec.loader is not None  # a .py file's path always has a loader
        module = importlib.util.module_from_spec(spec)
        sys.modules["kj_candidate"] = module
        spec.loader.exec_module(module)
        if not hasattr(module, "ModelNew"):
            error = ErrorReply(FailureKind.runtime_error, "the module does not define ModelNew after import")
    except ObjectsOnly:
        pass  # CPU torch: the full build stops at the objects
    except BaseException as exc:  # noqa: BLE001 - user code may raise anything
        text = str(exc)
        detail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-6000:]
        if BUILD_FAILURE_PREFIX in text or "Error compiling objects" in text:
            error = ErrorReply(FailureKind.compile_error, f"build failed: {text[:20000]}")
        elif session.builds and not cuda_torch:
            pass  # the import goes on to use the extension, which a CPU torch cannot run
        else:
            error = ErrorReply(FailureKind.runtime_error,
                               f"{type(exc).__name__} while importing the module: {text[:2000]}", detail)
    extensions = [asdict(build) for build in session.builds]
    line_map = session.source_map.to_json()
    if error is not None:
        channel.send_line({**error.to_message(), "extensions": extensions, "line_map": line_map})
    else:
        files, payload = pack_tree(Path(os.environ["TORCH_EXTENSIONS_DIR"]))
        channel.reply_bytes(Built(extensions=extensions, line_map=line_map, files=files), payload)
    return 0
