"""Facts about a candidate's Python source that every rule needs, computed once.

Name resolution: `qualname(node)` turns `F.relu`, `getattr(torch, "mm")` or an imported alias
into a dotted name (`torch.nn.functional.relu`, `torch.mm`) using the candidate's imports and
module-level aliases. Reachability: the functions that run when the model is called (forward,
the helpers and methods it calls, hooks), excluding kernels. Kernels: Triton functions
(@triton.jit/autotune/heuristics), Numba CUDA kernels (@numba.cuda.jit, not device functions) and
load_inline extensions with the names bound to them.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import TypeGuard

TRITON_DECORATORS = {"triton.jit", "triton.autotune", "triton.heuristics", "triton.language.jit"}
# `from numba import cuda` makes `cuda.jit` this name; `@cuda.jit(device=True)` is a device function.
NUMBA_DECORATORS = {"numba.cuda.jit"}
LOAD_INLINE = "torch.utils.cpp_extension.load_inline"
ENTRY_METHODS = ("forward", "__call__", "_call_impl")

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
# Modules that reach the process, the interpreter (sys.modules: the harness's own modules), files,
# the network or clocks. Other modules re-export some of them as attributes (`torch.os`, `np.os`,
# `F.__builtins__`), and any object's module can be reached from it: `x.sys.modules[...]` walks around
# every rule about `import sys`. Honest kernels never spell these as an attribute of something else.
REACH_MODULES = frozenset({
    "os", "_os", "posix", "sys", "_sys", "builtins", "__builtins__", "__import__", "importlib", "runpy",
    "subprocess", "_posixsubprocess", "multiprocessing", "threading", "_thread", "ctypes", "_ctypes", "socket",
    "gc", "inspect", "traceback", "shutil", "pathlib", "tempfile", "io", "mmap", "marshal", "pickle",
    "resource", "time",
})


def dotted_qualname(qualname: str | None, prefix: str) -> bool:
    """True if `qualname` is `prefix` or inside it (`torch.cuda` matches `torch.cuda.Stream`)."""
    return qualname is not None and (qualname == prefix or qualname.startswith(prefix + "."))


def chain_attributes(node: ast.AST) -> list[str]:
    """The attribute names along a chain, root first: `a.b.c` -> [b, c]; `getattr(a, "b")` is `a.b`."""
    names: list[str] = []
    while True:
        if isinstance(node, ast.Attribute):
            names.append(node.attr)
            node = node.value
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
              and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
            names.append(node.args[1].value)
            node = node.args[0]
        else:
            return names[::-1]


def reached_module(qualname: str | None) -> str | None:
    """`torch.os.open` -> `os.open`: the dotted name from the first module of REACH_MODULES that the chain
    reaches as an attribute of something else; None when it reaches none."""
    if not qualname:
        return None
    parts = qualname.split(".")
    for index, part in enumerate(parts[1:], start=1):
        if part in REACH_MODULES:
            return ".".join(parts[index:])
    return None


def decorator_name(node: ast.expr) -> ast.expr:
    return node.func if isinstance(node, ast.Call) else node


@dataclass
class CandidateFacts:
    source: str
    tree: ast.Module
    # local name -> dotted name it stands for (imports, module-level aliases such as mm = torch.mm)
    aliases: dict[str, str] = field(default_factory=dict)
    imported: set[str] = field(default_factory=set)  # local names bound by import statements
    functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = field(default_factory=dict)
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)
    module_names: set[str] = field(default_factory=set)  # module-level assigned (non-import) names
    triton_kernels: dict[str, ast.AST] = field(default_factory=dict)
    numba_kernels: dict[str, ast.AST] = field(default_factory=dict)  # @cuda.jit kernels (not device functions)
    load_inline_calls: list[ast.Call] = field(default_factory=list)
    extension_names: set[str] = field(default_factory=set)  # module names bound to load_inline(...)
    extension_attrs: set[str] = field(default_factory=set)  # self.<attr> bound to an extension
    model_classes: list[ast.ClassDef] = field(default_factory=list)
    reachable: list[FunctionNode] = field(default_factory=list)
    parents: dict[ast.AST, ast.AST] = field(default_factory=dict)

    @property
    def python_kernels(self) -> dict[str, ast.AST]:
        """Kernels written in Python (Triton and Numba), by name."""
        return {**self.numba_kernels, **self.triton_kernels}

    # ---- name resolution -------------------------------------------------------------------
    def qualname(self, node: ast.AST) -> str | None:
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id, node.id)
        if isinstance(node, ast.Attribute):
            base = self.qualname(node.value)
            return f"{base}.{node.attr}" if base else None
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "getattr"
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            base = self.qualname(node.args[0])
            return f"{base}.{node.args[1].value}" if base else None
        return None

    def is_imported_root(self, node: ast.AST) -> bool:
        """True if the chain `a.b.c` starts at a name bound by an import statement."""
        while isinstance(node, ast.Attribute):
            node = node.value
        return isinstance(node, ast.Name) and node.id in self.imported

    def outermost_chains(self, root: ast.AST):
        """Yield Name/Attribute/getattr nodes that are not part of a longer attribute chain."""
        for node in ast.walk(root):
            if not isinstance(node, (ast.Name, ast.Attribute, ast.Call)):
                continue
            if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id == "getattr"):
                continue
            parent = self.parents.get(node)
            if isinstance(parent, ast.Attribute) and parent.value is node:
                continue
            yield node

    def segment(self, node: ast.AST, limit: int = 160) -> str:
        text = ast.get_source_segment(self.source, node) or ""
        text = " ".join(text.split())
        return text if len(text) <= limit else text[: limit - 3] + "..."

    def is_self_attr(self, node: ast.AST, attrs: set[str] | None = None) -> TypeGuard[ast.Attribute]:
        return (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
            and (attrs is None or node.attr in attrs)
        )

    def is_extension_ref(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Name):
            return node.id in self.extension_names
        return self.is_self_attr(node, self.extension_attrs)

    def is_load_inline(self, node: ast.AST) -> TypeGuard[ast.Call]:
        if not isinstance(node, ast.Call):
            return False
        name = self.qualname(node.func) or ""
        return name == LOAD_INLINE or name.endswith(".load_inline") or name == "load_inline"

    def enclosing_function(self, node: ast.AST) -> ast.AST | None:
        parent = self.parents.get(node)
        while parent is not None and not isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            parent = self.parents.get(parent)
        return parent

    def reachable_nodes(self):
        """Every node inside the forward-reachable functions (each node once)."""
        seen: set[int] = set()
        for function in self.reachable:
            for node in ast.walk(function):
                if id(node) not in seen:
                    seen.add(id(node))
                    yield node


def build_facts(source: str, tree: ast.Module) -> CandidateFacts:
    facts = CandidateFacts(source=source, tree=tree)
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            facts.parents[child] = node
    _collect_imports(facts)
    _collect_module_level(facts)
    _collect_kernels(facts)
    _collect_model(facts)
    _collect_reachable(facts)
    return facts


def _collect_imports(facts: CandidateFacts) -> None:
    for node in ast.walk(facts.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                local = alias.asname or alias.name.split(".")[0]
                facts.aliases[local] = alias.name if alias.asname else local
                facts.imported.add(local)
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            for alias in node.names:
                local = alias.asname or alias.name
                facts.aliases[local] = f"{module}.{alias.name}" if module else alias.name
                facts.imported.add(local)


def _collect_module_level(facts: CandidateFacts) -> None:
    for stmt in facts.tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            facts.functions[stmt.name] = stmt
        elif isinstance(stmt, ast.ClassDef):
            facts.classes[stmt.name] = stmt
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        facts.module_names.add(name.id)
            value = stmt.value
            if value is None or len(targets) != 1 or not isinstance(targets[0], ast.Name):
                continue
            # mm = torch.mm: later calls of mm resolve to torch.mm
            if isinstance(value, (ast.Attribute, ast.Name)) and facts.is_imported_root(value):
                facts.aliases[targets[0].id] = facts.qualname(value) or targets[0].id


def _collect_kernels(facts: CandidateFacts) -> None:
    for node in ast.walk(facts.tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names = {facts.qualname(decorator_name(d)) for d in node.decorator_list}
            if names & TRITON_DECORATORS:
                facts.triton_kernels[node.name] = node
            elif any(_is_numba_kernel_decorator(facts, d) for d in node.decorator_list):
                facts.numba_kernels[node.name] = node
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            # kernel = triton.jit(fn), kernel = cuda.jit(fn)
            name = facts.qualname(node.value.func)
            kernels: dict[str, ast.AST] | None = (facts.triton_kernels if name in TRITON_DECORATORS
                       else facts.numba_kernels if name in NUMBA_DECORATORS and node.value.args
                       and not _is_device_function(node.value) else None)
            for target in node.targets if kernels is not None else []:
                if kernels is not None and isinstance(target, ast.Name):
                    kernels[target.id] = node
        if facts.is_load_inline(node):
            facts.load_inline_calls.append(node)
    for node in ast.walk(facts.tree):
        if not isinstance(node, ast.Assign):
            continue
        binds_extension = facts.is_load_inline(node.value) or (
            isinstance(node.value, ast.Name) and node.value.id in facts.extension_names
        )
        if not binds_extension:
            continue
        for target in node.targets:
            if isinstance(target, ast.Name):
                facts.extension_names.add(target.id)
            elif facts.is_self_attr(target):
                facts.extension_attrs.add(target.attr)


def _is_numba_kernel_decorator(facts: CandidateFacts, decorator: ast.expr) -> bool:
    return facts.qualname(decorator_name(decorator)) in NUMBA_DECORATORS and not _is_device_function(decorator)


def _is_device_function(node: ast.expr) -> bool:
    """`cuda.jit(device=True)`: a function kernels call, never launched itself."""
    return isinstance(node, ast.Call) and any(
        k.arg == "device" and not (isinstance(k.value, ast.Constant) and not k.value.value) for k in node.keywords)


def _collect_model(facts: CandidateFacts) -> None:
    if "ModelNew" in facts.classes:
        facts.model_classes = _with_candidate_bases(facts, facts.classes["ModelNew"])
    else:
        facts.model_classes = [
            cls for cls in facts.classes.values()
            if any(isinstance(s, ast.FunctionDef) and s.name == "forward" for s in cls.body)
        ]


def _with_candidate_bases(facts: CandidateFacts, cls: ast.ClassDef) -> list[ast.ClassDef]:
    ordered, pending = [], [cls]
    while pending:
        current = pending.pop(0)
        if current in ordered:
            continue
        ordered.append(current)
        for base in current.bases:
            if isinstance(base, ast.Name) and base.id in facts.classes:
                pending.append(facts.classes[base.id])
    return ordered


def _collect_reachable(facts: CandidateFacts) -> None:
    methods: dict[str, FunctionNode] = {}
    for cls in reversed(facts.model_classes):  # subclasses override bases
        for stmt in cls.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                methods[stmt.name] = stmt
    pending: list[FunctionNode] = [methods[name] for name in ENTRY_METHODS if name in methods]
    # Hooks run on every call, like forward.
    for cls in facts.model_classes:
        for node in ast.walk(cls):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr.startswith("register_")
                and node.func.attr.endswith("hook")
            ):
                pending.extend(_callables_in(facts, node.args, methods))
    reached: list[FunctionNode] = []
    while pending:
        function = pending.pop()
        if function in reached or getattr(function, "name", None) in facts.python_kernels:
            continue
        reached.append(function)
        for node in ast.walk(function):
            if isinstance(node, ast.Name) and node.id in facts.functions:
                pending.append(facts.functions[node.id])
            elif facts.is_self_attr(node) and node.attr in methods:
                pending.append(methods[node.attr])
            elif (
                isinstance(node, ast.Attribute)
                and node.attr == "apply"
                and isinstance(node.value, ast.Name)
                and node.value.id in facts.classes
            ):
                # Custom autograd.Function: Fn.apply(x) runs Fn.forward
                for stmt in facts.classes[node.value.id].body:
                    if isinstance(stmt, ast.FunctionDef) and stmt.name == "forward":
                        pending.append(stmt)
    facts.reachable = reached


def _callables_in(facts: CandidateFacts, args: list[ast.expr], methods: dict[str, FunctionNode]):
    for arg in args:
        if isinstance(arg, ast.Lambda):
            yield arg
        elif isinstance(arg, ast.Name) and arg.id in facts.functions:
            yield facts.functions[arg.id]
        elif facts.is_self_attr(arg) and arg.attr in methods:
            yield methods[arg.attr]
