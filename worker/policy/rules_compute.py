"""Threat class 1, in the Python source: is the work done by the candidate's own kernels?"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from .context import NameRule, PolicyContext, name_findings, resolved_name
from .kinds import TENSOR
from .pyfacts import dotted_qualname
from .registry import Finding
from .vocab import (
    ALLOWED_TORCH_NAMES,
    COMPUTE_BUILTINS,
    NOT_COMPUTE_PREFIXES,
    TENSOR_COMPUTE_METHODS,
)

COMPUTE_SUBMODULES = {"linalg", "special", "fft", "sparse", "nested", "masked", "signal", "functional"}
CUSTOM_OP_EXCLUDED = {"aten", "prims", "quantized", "_c10d_functional", "c10d", "higher_order"}

OUTSOURCING_NAMES = [
    NameRule("torch.compile", "KJ111-torch-compile"),
    NameRule("torch.jit", "KJ111-torch-compile"),
    NameRule("torch._dynamo", "KJ111-torch-compile"),
    NameRule("torch._inductor", "KJ111-torch-compile"),
    NameRule("torch.export", "KJ111-torch-compile"),
    NameRule("torch.fx", "KJ111-torch-compile"),
    NameRule("functorch.compile", "KJ111-torch-compile"),
    NameRule("torch.cuda.graph", "KJ112-cuda-graph"),
    NameRule("torch.cuda.graphs", "KJ112-cuda-graph"),
    NameRule("torch.cuda.CUDAGraph", "KJ112-cuda-graph"),
    NameRule("torch.cuda.make_graphed_callables", "KJ112-cuda-graph"),
    NameRule("torch.backends", "KJ113-torch-backend-knob"),
    NameRule("torch.set_float32_matmul_precision", "KJ113-torch-backend-knob"),
    NameRule("torch.set_flush_denormal", "KJ113-torch-backend-knob"),
    NameRule("torch.use_deterministic_algorithms", "KJ113-torch-backend-knob"),
    NameRule("torch.set_default_dtype", "KJ113-torch-backend-knob"),
    NameRule("torch.set_default_device", "KJ113-torch-backend-knob"),
    NameRule("torch.set_default_tensor_type", "KJ113-torch-backend-knob"),
    NameRule("torch.set_num_threads", "KJ113-torch-backend-knob"),
    NameRule("cupy", "KJ114-vendor-library"),
    NameRule("nvmath", "KJ114-vendor-library"),
    NameRule("cublas", "KJ114-vendor-library"),
    NameRule("cudnn", "KJ114-vendor-library"),
    NameRule("torch.cuda.cublas", "KJ114-vendor-library"),
]
REFERENCE_MODULES = {"reference", "ref", "problem", "harness", "solution", "model"}


def is_torch_compute(name: str) -> bool:
    if not name.startswith("torch.") or any(dotted_qualname(name, p) for p in NOT_COMPUTE_PREFIXES):
        return False
    parts = name.split(".")
    if parts[1] == "ops":
        return len(parts) > 2 and parts[2] in CUSTOM_OP_EXCLUDED
    if parts[1] == "Tensor":
        return len(parts) > 2 and parts[2] in TENSOR_COMPUTE_METHODS
    if parts[1] == "nn":
        return len(parts) > 3 and parts[2] == "functional"
    if len(parts) == 2:
        return parts[1] not in ALLOWED_TORCH_NAMES and not parts[1][:1].isupper()
    return parts[1] in COMPUTE_SUBMODULES


def detect_torch_compute(ctx: PolicyContext) -> Iterator[Finding]:
    facts = ctx.facts
    model_methods = {s.name for c in facts.model_classes for s in c.body if isinstance(s, ast.FunctionDef)}
    for function in facts.reachable:
        for node in facts.outermost_chains(function):
            name = resolved_name(ctx, node)
            if name and is_torch_compute(name):
                yield ctx.finding("KJ101-torch-compute-in-forward", f"runs {name} in the forward path", node)
        for node in ast.walk(function):
            yield from _compute_expression(ctx, node, function, model_methods)


def _compute_expression(ctx: PolicyContext, node: ast.AST, function: ast.AST, model_methods: set[str]):
    facts, kinds, rule = ctx.facts, ctx.kinds, "KJ101-torch-compute-in-forward"
    owner = facts.enclosing_function(node) or function

    def is_tensor(expr: ast.AST) -> bool:
        return kinds.kind(expr, owner) == TENSOR

    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        receiver = node.func.value
        method = node.func.attr
        if (
            method in TENSOR_COMPUTE_METHODS
            and not facts.is_imported_root(node.func)
            and not facts.is_extension_ref(receiver)
            and not (facts.is_self_attr(node.func) and method in model_methods)
            and not (isinstance(receiver, ast.Name) and receiver.id in facts.classes)
        ):
            yield ctx.finding(rule, f"calls the PyTorch tensor method .{method}() in the forward path", node)
        name = facts.qualname(node.func) or ""
        if (name.startswith("numpy.") or name.startswith("operator.")) and any(is_tensor(a) for a in node.args):
            yield ctx.finding(rule, f"computes on tensors with {name}", node)
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        if node.func.id in COMPUTE_BUILTINS and node.func.id not in facts.functions:
            if any(is_tensor(a) for a in node.args):
                yield ctx.finding(rule, f"computes on tensors with the builtin {node.func.id}()", node)
    elif isinstance(node, ast.BinOp):
        if isinstance(node.op, ast.MatMult) or is_tensor(node.left) or is_tensor(node.right):
            yield ctx.finding(rule, "does tensor arithmetic with PyTorch operators in the forward path", node)
    elif isinstance(node, ast.UnaryOp) and not isinstance(node.op, ast.Not) and is_tensor(node.operand):
        yield ctx.finding(rule, "does tensor arithmetic with PyTorch operators in the forward path", node)
    elif isinstance(node, ast.AugAssign) and (is_tensor(node.target) or is_tensor(node.value)):
        yield ctx.finding(rule, "updates a tensor with a PyTorch in-place operator in the forward path", node)
    elif isinstance(node, ast.Compare) and not any(
        isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for op in node.ops
    ):
        if any(is_tensor(v) for v in [node.left, *node.comparators]):
            yield ctx.finding(rule, "compares tensors elementwise with PyTorch in the forward path", node)
    elif isinstance(node, ast.Subscript) and is_tensor(node.slice):
        yield ctx.finding(rule, "indexes a tensor with a tensor (a PyTorch gather) in the forward path", node)


def detect_layer_calls(ctx: PolicyContext) -> Iterator[Finding]:
    facts, rule = ctx.facts, "KJ102-torch-module-in-forward"
    for function in facts.reachable:
        layer_loop_vars = {
            n.target.id for n in ast.walk(function)
            if isinstance(n, ast.For) and isinstance(n.target, ast.Name) and facts.is_self_attr(n.iter, facts.layer_attrs)
        }
        for node in ast.walk(function):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in ("forward", "__call__"):
                func = func.value
            if isinstance(func, ast.Subscript):
                func = func.value
            name = facts.qualname(func.func if isinstance(func, ast.Call) else func) or ""
            last = name.rsplit(".", 1)[-1]
            if facts.is_self_attr(func, facts.layer_attrs):
                yield ctx.finding(rule, f"calls the torch.nn layer self.{func.attr} in the forward path", node)
            elif isinstance(func, ast.Name) and func.id in layer_loop_vars:
                yield ctx.finding(rule, "calls torch.nn layers from a module list in the forward path", node)
            elif dotted_qualname(name, "torch.nn") and last[:1].isupper() and last not in ("Parameter", "Buffer"):
                yield ctx.finding(rule, f"builds and runs the torch.nn layer {name} in the forward path", node)


def detect_fallback(ctx: PolicyContext) -> Iterator[Finding]:
    facts, rule = ctx.facts, "KJ103-pytorch-fallback"
    scopes: list[ast.AST] = list(facts.reachable)
    module_tries = [s for s in facts.tree.body if isinstance(s, ast.Try)]
    for node in (n for scope in scopes for n in ast.walk(scope)):
        if isinstance(node, ast.Try) and _swallows(node):
            yield ctx.finding(rule, "catches exceptions in the forward path instead of letting them fail", node,
                              evidence=_try_evidence(ctx, node))
        if isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                if (facts.qualname(getattr(item.context_expr, "func", item.context_expr)) or "").endswith("suppress"):
                    yield ctx.finding(rule, "suppresses exceptions in the forward path", node)
    for node in module_tries:
        builds_kernel = any(facts.is_load_inline(n) or isinstance(n, (ast.Import, ast.ImportFrom)) for n in ast.walk(node))
        if builds_kernel and _swallows(node):
            yield ctx.finding(rule, "catches a failure to import or build its kernels and carries on without them",
                              node, evidence=_try_evidence(ctx, node))


def _swallows(node: ast.Try) -> bool:
    return any(not any(isinstance(s, ast.Raise) for s in handler.body) for handler in node.handlers)


def _try_evidence(ctx: PolicyContext, node: ast.Try) -> str:
    handler = next(h for h in node.handlers if not any(isinstance(s, ast.Raise) for s in h.body))
    return f"try: ... {ctx.facts.segment(handler, 120)}"


def detect_reference_model(ctx: PolicyContext) -> Iterator[Finding]:
    facts, rule = ctx.facts, "KJ104-reference-model-used"
    for node in ast.walk(facts.tree):
        if isinstance(node, ast.ClassDef):
            if node.name == "Model":
                yield ctx.finding(rule, "defines a class named Model, which shadows the reference", node,
                                  evidence=f"class {node.name}")
            for base in node.bases:
                if (facts.qualname(base) or "").rsplit(".", 1)[-1] == "Model":
                    yield ctx.finding(rule, f"class {node.name} subclasses the reference Model", node,
                                      evidence=f"class {node.name}({facts.segment(base)})")
        elif isinstance(node, ast.Call) and (facts.qualname(node.func) or "").rsplit(".", 1)[-1] == "Model":
            yield ctx.finding(rule, "instantiates the reference Model", node)
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.name == "Model" or (node.module or "").split(".")[0] in REFERENCE_MODULES:
                    yield ctx.finding(rule, f"imports {alias.name} from {node.module}", node)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in REFERENCE_MODULES:
                    yield ctx.finding(rule, f"imports the module {alias.name}", node)
    for name in ("get_inputs", "get_init_inputs"):
        if name in facts.functions:
            yield ctx.finding("KJ108-harness-name-defined", f"defines {name}()", facts.functions[name],
                              evidence=f"def {name}(...)")


def detect_kernel_launches(ctx: PolicyContext) -> Iterator[Finding]:
    """Decoys: kernels defined but never launched, or no kernel at all.

    With an explicit `pytorch` backend, check_candidate drops these rules (CUSTOM_KERNEL_RULES)."""
    facts = ctx.facts
    if not facts.triton_kernels and not facts.load_inline_calls:
        where = facts.model_classes[0] if facts.model_classes else None
        yield ctx.finding("KJ107-no-custom-kernel", "defines no @triton.jit kernel and calls no load_inline", where,
                          evidence=f"class {where.name}" if isinstance(where, ast.ClassDef) else None)
        return
    used_triton = _used_triton_kernels(ctx)
    extension_launched = any(_is_extension_call(ctx, n) for n in facts.reachable_nodes())
    if not used_triton and not extension_launched:
        first = next(iter(facts.triton_kernels.values()), None) or facts.load_inline_calls[0]
        yield ctx.finding("KJ105-decoy-kernel", "defines kernels that forward never launches", first,
                          evidence=_kernel_evidence(ctx, first))
        return
    for name, node in facts.triton_kernels.items():
        if name not in used_triton:
            yield ctx.finding("KJ106-unused-kernel", f"defines the Triton kernel {name} but never launches it", node,
                              evidence=f"def {name}(...)")
    if facts.load_inline_calls and not extension_launched:
        yield ctx.finding("KJ106-unused-kernel", "builds a CUDA extension that forward never calls",
                          facts.load_inline_calls[0], evidence="load_inline(...)")


def _used_triton_kernels(ctx: PolicyContext) -> set[str]:
    facts = ctx.facts
    used = {
        n.id if isinstance(n, ast.Name) else n.attr
        for n in facts.reachable_nodes()
        if isinstance(n, (ast.Name, ast.Attribute)) and facts.is_triton_kernel_ref(n)
    }
    changed = True
    while changed:  # device functions called from launched kernels are used too
        changed = False
        for name in list(used):
            kernel = facts.triton_kernels.get(name)
            for n in ast.walk(kernel) if kernel is not None else ():
                if isinstance(n, ast.Name) and n.id in facts.triton_kernels and n.id not in used:
                    used.add(n.id)
                    changed = True
    return used


def _is_extension_call(ctx: PolicyContext, node: ast.AST) -> bool:
    facts = ctx.facts
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
        return False
    if facts.is_extension_ref(node.func.value):
        return True
    name = facts.qualname(node.func) or ""
    if name.startswith("torch.ops.") and len(name.split(".")) > 3:
        return name.split(".")[2] not in CUSTOM_OP_EXCLUDED
    return node.func.attr in facts.extension_functions and not facts.is_imported_root(node.func)


def _kernel_evidence(ctx: PolicyContext, node: ast.AST) -> str:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return f"def {node.name}(...)"
    return ctx.facts.segment(node, 80)


def detect_outsourcing(ctx: PolicyContext) -> Iterator[Finding]:
    yield from name_findings(ctx, OUTSOURCING_NAMES)


DETECTORS = (
    detect_torch_compute, detect_layer_calls, detect_fallback, detect_reference_model,
    detect_kernel_launches, detect_outsourcing,
)
