"""Threat classes 2 and 3 in the Python source: fooling the timer or the output comparison."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from worker.engine.policy.context import NameRule, PolicyContext, name_findings, resolved_name
from worker.engine.policy.pyfacts import dotted_qualname
from worker.engine.policy.registry import Finding

TIMING_NAMES = [
    *(NameRule(p, "KJ302-background-thread") for p in (
        "threading", "_thread", "concurrent.futures", "asyncio", "sched", "queue", "multiprocessing.dummy",
    )),
    *(NameRule(p, "KJ308-clock-access") for p in (
        "time", "datetime", "timeit", "torch.utils.benchmark", "torch.profiler", "torch.autograd.profiler",
        "triton.testing", "torch.cuda.Event.elapsed_time", "torch.cuda._sleep", "torch.cuda.profiler",
    )),
    NameRule("os.getenv", "KJ306-env-read"),
    NameRule("os.environ", "KJ306-env-read"),
    NameRule("os.getenvb", "KJ306-env-read"),
    NameRule("os.environb", "KJ306-env-read"),
    NameRule("os.putenv", "KJ307-env-write"),
    NameRule("os.unsetenv", "KJ307-env-write"),
    *(NameRule(p, "KJ309-phase-sniffing") for p in (
        "torch.cuda.is_current_stream_capturing", "torch.is_grad_enabled", "torch.is_inference_mode_enabled",
        "torch.cuda.memory_allocated", "torch.cuda.max_memory_allocated", "torch.cuda.memory_reserved",
        "torch.cuda.max_memory_reserved", "torch.cuda.memory_stats", "torch.cuda.memory_summary",
        "torch.cuda.mem_get_info", "torch.cuda.utilization", "torch.cuda.temperature", "torch.cuda.power_draw",
        "torch.cuda.clock_rate", "torch.cuda.list_gpu_processes", "sys.argv", "sys.orig_argv", "os.getpid",
        "os.getppid", "torch.compiler.is_compiling", "torch._C._cuda_isCurrentStreamCapturing",
    )),
    *(NameRule(p, "KJ203-rng-state-access") for p in (
        "torch.manual_seed", "torch.seed", "torch.initial_seed", "torch.get_rng_state", "torch.set_rng_state",
        "torch.random", "torch.cuda.manual_seed", "torch.cuda.manual_seed_all", "torch.cuda.seed",
        "torch.cuda.seed_all", "torch.cuda.initial_seed", "torch.cuda.get_rng_state", "torch.cuda.set_rng_state",
        "torch.cuda.get_rng_state_all", "torch.cuda.set_rng_state_all", "torch.cuda.random", "random",
        "numpy.random", "torch.Generator", "torch.default_generator",
    )),
    *(NameRule(p, "KJ202-tensor-subclass-output") for p in (
        "torch.Tensor._make_subclass", "torch.overrides", "torch.utils._python_dispatch",
        "torch._C._disabled_torch_function_impl", "torch.Tensor.__torch_function__",
        "torch.Tensor.__torch_dispatch__",
    )),
]
# Modules whose attributes must not be reassigned, even when reached through an alias.
MUTATION_OWNED_BY_OTHER_RULES = ("torch.backends",)
SUBCLASS_DUNDERS = frozenset({
    "__torch_function__", "__torch_dispatch__", "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__",
    "__bool__", "__float__", "__int__", "__index__", "__array__", "__array_function__", "__array_ufunc__",
    "__getattr__", "__instancecheck__", "__subclasscheck__", "__abs__", "__sub__",
})
TENSOR_CLASSES = {"torch.Tensor", "torch.nn.Parameter", "torch._C.TensorBase", "torch._C._TensorBase",
                  "torch.nn.parameter.Parameter", "torch.nn.Buffer"}
BUILD_ENV_VARS = {"TORCH_CUDA_ARCH_LIST", "MAX_JOBS", "TORCH_EXTENSIONS_DIR", "CUDA_HOME", "CXX", "CC"}


def detect_timing_names(ctx: PolicyContext) -> Iterator[Finding]:
    # Writes (allowed build variables included) are reported once, as writes, not as reads.
    write_lines = {f.line for f in _env_writes(ctx, include_build_vars=True)}
    # Streams are not here: work left running on another stream is judged from the kernel trace (KJ-R03).
    for found in name_findings(ctx, TIMING_NAMES):
        if found.rule == "KJ306-env-read" and found.line in write_lines:
            continue
        yield found
    for node in ast.walk(ctx.facts.tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr == "elapsed_time":
                yield ctx.finding("KJ308-clock-access", "measures elapsed time with CUDA events", node)
            elif node.func.attr in ("as_subclass",):
                yield ctx.finding("KJ202-tensor-subclass-output", "turns a tensor into another class", node)


def detect_env_writes(ctx: PolicyContext) -> Iterator[Finding]:
    yield from _env_writes(ctx, include_build_vars=False)


def _env_writes(ctx: PolicyContext, include_build_vars: bool) -> Iterator[Finding]:
    allowed = set() if include_build_vars else BUILD_ENV_VARS
    facts = ctx.facts
    for node in ast.walk(facts.tree):
        targets: list[ast.expr] = []
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        for target in targets:
            if isinstance(target, ast.Subscript) and resolved_name(ctx, target.value) == "os.environ":
                key = target.slice.value if isinstance(target.slice, ast.Constant) else None
                if key not in allowed:
                    yield ctx.finding("KJ307-env-write", f"sets the environment variable {str(key or '(computed)')}",
                                      node)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = resolved_name(ctx, node.func.value)
            if owner == "os.environ" and node.func.attr in ("update", "setdefault", "pop", "clear", "__setitem__"):
                key = node.args[0].value if node.args and isinstance(node.args[0], ast.Constant) else None
                if key not in allowed:
                    yield ctx.finding("KJ307-env-write", f"changes the environment with os.environ.{node.func.attr}",
                                      node)


def detect_monkeypatching(ctx: PolicyContext) -> Iterator[Finding]:
    """Assignments to attributes of imported modules, setattr on them, and sys.modules edits."""
    facts, rule = ctx.facts, "KJ303-monkeypatch"
    for node in ast.walk(facts.tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        for target in targets:
            for element in (target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]):
                yield from _patched_target(ctx, node, element)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr"):
            if node.args and facts.is_imported_root(node.args[0]):
                owner = facts.qualname(node.args[0])
                if not any(dotted_qualname(owner, p) for p in MUTATION_OWNED_BY_OTHER_RULES):
                    yield ctx.finding(rule, f"calls {node.func.id}() on the module {owner}", node)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
            "update", "setdefault", "__setitem__", "pop", "clear", "__delitem__",
        ):
            owner = resolved_name(ctx, node.func.value)
            if owner == "sys.modules" or (owner or "").endswith(".__dict__"):
                yield ctx.finding(rule, f"modifies {owner}", node)


# torch's operator registration: a kernel registered for one of ATen's own operators replaces it in the
# candidate's process, for the harness's calls too (the timer's L2 flush is a `zero_`).
REGISTRATION_MODULES = ("torch.library", "torch._library")
PRIVATE_DISPATCHER = "torch._C._dispatch_"  # torch._C._dispatch_library and the like: never a candidate's business
ATEN_NAMESPACE = "aten"


def detect_aten_overrides(ctx: PolicyContext) -> Iterator[Finding]:
    """torch.library (or the dispatcher's private API) used on ATen's namespace: `Library("aten", "IMPL")`,
    `impl("aten::zero_", ...)`, `register_kernel("aten::...", ...)`, as a call or a decorator."""
    for node in ast.walk(ctx.facts.tree):
        if not isinstance(node, ast.Call):
            continue
        callee = resolved_name(ctx, node.func) or ""
        private = callee.startswith(PRIVATE_DISPATCHER)
        if not private and not any(dotted_qualname(callee, module) for module in REGISTRATION_MODULES):
            continue
        names = [arg.value for arg in [*node.args, *(k.value for k in node.keywords)]
                 if isinstance(arg, ast.Constant) and isinstance(arg.value, str)]
        aten = [name for name in names if name == ATEN_NAMESPACE or name.startswith(f"{ATEN_NAMESPACE}::")]
        if aten or private:
            what = f"{aten[0]!r}" if aten else "the dispatcher's private API"
            yield ctx.finding("KJ303-monkeypatch", f"registers a kernel for ATen's operators ({callee} on {what})",
                              node)


def _patched_target(ctx: PolicyContext, statement: ast.AST, target: ast.AST) -> Iterator[Finding]:
    facts = ctx.facts
    if isinstance(target, ast.Attribute) and facts.is_imported_root(target):
        name = facts.qualname(target) or ""
        if target.attr == "__class__":
            yield ctx.finding("KJ202-tensor-subclass-output", "reassigns an object's __class__", statement)
        elif not any(dotted_qualname(name, p) for p in MUTATION_OWNED_BY_OTHER_RULES):
            yield ctx.finding("KJ303-monkeypatch", f"reassigns {name}", statement)
    elif isinstance(target, ast.Attribute) and target.attr == "__class__":
        yield ctx.finding("KJ202-tensor-subclass-output", "reassigns an object's __class__", statement)
    elif isinstance(target, ast.Subscript):
        owner = resolved_name(ctx, target.value) or ""
        if owner == "sys.modules" or owner.endswith("__dict__") or owner == "__builtins__":
            yield ctx.finding("KJ303-monkeypatch", f"replaces an entry of {owner}", statement)


def detect_tensor_subclasses(ctx: PolicyContext) -> Iterator[Finding]:
    facts, rule = ctx.facts, "KJ202-tensor-subclass-output"
    for node in ast.walk(facts.tree):
        if not isinstance(node, ast.ClassDef):
            continue
        bases = {facts.qualname(b) for b in node.bases}
        if bases & TENSOR_CLASSES:
            yield ctx.finding(rule, f"defines {node.name}, a subclass of torch.Tensor", node,
                              evidence=f"class {node.name}({', '.join(sorted(b for b in bases if b))})")
        overridden = sorted(
            s.name for s in node.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name in SUBCLASS_DUNDERS
        )
        if overridden:
            yield ctx.finding(rule, f"class {node.name} overrides {', '.join(overridden)}", node,
                              evidence=f"class {node.name}: def {overridden[0]}(...)")


DETECTORS = (detect_timing_names, detect_env_writes, detect_monkeypatching, detect_aten_overrides,
             detect_tensor_subclasses)
