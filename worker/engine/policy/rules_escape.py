"""Threat class 4, in the Python source: leaving the evaluated call, the process or the sandbox."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from worker.engine.policy.context import NameRule, PolicyContext, name_findings, resolved_name
from worker.engine.policy.pyfacts import REACH_MODULES, chain_attributes
from worker.engine.policy.registry import Finding
from worker.engine.policy.vocab import VERDICT_PATTERN

_I, _D, _X, _S, _N, _F, _C, _M = (
    "KJ401-introspection", "KJ402-dynamic-code", "KJ403-process-exit", "KJ404-process-spawn",
    "KJ405-network", "KJ406-file-access", "KJ407-native-code-loading", "KJ408-raw-gpu-allocation",
)
NUMBA_SCALAR_TYPES = (
    "float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "intp", "uintp", "boolean", "bool_", "void", "complex64", "complex128",
)
ESCAPE_NAMES = [
    *(NameRule(p, _I) for p in (
        "sys._getframe", "sys._current_frames", "sys.settrace", "sys.setprofile", "sys.addaudithook",
        "sys.modules", "sys.meta_path", "sys.path_hooks", "sys.exc_info", "sys.last_traceback", "inspect",
        "traceback", "__main__", "worker", "kerneljudge", "builtins", "__builtins__", "globals", "locals",
        "vars", "breakpoint", "pdb", "threading.settrace", "threading.setprofile",
    )),
    NameRule("gc", _I, allow=("gc.collect", "gc.disable", "gc.enable", "gc.isenabled")),
    *(NameRule(p, _D) for p in (
        "exec", "eval", "compile", "__import__", "importlib", "runpy", "marshal", "pickle", "dill",
        "cloudpickle", "shelve", "code", "codeop", "types.FunctionType", "types.CodeType", "types.ModuleType",
        "zipimport", "pkgutil", "torch.package",
    )),
    *(NameRule(p, _X) for p in (
        "os._exit", "os.abort", "os.kill", "os.killpg", "os.pidfd_open", "sys.exit", "exit", "quit", "signal",
        "atexit", "faulthandler", "_thread.interrupt_main", "resource",
    )),
    *(NameRule(p, _S) for p in (
        "subprocess", "os.system", "os.popen", "os.fork", "os.forkpty", "os.vfork", "os.execl", "os.execle",
        "os.execlp", "os.execlpe", "os.execv", "os.execve", "os.execvp", "os.execvpe", "os.spawnl", "os.spawnle",
        "os.spawnlp", "os.spawnv", "os.spawnve", "os.spawnvp", "os.posix_spawn", "os.posix_spawnp", "os.setsid",
        "os.setpgrp", "os.setpgid", "os.startfile", "multiprocessing", "torch.multiprocessing", "pty",
        "pexpect", "sh", "plumbum", "concurrent.futures.ProcessPoolExecutor", "concurrent.futures.process",
        "asyncio.create_subprocess_exec", "asyncio.create_subprocess_shell",
    )),
    *(NameRule(p, _N) for p in (
        "socket", "ssl", "urllib", "urllib3", "http", "requests", "httpx", "aiohttp", "ftplib", "smtplib",
        "telnetlib", "xmlrpc", "websocket", "websockets", "paramiko", "socketserver", "poplib", "imaplib",
        "nntplib", "torch.distributed", "torch.hub", "asyncio.open_connection", "asyncio.start_server",
        "huggingface_hub", "webbrowser", "zmq", "grpc",
    )),
    *(NameRule(p, _F) for p in (
        "open", "io.open", "io.FileIO", "os.open", "os.fdopen", "os.read", "os.write", "os.remove", "os.unlink",
        "os.rename", "os.renames", "os.replace", "os.mkdir", "os.makedirs", "os.rmdir", "os.removedirs",
        "os.listdir", "os.scandir", "os.walk", "os.fwalk", "os.stat", "os.lstat", "os.chmod", "os.chown",
        "os.symlink", "os.link", "os.readlink", "os.truncate", "os.chdir", "os.getcwd", "os.mkfifo", "os.mknod",
        "os.utime", "os.access", "os.sendfile", "os.memfd_create", "os.path.exists", "os.path.isfile",
        "os.path.isdir", "os.path.islink", "os.path.getsize", "os.path.getmtime", "os.path.getatime",
        "os.path.getctime", "os.path.lexists", "os.path.realpath", "os.path.samefile", "os.path.expanduser",
        "shutil", "pathlib", "glob", "tempfile", "fileinput", "linecache", "mmap", "zipfile", "tarfile",
        "sqlite3", "dbm", "numpy.load", "numpy.save", "numpy.savez", "numpy.savez_compressed", "numpy.fromfile",
        "numpy.memmap", "numpy.loadtxt", "numpy.savetxt", "numpy.genfromtxt", "torch.load", "torch.save",
        "torch.from_file", "torch.UntypedStorage.from_file", "torch.utils.cpp_extension.load",
        "torch.utils.cpp_extension.load_inline.__wrapped__",
    )),
    *(NameRule(p, _C) for p in (
        "ctypes", "_ctypes", "cffi", "cppyy", "torch.ops.load_library", "torch.classes.load_library",
        "importlib.machinery.ExtensionFileLoader", "pycuda", "cuda", "numba.cuda.cudadrv",
        # Foreign code linked into a Numba kernel (CUDA C, PTX, binaries), which the policy cannot read.
        *(f"numba.cuda.{name}" for name in ("declare_device", "CUSource", "PTXSource", "Fatbin", "Cubin",
                                            "Archive", "Object", "LTOIR")),
    )),
    # Numba's CUDA target (@cuda.jit kernels, the Numba backend) and its scalar types; the rest of
    # Numba compiles host code (njit, cfunc, carray over raw addresses) the policy cannot see.
    NameRule("numba", _C, allow=("numba.cuda", "numba.types", *(f"numba.{t}" for t in NUMBA_SCALAR_TYPES))),
    *(NameRule(p, _M) for p in (
        "torch.cuda.set_per_process_memory_fraction", "torch.cuda.caching_allocator_alloc",
        "torch.cuda.caching_allocator_delete", "torch.cuda.memory._set_allocator_settings",
        "torch.cuda.memory.CUDAPluggableAllocator", "torch.cuda.change_current_allocator",
        "torch.cuda.empty_cache", "torch.cuda.MemPool", "torch.cuda.use_mem_pool",
    )),
]
# Attributes that expose frames, globals or class internals (read or written).
INTROSPECTION_ATTRS = frozenset({
    "__globals__", "__builtins__", "__code__", "__closure__", "__subclasses__", "__bases__", "__mro__",
    "__base__", "__dict__", "__self__", "__func__", "__getattribute__", "__reduce__", "__reduce_ex__",
    "f_back", "f_locals", "f_globals", "f_code", "f_builtins", "f_trace", "tb_frame", "tb_next", "gi_frame",
    "cr_frame", "ag_frame", "gi_code", "co_consts", "__loader__", "__spec__", "__traceback__", "__wrapped__",
})
EXIT_EXCEPTIONS = {"SystemExit", "KeyboardInterrupt", "GeneratorExit", "BaseException"}
# Modules an honest kernel imports; anything else is flagged for a human to look at.
USUAL_IMPORTS = (
    "torch", "triton", "numba", "math", "typing", "typing_extensions", "__future__", "dataclasses", "functools",
    "itertools", "collections", "enum", "numbers", "abc", "warnings", "os", "sys", "numpy", "einops",
    "textwrap", "operator", "contextlib", "copy", "logging", "json", "string", "re",
)
PRINT_CALLS = {"print", "sys.stdout.write", "sys.stderr.write", "sys.__stdout__.write", "sys.__stderr__.write"}


def detect_escape_names(ctx: PolicyContext) -> Iterator[Finding]:
    yield from name_findings(ctx, ESCAPE_NAMES)


def detect_module_attribute_chains(ctx: PolicyContext) -> Iterator[Finding]:
    """`torch.os`, `np.os.system`, `x.sys.modules[...]`, `getattr(F, "__builtins__")`, `from torch import os`."""
    facts = ctx.facts
    for node in facts.outermost_chains(facts.tree):
        reached = next((name for name in chain_attributes(node) if name in REACH_MODULES), None)
        if reached is not None:
            yield ctx.finding("KJ412-module-attribute-chain", f"reaches {reached} through an attribute", node)
    for node in ast.walk(facts.tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                dotted = f"{node.module}.{alias.name}".split(".")
                reached = next((name for name in dotted[1:] if name in REACH_MODULES), None)
                if reached is not None:
                    yield ctx.finding("KJ412-module-attribute-chain",
                                      f"imports {reached} as an attribute of {node.module}", node)


def detect_introspection_attrs(ctx: PolicyContext) -> Iterator[Finding]:
    for node in ast.walk(ctx.facts.tree):
        if isinstance(node, ast.Attribute) and node.attr in INTROSPECTION_ATTRS:
            yield ctx.finding("KJ401-introspection", f"reads the internal attribute {node.attr}", node)
        elif isinstance(node, ast.Name) and node.id in ("__builtins__", "__loader__", "__spec__"):
            yield ctx.finding("KJ401-introspection", f"uses {node.id}", node)


def detect_computed_attributes(ctx: PolicyContext) -> Iterator[Finding]:
    """getattr/setattr/delattr/hasattr with a name that is not a string literal."""
    for node in ast.walk(ctx.facts.tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "delattr", "hasattr")
            and node.func.id not in ctx.facts.functions
        ):
            name_arg = node.args[1] if len(node.args) > 1 else None
            if name_arg is None or not (isinstance(name_arg, ast.Constant) and isinstance(name_arg.value, str)):
                yield ctx.finding("KJ402-dynamic-code", f"calls {node.func.id}() with a computed attribute name", node)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("attrgetter", "methodcaller") or (
                node.func.attr == "__getattribute__"
            ):
                yield ctx.finding("KJ402-dynamic-code", f"looks attributes up dynamically with {node.func.attr}", node)


def detect_exit_exceptions(ctx: PolicyContext) -> Iterator[Finding]:
    facts = ctx.facts
    for node in ast.walk(facts.tree):
        if isinstance(node, ast.Raise) and node.exc is not None:
            raised = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(raised, ast.Name) and raised.id in EXIT_EXCEPTIONS:
                yield ctx.finding("KJ403-process-exit", f"raises {raised.id} to abort the harness", node)
        elif isinstance(node, ast.ClassDef):
            for base in node.bases:
                if isinstance(base, ast.Name) and base.id in EXIT_EXCEPTIONS - {"GeneratorExit"}:
                    yield ctx.finding("KJ403-process-exit",
                                      f"defines {node.name}({base.id}), which escapes `except Exception`", node,
                                      evidence=f"class {node.name}({base.id})")


def detect_unusual_imports(ctx: PolicyContext) -> Iterator[Finding]:
    for node in ast.walk(ctx.facts.tree):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            modules = [("." * node.level) + (node.module or "")]
        else:
            continue
        for module in modules:
            if module.split(".")[0] not in USUAL_IMPORTS:
                yield ctx.finding("KJ409-unusual-import", f"imports {module}", node)


def detect_source_encoding(ctx: PolicyContext) -> Iterator[Finding]:
    # PEP 263: a coding declaration in a comment on line 1 or 2 changes how the file is decoded.
    for number, line in enumerate(ctx.facts.source.splitlines()[:2], start=1):
        match = re.match(r"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)", line)
        if match and match.group(1).lower().replace("_", "-") not in ("utf-8", "utf8", "ascii", "us-ascii"):
            yield Finding("KJ410-source-encoding", f"declares the source encoding {match.group(1)}",
                          line=number, evidence=line.strip())


def detect_verdict_output(ctx: PolicyContext) -> Iterator[Finding]:
    facts = ctx.facts
    for node in ast.walk(facts.tree):
        if not isinstance(node, ast.Call):
            continue
        name = resolved_name(ctx, node.func) or facts.qualname(node.func) or ""
        is_output = name in PRINT_CALLS or name.startswith("logging.") or (
            isinstance(node.func, ast.Attribute) and node.func.attr in ("write", "info", "warning", "critical")
        )
        if not is_output:
            continue
        texts = [c.value for a in [*node.args, *(k.value for k in node.keywords)] for c in ast.walk(a)
                 if isinstance(c, ast.Constant) and isinstance(c.value, str)]
        hit = next((t for t in texts if VERDICT_PATTERN.search(t)), None)
        if hit is not None:
            yield ctx.finding("KJ411-verdict-like-output", "prints text that looks like a verdict", node)


DETECTORS = (
    detect_escape_names, detect_module_attribute_chains, detect_introspection_attrs, detect_computed_attributes, detect_exit_exceptions,
    detect_unusual_imports, detect_source_encoding, detect_verdict_output,
)
